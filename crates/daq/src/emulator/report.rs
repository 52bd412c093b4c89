//! What an emulator run reports: apart from the emulator because its native mode
//! (`native::send`), which the emulator runs, makes one too.

/// What an emulator run did.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct EmulatorReport {
    /// Detector frames sent (every module's part of them, to every receiver concerned).
    pub frames_sent: u64,
    /// Payload bytes posted.
    pub bytes: u64,
    /// WRITEs posted (markers included).
    pub writes: u64,
    /// Seconds from the start signal to the last post.
    pub seconds: f64,
    /// Packets the transmitters' queue pairs sent (before any injected loss).
    pub packets: u64,
    /// Seconds the transmitters waited for ring credits (`pause` and `backpressure`), the
    /// longest-waiting transmitter's.
    pub credit_wait_seconds: f64,
}
