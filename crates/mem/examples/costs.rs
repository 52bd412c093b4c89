//! Rough costs of the memory layer's operations on this machine (not a test; timings vary):
//! `cargo run --release -p remora-mem --example costs`.
//!
//! Prints ns per `check_remote`, and µs to make a fresh buffer usable by pinning it (mlock at
//! registration) versus paging it in on demand with each PART policy.

use std::time::Instant;

use remora_mem::{Access, Buffer, Mode, PageIn, Pd, PAGE_SIZE};

fn main() {
    let pd = Pd::new();
    let regions: Vec<_> = (0..64)
        .map(|_| {
            pd.register(
                Buffer::anonymous(1 << 16).unwrap(),
                Access::ALL,
                Mode::OnDemand,
            )
            .unwrap()
        })
        .collect();
    let n = 2_000_000u64;
    let t = Instant::now();
    let mut sum = 0usize;
    for i in 0..n {
        let r = &regions[(i % 64) as usize];
        let a = pd
            .check_remote(r.rkey(), r.addr() + (i % 1000), 64, Access::REMOTE_WRITE)
            .unwrap();
        sum += a.offset;
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!("check_remote, 1 thread: {ns:.1} ns/op (checksum {sum})");
    // Two threads on the same table (the read lock's counter is shared).
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..2u64 {
            let (pd, regions) = (&pd, &regions);
            s.spawn(move || {
                let mut sum = 0usize;
                for i in 0..n / 2 {
                    let r = &regions[((i * 2 + k) % 64) as usize];
                    sum += pd
                        .check_remote(r.rkey(), r.addr() + (i % 1000), 64, Access::REMOTE_WRITE)
                        .unwrap()
                        .offset;
                }
                std::hint::black_box(sum);
            });
        }
    });
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!("check_remote, 2 threads: {ns:.1} ns per op overall");

    println!(
        "{:>10} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "bytes", "pin_us", "PIO_us", "PI4_us", "PIA_us", "range_us"
    );
    for size in [4 << 10, 64 << 10, 1 << 20, 4 << 20] {
        let reps = (64 << 20) / size;
        let pin = time(reps, || {
            let r = pd
                .register(Buffer::anonymous(size).unwrap(), Access::ALL, Mode::Pinned)
                .unwrap();
            pd.deregister(r.rkey()).unwrap();
        });
        let policy = |p: PageIn| {
            time(reps, || {
                let r = pd
                    .register(
                        Buffer::anonymous(size).unwrap(),
                        Access::ALL,
                        Mode::OnDemand,
                    )
                    .unwrap();
                // Fault in the whole buffer page by page, as a receiver would.
                let mut off = 0;
                while off < size {
                    if !r.is_resident(off, 1) {
                        r.page_in(off, p).unwrap();
                    }
                    off += PAGE_SIZE;
                }
                pd.deregister(r.rkey()).unwrap();
            })
        };
        let range = time(reps, || {
            let r = pd
                .register(
                    Buffer::anonymous(size).unwrap(),
                    Access::ALL,
                    Mode::OnDemand,
                )
                .unwrap();
            r.page_in_range(0, size).unwrap();
            pd.deregister(r.rkey()).unwrap();
        });
        println!(
            "{size:>10} {pin:>12.1} {:>12.1} {:>12.1} {:>12.1} {range:>12.1}",
            policy(PageIn::OnePage),
            policy(PageIn::Block(4)),
            policy(PageIn::All)
        );
    }
}

/// Mean µs of `f` over `reps` runs.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / reps as f64
}
