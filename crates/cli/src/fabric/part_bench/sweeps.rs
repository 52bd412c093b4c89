//! The sections timed one transfer at a time: the latency table (every variant at every
//! size), the requester's fault-timeout sweep, the fraction-evicted sweep (with its seeded
//! `Rng`) and one 4 KiB fault taken apart.
use std::time::Duration;

use anyhow::Result;
use remora_fabric::{FaultMode, PageInPolicy, PartConfig};
use remora_mem::{Region, PAGE_SIZE};
use serde_json::{json, Value};

use super::human;
use super::measure::{Bench, Cell, Job};
use super::setup::{pinned, touch, Setup};

/// Fault timeouts of the sweep (the paper's), besides none (NTO).
pub(super) const TIMEOUTS_US: [u64; 3] = [100, 500, 1000];
/// Fractions of the destination's pages evicted in the frequency sweep.
pub(super) const FRACTIONS: [f64; 5] = [0.0, 0.01, 0.10, 0.50, 1.0];

/// The main table's variants, in the order they run in each round.
const VARIANTS: [&str; 12] = [
    "transfer_only",
    "transfer_only_inline",
    "touch_alone",
    "page_in_alone",
    "page_in_elsewhere",
    "pin_present",
    "pin_not_present",
    "touch_present",
    "touch_not_present",
    "pia",
    "pi4",
    "pio",
];

/// The main-table variants that run: the pin rows only where pinning is allowed.
pub(super) fn variants(pin: bool) -> Vec<&'static str> {
    VARIANTS
        .into_iter()
        .filter(|n| pin || !n.starts_with("pin"))
        .collect()
}

/// What a main-table variant does before its timed part.
#[derive(Clone, Copy)]
enum Prep {
    /// Pages in whatever the variant before left out.
    Resident,
    /// Evicts the destination on this thread.
    Evict,
    /// Evicts it on another CPU: the page-in then refills its free lists from there, as the
    /// page-in worker does after an eviction on the benchmark's thread.
    EvictElsewhere,
}

impl Prep {
    fn evict_if(evict: bool) -> Prep {
        if evict {
            Prep::Evict
        } else {
            Prep::Resident
        }
    }
}

/// The queue pairs of the main table: the inline-fault one (pin and touch variants) and PART
/// with each policy.
struct Engines {
    inline: Setup,
    pia: Setup,
    pi4: Setup,
    pio: Setup,
}

/// The job of one main-table variant at one size.
fn variant_job<'a>(e: &'a Engines, name: &str, s: usize) -> Job<'a> {
    let inline = &e.inline;
    type Timed<'a> = Box<dyn FnMut() -> Result<()> + 'a>;
    let (setup, prep, timed): (&Setup, Prep, Timed<'a>) = match name {
        "transfer_only" => (&e.pia, Prep::Resident, Box::new(move || e.pia.write(s))),
        "transfer_only_inline" => (inline, Prep::Resident, Box::new(move || inline.write(s))),
        "touch_alone" => (
            inline,
            Prep::Evict,
            Box::new(move || {
                touch(&inline.dst, s);
                Ok(())
            }),
        ),
        "page_in_alone" | "page_in_elsewhere" => (
            inline,
            if name == "page_in_alone" {
                Prep::Evict
            } else {
                Prep::EvictElsewhere
            },
            Box::new(move || Ok(inline.dst.page_in_range(0, s).map(drop)?)),
        ),
        "pin_present" | "pin_not_present" => (
            inline,
            Prep::evict_if(name == "pin_not_present"),
            Box::new(move || pinned(&inline.dst, s, || inline.write(s))),
        ),
        "touch_present" | "touch_not_present" => (
            inline,
            Prep::evict_if(name == "touch_not_present"),
            Box::new(move || {
                touch(&inline.dst, s);
                inline.write(s)
            }),
        ),
        "pia" => (&e.pia, Prep::Evict, Box::new(move || e.pia.write(s))),
        "pi4" => (&e.pi4, Prep::Evict, Box::new(move || e.pi4.write(s))),
        _ => (&e.pio, Prep::Evict, Box::new(move || e.pio.write(s))),
    };
    // Present variants make sure of it: the one before may have left the pages out.
    let prep = move || match prep {
        Prep::Evict => setup.evict(s),
        Prep::EvictElsewhere => setup.evict_elsewhere(s),
        Prep::Resident => Ok(setup.dst.page_in_range(0, s).map(drop)?),
    };
    Job {
        what: format!("{name} {}", human(s)),
        setup: Some(setup),
        prep: Box::new(prep),
        timed,
    }
}

/// Main table: every variant at every size, the variants of one size in turn.
pub(super) fn latency_table(
    b: &Bench,
    sizes: &[usize],
    pin: bool,
) -> Result<Vec<(String, Vec<Cell>)>> {
    let max = *sizes.iter().max().expect("sizes");
    let none = PartConfig::default();
    let open = |mode, policy| Setup::open(b.part(mode, policy, None), b.requester(none), max);
    let e = Engines {
        inline: open(FaultMode::Inline, PageInPolicy::Pia)?,
        pia: open(FaultMode::Part, PageInPolicy::Pia)?,
        pi4: open(FaultMode::Part, PageInPolicy::Pi4)?,
        pio: open(FaultMode::Part, PageInPolicy::Pio)?,
    };
    let names = variants(pin);
    let mut rows: Vec<(String, Vec<Cell>)> =
        names.iter().map(|n| (n.to_string(), Vec::new())).collect();
    for &s in sizes {
        let jobs = names.iter().map(|n| variant_job(&e, n, s)).collect();
        for (row, c) in rows.iter_mut().zip(b.round_robin(jobs)?) {
            row.1.push(c);
        }
    }
    Ok(rows)
}

