//! The counters of a queue pair: what its engine saw on the wire and did about it.

/// Counters of one queue pair. Wire problems are counted here, never returned as errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets produced by `poll_transmit`.
    pub tx_packets: u64,
    /// Packets given to `handle`.
    pub rx_packets: u64,
    /// Packets that did not parse (dropped).
    pub rx_malformed: u64,
    /// Packets for another queue pair (dropped).
    pub rx_wrong_qp: u64,
    /// Data packets sent again after a NAK or timeout.
    pub retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Duplicate packets received (re-ACKed or READ re-executed).
    pub duplicates: u64,
    /// Packets ahead of the expected PSN (RC: NAKed; UC: dropped).
    pub out_of_sequence: u64,
    /// NAKs sent, of any kind.
    pub naks_sent: u64,
    /// NAKs received, of any kind.
    pub naks_received: u64,
    /// Remote accesses refused (wrong key, bounds, rights).
    pub access_errors: u64,
    /// Requests refused as malformed (lengths, opcode order).
    pub invalid_requests: u64,
    /// UC messages abandoned after a gap.
    pub uc_messages_dropped: u64,
    /// UC packets dropped while waiting for the next First/Only.
    pub uc_packets_dropped: u64,
    /// ACK packets sent.
    pub acks_sent: u64,
    /// Packets whose P_Key does not admit them to this queue pair's partition (dropped, as a
    /// NIC drops them and counts a P_Key violation).
    pub bad_pkey: u64,
    /// PART: packets that hit a non-resident page and were not placed: WRITEs and SENDs at the
    /// responder (a resend that hits the same pending fault again is not counted twice), READ
    /// responses at the requester.
    pub faults: u64,
    /// PART: page-in requests handed to the driver.
    pub page_ins: u64,
    /// PART: pages made resident by those requests (as the driver reported them).
    pub pages_in: u64,
    /// PART, responder: fault NAKs sent (the "hold" RNR NAKs, resends of them included).
    pub fault_naks: u64,
    /// PART, responder: explicit retransmission requests sent after a page-in.
    pub errs_sent: u64,
    /// PART, requester: explicit retransmission requests received while holding.
    pub errs_received: u64,
    /// PART, requester: holds ended by the fault timeout (TO) rather than by an ERR.
    pub fault_timeouts: u64,
    /// PART: packets dropped behind a stall (later PSNs of the same queue pair, resent after
    /// the ERR or the fault timeout; READ responses, asked again after our page-in).
    pub held_drops: u64,
    /// PART, responder: packets that waited in the reorder window for a page-in wave and were
    /// not sent again.
    pub wave_holds: u64,
    /// PART, requester: holds ended at the pace the responder advertised in its fault NAK.
    pub paced_resumes: u64,
    /// PART, both sides: sources (a WRITE's or SEND's local buffer, a READ response's region)
    /// populated before reading.
    pub source_faults: u64,
    /// shm, requester: WRITEs and READs carried out one-sided in a region the peer granted.
    pub one_sided: u64,
    /// shm, responder: entries taken from the completion ring (WRITE-with-immediate done
    /// one-sided by the peer, and SENDs through the ring).
    pub ring_completions: u64,
    /// shm, requester: SENDs (up to 4 KiB) carried through the peer's completion ring.
    pub ring_sends: u64,
}

/// Sums the counters of several queue pairs (a server's totals).
impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.tx_packets += o.tx_packets;
        self.rx_packets += o.rx_packets;
        self.rx_malformed += o.rx_malformed;
        self.rx_wrong_qp += o.rx_wrong_qp;
        self.retransmits += o.retransmits;
        self.timeouts += o.timeouts;
        self.duplicates += o.duplicates;
        self.out_of_sequence += o.out_of_sequence;
        self.naks_sent += o.naks_sent;
        self.naks_received += o.naks_received;
        self.access_errors += o.access_errors;
        self.invalid_requests += o.invalid_requests;
        self.uc_messages_dropped += o.uc_messages_dropped;
        self.uc_packets_dropped += o.uc_packets_dropped;
        self.acks_sent += o.acks_sent;
        self.bad_pkey += o.bad_pkey;
        self.faults += o.faults;
        self.page_ins += o.page_ins;
        self.pages_in += o.pages_in;
        self.fault_naks += o.fault_naks;
        self.errs_sent += o.errs_sent;
        self.errs_received += o.errs_received;
        self.fault_timeouts += o.fault_timeouts;
        self.held_drops += o.held_drops;
        self.wave_holds += o.wave_holds;
        self.paced_resumes += o.paced_resumes;
        self.source_faults += o.source_faults;
        self.one_sided += o.one_sided;
        self.ring_completions += o.ring_completions;
        self.ring_sends += o.ring_sends;
    }
}
