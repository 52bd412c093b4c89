//! Timing of every u8 kernel on random descriptors (not a test, not a benchmark of record).
//!
//! `cargo run --release -p remora-match --example match_speed -- N_QUERY N_TRAIN [DIM] [THREADS]`
//! prints, per kernel, the seconds of one `knn2_u8` call and the multiply-adds per second
//! (`n_query · n_train · dim`), and checks that every kernel found the same neighbours.

use std::time::Instant;

use remora_match::{knn2_u8, Kernel, Options};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric arguments"))
        .collect();
    let nq = args.first().copied().unwrap_or(30_000);
    let nt = args.get(1).copied().unwrap_or(47_000);
    let dim = args.get(2).copied().unwrap_or(128);
    let threads = args.get(3).copied();
    // xorshift: reproducible without a dependency.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut gen = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 56) as u8
            })
            .collect()
    };
    let (q, t) = (gen(nq * dim), gen(nt * dim));
    let macs = nq as f64 * nt as f64 * dim as f64;
    println!(
        "{nq} queries x {nt} train x {dim} dims = {:.3e} multiply-adds, threads {:?}",
        macs, threads
    );
    let mut reference = None;
    for kernel in Kernel::available() {
        if kernel == Kernel::Portable && macs > 1e11 && std::env::var_os("SPEED_PORTABLE").is_none()
        {
            println!("{kernel:?}: skipped (set SPEED_PORTABLE=1 to time it)");
            continue;
        }
        let opts = Options {
            kernel,
            threads,
            ..Options::default()
        };
        let t0 = Instant::now();
        let n = knn2_u8(&q, &t, dim, &opts).expect("valid input");
        let secs = t0.elapsed().as_secs_f64();
        println!("{kernel:?}: {secs:.3} s, {:.1} GMAC/s", macs / secs / 1e9);
        match &reference {
            None => reference = Some(n),
            Some(r) => assert!(r == &n, "{kernel:?} disagrees with the first kernel"),
        }
    }
}
