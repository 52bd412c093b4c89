//! Prefetch policies: which units to fetch along with a faulting one. Pure logic, no I/O.
//!
//! - `None`: only the faulting unit.
//! - `Next(n)`: the `n` units after it.
//! - `Adaptive`: detects a stride by majority vote over the last deltas between faults (Leap);
//!   while the stride holds, the window doubles up to `max`; when no stride has a majority it
//!   falls back to nothing.

/// A prefetch policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefetch {
    /// No prefetch.
    #[default]
    None,
    /// The next N units after each fault.
    Next(usize),
    /// Stride detection with a window that grows up to `max` units.
    Adaptive {
        /// Largest window (units).
        max: usize,
    },
}

impl std::str::FromStr for Prefetch {
    type Err = String;
    /// `none`, `next:N`, `adaptive` or `adaptive:MAX`.
    fn from_str(s: &str) -> Result<Prefetch, String> {
        let bad = || format!("prefetch `{s}`: expected none, next:N, adaptive or adaptive:MAX");
        match s.split_once(':') {
            None if s == "none" => Ok(Prefetch::None),
            None if s == "adaptive" => Ok(Prefetch::Adaptive { max: 32 }),
            Some(("next", n)) => n.parse().map(Prefetch::Next).map_err(|_| bad()),
            Some(("adaptive", n)) => n
                .parse()
                .map(|max| Prefetch::Adaptive { max })
                .map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prefetch::None => write!(f, "none"),
            Prefetch::Next(n) => write!(f, "next:{n}"),
            Prefetch::Adaptive { max } => write!(f, "adaptive:{max}"),
        }
    }
}

const HISTORY: usize = 8;

/// The per-region prefetch state.
#[derive(Debug, Clone)]
pub struct Prefetcher {
    policy: Prefetch,
    last: Option<usize>,
    deltas: [i64; HISTORY],
    n: usize,
    window: usize,
    /// The unit right after the last prefetched window, and the stride that produced it.
    expect: Option<(usize, i64)>,
}

impl Prefetcher {
    /// A fresh state for `policy`.
    pub fn new(policy: Prefetch) -> Prefetcher {
        Prefetcher {
            policy,
            last: None,
            deltas: [0; HISTORY],
            n: 0,
            window: 1,
            expect: None,
        }
    }
    /// The policy.
    pub fn policy(&self) -> Prefetch {
        self.policy
    }

    /// The majority stride of the recorded deltas, if one delta value holds more than half.
    fn majority(&self) -> Option<i64> {
        let k = self.n.min(HISTORY);
        if k < 2 {
            return None;
        }
        let d = &self.deltas[..k];
        // Boyer-Moore vote, then a count to confirm.
        let mut cand = 0i64;
        let mut c = 0usize;
        for &x in d {
            if c == 0 {
                cand = x;
                c = 1;
            } else if x == cand {
                c += 1;
            } else {
                c -= 1;
            }
        }
        let count = d.iter().filter(|&&x| x == cand).count();
        (count * 2 > k && cand != 0).then_some(cand)
    }

    /// Records a fault on `unit` (of `units` in the region) and appends the units to prefetch.
    pub fn on_fault(&mut self, unit: usize, units: usize, out: &mut Vec<usize>) {
        match self.policy {
            Prefetch::None => {}
            Prefetch::Next(n) => out.extend((unit + 1..units).take(n)),
            Prefetch::Adaptive { max } => {
                if let Some(last) = self.last {
                    // A fault just past the prefetched window continues the stride: the pages
                    // in between were accessed too, they just did not fault.
                    let delta = match self.expect {
                        Some((e, s)) if e == unit => s,
                        _ => unit as i64 - last as i64,
                    };
                    self.deltas[self.n % HISTORY] = delta;
                    self.n += 1;
                }
                self.last = Some(unit);
                match self.majority() {
                    Some(stride) => {
                        let mut u = unit as i64;
                        for _ in 0..self.window {
                            u += stride;
                            if u < 0 || u as usize >= units {
                                break;
                            }
                            out.push(u as usize);
                        }
                        let next = u + stride;
                        self.expect = (next >= 0).then_some((next as usize, stride));
                        self.window = (self.window * 2).min(max.max(1));
                    }
                    None => {
                        self.window = 1;
                        self.expect = None;
                    }
                }
            }
        }
    }
}

