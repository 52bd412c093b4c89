//! Manual check of the fabric transports: `cargo run --features fabric --example fabcheck -- udp`.
use remora_fabric::Transport;
use remora_lazy::*;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let t: Transport = std::env::args()
        .nth(1)
        .unwrap_or("udp".into())
        .parse()
        .unwrap();
    let src: Vec<u8> = (0..(2usize << 20)).map(|i| (i % 251) as u8 | 1).collect();
    let srv = FabricServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        &MemorySource::new(src.clone()),
        t,
    )
    .unwrap()
    .spawn()
    .unwrap();
    for (unit, mode) in [
        (4096, Mode::Sigbus),
        (4096, Mode::Thread { handlers: 2 }),
        (65536, Mode::Sigbus),
    ] {
        let t0 = Instant::now();
        let f = FabricFetcher::connect(srv.addr(), t).unwrap();
        eprintln!("connected in {:?}", t0.elapsed());
        let r = LazyRegion::open(
            Arc::new(f),
            Options {
                unit,
                mode,
                ..Options::default()
            },
        )
        .unwrap();
        let t0 = Instant::now();
        let ok = r.as_slice() == &src[..];
        eprintln!(
            "{unit} {mode:?}: equal {ok} in {:?} {:?} err {:?}",
            t0.elapsed(),
            r.stats(),
            r.last_error()
        );
    }
    let f = FabricFetcher::connect(srv.addr(), t).unwrap();
    let r = LazyRegion::open(
        Arc::new(f),
        Options {
            push: true,
            ..Options::default()
        },
    )
    .unwrap();
    let done = r.wait_complete(std::time::Duration::from_secs(20));
    eprintln!("push complete {done} {:?}", r.progress());
}
