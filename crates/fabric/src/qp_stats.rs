//! A queue pair's counters, as every driver reports them.

/// Counters of a queue pair (those that apply to its transport; others stay 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Protocol counters (udp: the RC/UC engine; tcp/shm: requests and refusals).
    pub engine: crate::engine::Stats,
    /// Datagrams dropped by the receive device for a bad ICRC (udp; shared by the device's
    /// queue pairs).
    pub icrc_errors: u64,
    /// Datagrams for unknown queue pairs at the receive device (udp).
    pub unknown_qp: u64,
}

impl QpStats {
    /// Adds another queue pair's counters: protocol counters add up; the device counters are
    /// shared by a device's queue pairs, so the largest reading is kept.
    pub fn merge(&mut self, o: &QpStats) {
        self.engine += o.engine;
        self.icrc_errors = self.icrc_errors.max(o.icrc_errors);
        self.unknown_qp = self.unknown_qp.max(o.unknown_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::QpStats;

    #[test]
    fn merged_stats_add_protocol_counters_and_keep_the_largest_device_reading() {
        let mut a = QpStats::default();
        a.engine.rx_packets = 3;
        a.engine.bad_pkey = 1;
        a.icrc_errors = 5;
        let mut b = QpStats::default();
        b.engine.rx_packets = 4;
        b.icrc_errors = 7;
        a.merge(&b);
        assert_eq!((a.engine.rx_packets, a.engine.bad_pkey), (7, 1));
        assert_eq!(
            a.icrc_errors, 7,
            "one device's counter, read twice, is not summed"
        );
    }
}
