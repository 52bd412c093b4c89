#![allow(dead_code)]
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread; fails the test if it does not finish within `secs`.
pub fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            let _ = h.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("sender dropped without sending"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test did not finish within {secs} s"),
    }
}

/// Deterministic pseudo-random bytes with zero runs every few units.
pub fn pattern(len: usize, unit: usize) -> Vec<u8> {
    let mut x = 0x9e3779b97f4a7c15u64;
    let mut v = vec![0u8; len];
    for (i, b) in v.iter_mut().enumerate() {
        if (i / unit) % 5 == 3 {
            continue; // a zero unit
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v
}

/// A small xorshift for random access orders.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