/// One row of the timeout sweep: policy, the requester's fault timeout (None: NTO), cells.
pub(super) type TimeoutRow = (PageInPolicy, Option<u64>, Vec<Cell>);

/// PIA and PIO with the requester's fault timeout at 100 µs, 500 µs, 1 ms and off, the four
/// of one policy and size in turn.
pub(super) fn timeout_sweep(b: &Bench, sizes: &[usize]) -> Result<Vec<TimeoutRow>> {
    let max = *sizes.iter().max().expect("sizes");
    let tos: Vec<Option<u64>> = TIMEOUTS_US.into_iter().map(Some).chain([None]).collect();
    let mut out = Vec::new();
    for policy in [PageInPolicy::Pia, PageInPolicy::Pio] {
        let setups = tos
            .iter()
            .map(|to| {
                let t = to.map(Duration::from_micros);
                let resp = b.part(FaultMode::Part, policy, None);
                Setup::open(resp, b.requester(b.part(FaultMode::Part, policy, t)), max)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut rows: Vec<TimeoutRow> = tos.iter().map(|to| (policy, *to, Vec::new())).collect();
        for &s in sizes {
            let jobs = setups
                .iter()
                .zip(&tos)
                .map(|(st, to)| {
                    let to = to.map_or("NTO".to_string(), |t| format!("TO {t} µs"));
                    let what = format!("{policy} {to} {}", human(s));
                    Job::new(what, Some(st), move || st.evict(s), move || st.write(s))
                })
                .collect();
            for (row, c) in rows.iter_mut().zip(b.round_robin(jobs)?) {
                row.2.push(c);
            }
        }
        out.extend(rows);
    }
    Ok(out)
}

/// xorshift64: the fixed-seed generator that picks the pages to evict.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Evicts each page of the first `size` bytes with probability `f`, in runs.
fn evict_fraction(r: &Region, size: usize, f: f64, rng: &mut Rng) -> Result<()> {
    let pages = size.div_ceil(PAGE_SIZE);
    let mut run: Option<usize> = None;
    for p in 0..=pages {
        let out = p < pages && (f >= 1.0 || rng.unit() < f);
        match (out, run) {
            (true, None) => run = Some(p),
            (false, Some(start)) => {
                let end = (p * PAGE_SIZE).min(r.len());
                r.evict(start * PAGE_SIZE, end - start * PAGE_SIZE)?;
                run = None;
            }
            _ => {}
        }
    }
    Ok(())
}

/// One row of the frequency sweep: a policy, the fraction of pages evicted, a cell per size.
pub(super) struct FreqRow {
    pub(super) policy: PageInPolicy,
    pub(super) fraction: f64,
    pub(super) cells: Vec<Cell>,
}

/// PIA and PIO with a fraction of the destination's pages evicted before each transfer, every
/// (policy, fraction) of one size in turn.
pub(super) fn frequency_sweep(b: &Bench, sizes: &[usize]) -> Result<Vec<FreqRow>> {
    let max = *sizes.iter().max().expect("sizes");
    let policies = [PageInPolicy::Pia, PageInPolicy::Pio];
    let setups = policies
        .iter()
        .map(|&p| {
            let req = b.requester(PartConfig::default());
            Setup::open(b.part(FaultMode::Part, p, None), req, max)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rows: Vec<FreqRow> = policies
        .iter()
        .flat_map(|&policy| {
            FRACTIONS.map(|fraction| FreqRow {
                policy,
                fraction,
                cells: Vec::new(),
            })
        })
        .collect();
    for &s in sizes {
        let mut jobs = Vec::new();
        for (st, policy) in setups.iter().zip(policies) {
            for f in FRACTIONS {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ s as u64 ^ (f * 1e6) as u64);
                let what = format!("{policy} f={:.0}% {}", f * 100.0, human(s));
                let prep = move || evict_fraction(&st.dst, s, f, &mut rng);
                jobs.push(Job::new(what, Some(st), prep, move || st.write(s)));
            }
        }
        for (row, c) in rows.iter_mut().zip(b.round_robin(jobs)?) {
            row.cells.push(c);
        }
    }
    Ok(rows)
}

/// One 4 KiB WRITE into one evicted page (PIA, no fault timeout), taken apart: the transfer
/// alone, the page-in alone and the whole, in turn.
pub(super) fn one_fault(b: &Bench) -> Result<Value> {
    let none = PartConfig::default();
    let st = Setup::open(
        b.part(FaultMode::Part, PageInPolicy::Pia, None),
        b.requester(none),
        PAGE_SIZE,
    )?;
    let st = &st;
    let resident = move || Ok(st.dst.page_in_range(0, PAGE_SIZE).map(drop)?);
    let evict = move || st.evict(PAGE_SIZE);
    let write = move || st.write(PAGE_SIZE);
    let jobs = vec![
        Job::new("one fault: transfer".into(), Some(st), resident, write),
        Job::new("one fault: page-in".into(), None, evict, resident),
        Job::new("one fault: total".into(), Some(st), evict, write),
    ];
    let [transfer, page_in, total] = b.round_robin(jobs)?[..] else {
        unreachable!("three jobs, three cells");
    };
    Ok(json!({
        "total": total.json(),
        "transfer_only": transfer.json(),
        "page_in": page_in.json(),
        "remainder_us": total.median - transfer.median - page_in.median,
    }))
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn eviction_draws_are_reproducible_and_near_the_fraction() {
        let draws = |seed| {
            let mut r = Rng(seed);
            (0..10_000).filter(|_| r.unit() < 0.1).count()
        };
        assert_eq!(draws(7), draws(7));
        assert!((800..1200).contains(&draws(7)), "{}", draws(7));
    }
}
