//! Quick fault-latency check: `cargo run --release --example quickbench -- [UNIT] [local|tcp]`.
use remora_lazy::bench::{run, Config, Pattern};
use remora_lazy::*;
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let unit: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4096);
    let transport = args.get(2).map(String::as_str).unwrap_or("local");
    let src: Vec<u8> = (0..unit * 1000).map(|i| (i % 251 + 1) as u8).collect();
    let mem = Arc::new(MemorySource::new(src));
    let _srv;
    let f: Arc<dyn PageFetcher> = if transport == "tcp" {
        let s = PageServer::bind("127.0.0.1:0".parse().unwrap(), mem)
            .unwrap()
            .spawn()
            .unwrap();
        let f = TcpFetcher::connect(s.addr(), std::time::Duration::from_secs(2)).unwrap();
        _srv = s;
        Arc::new(f)
    } else {
        Arc::new(LocalFetcher::memory(mem))
    };
    for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
        let cfg = Config {
            unit,
            faults: 1000,
            trials: 20,
            pattern: Pattern::Random,
            prefetch: Prefetch::None,
            mode,
        };
        let r = run(f.clone(), &cfg).unwrap();
        println!(
            "{transport} {unit} {mode:?}: mean {:.2} ± {:.2} p50 {:.2} p99 {:.2}",
            r.mean_us, r.std_us, r.p50_us, r.p99_us
        );
    }
}