/// A recorded working set: the units a run touched, in first-touch order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkingSet {
    /// Unit size the record was taken with.
    pub unit: usize,
    /// Units in first-touch order.
    pub units: Vec<usize>,
}

impl WorkingSet {
    /// Text form: first line `unit N`, then one unit index per line.
    pub fn to_text(&self) -> String {
        let mut s = format!("unit {}\n", self.unit);
        for u in &self.units {
            s.push_str(&u.to_string());
            s.push('\n');
        }
        s
    }
    /// Parses the text form.
    pub fn from_text(t: &str) -> Result<WorkingSet, String> {
        let mut lines = t.lines();
        let unit = lines
            .next()
            .and_then(|l| l.strip_prefix("unit "))
            .and_then(|n| n.trim().parse().ok())
            .ok_or("working set: first line must be `unit N`")?;
        let units = lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                l.trim()
                    .parse()
                    .map_err(|_| format!("working set: bad line `{l}`"))
            })
            .collect::<Result<_, _>>()?;
        Ok(WorkingSet { unit, units })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(p: Prefetch, faults: &[usize], units: usize) -> Vec<Vec<usize>> {
        let mut pf = Prefetcher::new(p);
        faults
            .iter()
            .map(|&u| {
                let mut v = Vec::new();
                pf.on_fault(u, units, &mut v);
                v
            })
            .collect()
    }

    #[test]
    fn next_n_stops_at_the_end() {
        let r = run(Prefetch::Next(3), &[0, 8], 10);
        assert_eq!(r, vec![vec![1, 2, 3], vec![9]]);
    }

    #[test]
    fn adaptive_detects_a_stride_and_grows() {
        let r = run(Prefetch::Adaptive { max: 4 }, &[0, 3, 6, 9, 12], 100);
        assert!(r[0].is_empty() && r[1].is_empty());
        assert_eq!(r[2], vec![9]);
        assert_eq!(r[3], vec![12, 15]);
        assert_eq!(r[4], vec![15, 18, 21, 24]);
    }

    #[test]
    fn adaptive_follows_a_sequential_scan_through_its_own_prefetch() {
        // Faults of a scan with prefetch land just past each window.
        let mut pf = Prefetcher::new(Prefetch::Adaptive { max: 8 });
        let mut u = 0;
        let mut faults = 0;
        while u < 200 {
            let mut v = Vec::new();
            pf.on_fault(u, 1000, &mut v);
            faults += 1;
            u = v.last().map_or(u + 1, |l| l + 1);
        }
        assert!(faults < 40, "{faults} faults for 200 units");
    }

    #[test]
    fn adaptive_backs_off_on_random_access() {
        let r = run(
            Prefetch::Adaptive { max: 8 },
            &[5, 90, 13, 44, 71, 2, 60],
            100,
        );
        assert!(r.iter().skip(2).all(|v| v.is_empty()), "{r:?}");
    }

    #[test]
    fn adaptive_survives_one_outlier() {
        let r = run(
            Prefetch::Adaptive { max: 8 },
            &[0, 1, 2, 3, 50, 51, 52],
            100,
        );
        assert!(!r[6].is_empty(), "{r:?}");
        assert_eq!(r[6][0], 53);
    }

    #[test]
    fn parses() {
        assert_eq!("next:4".parse::<Prefetch>(), Ok(Prefetch::Next(4)));
        assert_eq!("none".parse::<Prefetch>(), Ok(Prefetch::None));
        assert_eq!(
            "adaptive".parse::<Prefetch>(),
            Ok(Prefetch::Adaptive { max: 32 })
        );
        assert!("next:x".parse::<Prefetch>().is_err());
    }

    #[test]
    fn working_set_roundtrip() {
        let w = WorkingSet {
            unit: 4096,
            units: vec![3, 1, 7],
        };
        assert_eq!(WorkingSet::from_text(&w.to_text()), Ok(w));
        assert!(WorkingSet::from_text("3\n").is_err());
    }

    proptest! {
        #[test]
        fn prefetch_stays_in_range(faults in proptest::collection::vec(0usize..50, 1..40), max in 1usize..16) {
            for p in [Prefetch::Next(max), Prefetch::Adaptive { max }] {
                for v in run(p, &faults, 50) {
                    prop_assert!(v.iter().all(|&u| u < 50));
                    prop_assert!(v.len() <= max);
                }
            }
        }
    }
}
