//! Fault injection on the udp transmit path (a "device layer" in smoltcp's sense): drop,
//! duplicate or reorder outgoing datagrams with given probabilities, to test and demonstrate
//! the RC recovery on real sockets where no `tc netem` is available.

/// Probabilities (0.0..=1.0) of what happens to each outgoing datagram.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// Dropped.
    pub loss: f64,
    /// Sent twice.
    pub duplicate: f64,
    /// Held back and sent after the next datagram.
    pub reorder: f64,
    /// Seed of the deterministic generator.
    pub seed: u64,
}

/// Applies [`Faults`] to a batch of packets.
pub(crate) struct Injector {
    f: Faults,
    state: u64,
}

impl Injector {
    pub(crate) fn new(f: Faults) -> Injector {
        Injector {
            f,
            state: f.seed | 1,
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        // xorshift64: deterministic per seed, cheap.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        p > 0.0 && ((self.state >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// The order in which to send the batch's packets (indices; repeats are duplicates,
    /// missing ones are lost).
    pub(crate) fn schedule(&mut self, n: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(n + 2);
        let mut held: Option<usize> = None;
        for i in 0..n {
            if self.chance(self.f.loss) {
                continue;
            }
            if held.is_none() && i + 1 < n && self.chance(self.f.reorder) {
                held = Some(i);
                continue;
            }
            out.push(i);
            if self.chance(self.f.duplicate) {
                out.push(i);
            }
            if let Some(h) = held.take() {
                out.push(h);
            }
        }
        out.extend(held);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_drops_duplicates_and_reorders_at_about_the_given_rates() {
        let mut inj = Injector::new(Faults {
            loss: 0.1,
            duplicate: 0.1,
            reorder: 0.1,
            seed: 42,
        });
        let s = inj.schedule(100_000);
        let mut seen = vec![0u32; 100_000];
        for &i in &s {
            seen[i] += 1;
        }
        let lost = seen.iter().filter(|&&c| c == 0).count();
        let dup = seen.iter().filter(|&&c| c == 2).count();
        assert!((8_000..12_000).contains(&lost), "{lost}");
        assert!((7_000..11_000).contains(&dup), "{dup}");
        let swaps = s.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(swaps > 5_000, "{swaps}");
        let none = Injector::new(Faults {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            seed: 1,
        })
        .schedule(10);
        assert_eq!(none, (0..10).collect::<Vec<_>>());
    }
}
