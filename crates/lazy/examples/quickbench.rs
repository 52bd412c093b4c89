//! Quick fault-latency check against an in-process source: `cargo run --release --example quickbench`.
use remora_lazy::bench::{run, Config, Pattern};
use remora_lazy::*;
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let unit: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4096);
    for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
        let src: Vec<u8> = (0..unit * 1000).map(|i| (i % 251 + 1) as u8).collect();
        let f: Arc<dyn PageFetcher> =
            Arc::new(LocalFetcher::memory(Arc::new(MemorySource::new(src))));
        let cfg = Config {
            unit,
            faults: 1000,
            trials: 20,
            pattern: Pattern::Random,
            prefetch: Prefetch::None,
            mode,
        };
        let r = run(f, &cfg).unwrap();
        println!("{mode:?}: {r:?}");
    }
}
