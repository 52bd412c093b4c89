//! The stage benchmark without the CLI: `cargo run --release -p remora-daq --example
//! jungfrau_bench -- MODULES FRAMES THREADS` prints the JSON report of `remora bench jungfrau`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let cfg = remora_daq::bench::BenchConfig {
        modules: a.first().copied().unwrap_or(8),
        frames: a.get(1).copied().unwrap_or(20),
        threads: a.get(2).copied().unwrap_or(0),
        distinct: 4,
        bins: 1000,
    };
    println!("{}", serde_json::to_string(&remora_daq::bench::run(&cfg)?)?);
    Ok(())
}
