//! Grouping a batch of packed packets into `sendmmsg` entries: runs of equal-size packets
//! leave as one UDP GSO send each.
use super::sys;

/// Splits packed packets into sends: runs of equal-size packets (the last may be shorter)
/// become one GSO send each.
pub(super) fn gso_runs<'a>(buf: &'a [u8], lens: &[usize], gso: bool) -> Vec<sys::Send<'a>> {
    let mut sends = Vec::with_capacity(lens.len());
    let mut pos = 0;
    let mut i = 0;
    while i < lens.len() {
        let seg = lens[i];
        let mut j = i + 1;
        let mut total = seg;
        if gso {
            let max = sys::GSO_MAX_SEGMENTS.min(sys::GSO_MAX_BYTES / seg.max(1));
            while j < lens.len() && j - i < max && total + lens[j] <= sys::GSO_MAX_BYTES {
                // A shorter packet may close a run of equal ones, never start one.
                if lens[j] > seg || (lens[j] < seg && j - i < 2) {
                    break;
                }
                total += lens[j];
                j += 1;
                if lens[j - 1] < seg {
                    break;
                }
            }
        }
        sends.push(sys::Send {
            data: &buf[pos..pos + total],
            segment: if j - i > 1 { seg as u16 } else { 0 },
        });
        pos += total;
        i = j;
    }
    sends
}

#[cfg(test)]
mod tests {
    use super::gso_runs;

    #[test]
    fn gso_runs_group_equal_sizes_and_end_on_a_short_one() {
        let buf = vec![0u8; 100_000];
        let lens = [4128, 4112, 4112, 4112, 100, 4112, 4112];
        let sends = gso_runs(&buf, &lens, true);
        let shape: Vec<_> = sends.iter().map(|s| (s.data.len(), s.segment)).collect();
        assert_eq!(shape, [(4128, 0), (4112 * 3 + 100, 4112), (4112 * 2, 4112)]);
        let plain = gso_runs(&buf, &lens, false);
        assert_eq!(plain.len(), lens.len());
        assert!(plain.iter().all(|s| s.segment == 0));
    }
}
