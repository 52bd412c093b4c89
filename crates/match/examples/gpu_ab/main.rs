//! The GPU engine against the kernel it replaced (issue 28), on one device, same inputs, one
//! process (not a test, not a benchmark of record).
//!
//! `cargo run --release -p remora-match --example gpu_ab -- N_QUERY N_TRAIN [DIM] [REPEAT]`
//! times `knn2_u8` of the old shader (`old_top2.wgsl`: 4 × 4 register blocks, 64 × 64 tiles,
//! driven as the old engine drove it for sets within one binding) and of `GpuMatcher`, best of
//! REPEAT after a warm-up call each, on random u8 descriptors; checks that both give the
//! portable CPU kernel's neighbours when `N_QUERY · N_TRAIN` is small enough for it, and that
//! they agree with each other always; prints one JSON line with the counters of a timed call.
//! Device: `REMORA_GPU`'s policy (`any` admits lavapipe).
use std::sync::Arc;
use std::time::Instant;

use remora_accel::gpu::{groups, wgpu, Gpu};
use remora_match::{knn2_u8, GpuMatcher, Kernel, Neighbour, Neighbours, Options};

const OLD_WGSL: &str = include_str!("old_top2.wgsl");

/// The old engine's search for sets within one binding (no ratio test).
fn old_knn(g: &Gpu, q: &[u8], t: &[u8], dim: usize) -> Vec<Neighbours<u32>> {
    let (nq, nt) = (q.len() / dim, t.len() / dim);
    let words = dim.div_ceil(4);
    let pack = |v: &[u8]| -> Vec<u8> {
        let mut out = vec![0u8; v.len() / dim * words * 4];
        for (o, r) in out.chunks_exact_mut(words * 4).zip(v.chunks_exact(dim)) {
            o[..dim].copy_from_slice(r);
        }
        out
    };
    let norms = |v: &[u8]| -> Vec<u32> {
        v.chunks_exact(dim)
            .map(|r| r.iter().map(|&x| u32::from(x) * u32::from(x)).sum())
            .collect()
    };
    let pipe = g.pipeline("match-top2-old", OLD_WGSL, "main").unwrap();
    let up = |what, b: &[u8]| {
        let buf = g.storage(what, b.len() as u64).unwrap();
        g.write(&buf, 0, b);
        buf
    };
    let (qd, td) = (up("old q", &pack(q)), up("old t", &pack(t)));
    let (qn, tn) = (
        g.upload("old qn", &norms(q)).unwrap(),
        g.upload("old tn", &norms(t)).unwrap(),
    );
    let top = g.storage("old top", nq as u64 * 16).unwrap();
    let pass = g.storage("old pass", nq as u64 * 4).unwrap();
    let params = [
        nq as u32,
        nt as u32,
        words as u32,
        0,
        g.row_stride(),
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    let pb = g
        .buffer(
            "old params",
            48,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )
        .unwrap();
    let bytes: Vec<u8> = params.iter().flat_map(|w| w.to_le_bytes()).collect();
    g.write(&pb, 0, &bytes);
    let bind = g.bind(
        &pipe,
        &[
            qd.as_entire_binding(),
            td.as_entire_binding(),
            qn.as_entire_binding(),
            tn.as_entire_binding(),
            top.as_entire_binding(),
            pass.as_entire_binding(),
            pb.as_entire_binding(),
        ],
    );
    let mut enc = g.encoder();
    g.dispatch(&mut enc, &pipe, &bind, groups(nq as u64, 64));
    let out = g.read(enc, &[(&top, 0, nq as u64 * 16)]).unwrap();
    let one = |d: u32, i: u32| (i != u32::MAX).then_some(Neighbour { index: i, dist2: d });
    out[0]
        .words()
        .chunks_exact(4)
        .map(|w| Neighbours {
            best: one(w[0], w[1]),
            second: one(w[2], w[3]),
        })
        .collect()
}

/// Best seconds of `repeat` calls after one warm-up call, and the last result.
fn time<T>(repeat: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut out = f();
    let mut best = f64::INFINITY;
    for _ in 0..repeat {
        let t0 = Instant::now();
        out = f();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    (best, out)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric arguments"))
        .collect();
    let nq = args.first().copied().unwrap_or(4000);
    let nt = args.get(1).copied().unwrap_or(6000);
    let dim = args.get(2).copied().unwrap_or(128);
    let repeat = args.get(3).copied().unwrap_or(3);
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
    let gpu: Arc<Gpu> = Gpu::shared().expect("a GPU under REMORA_GPU's policy");
    let new = GpuMatcher::new(gpu.clone());
    let (old_s, old_n) = time(repeat, || old_knn(&gpu, &q, &t, dim));
    let (new_s, new_n) = time(repeat, || new.knn2_u8(&q, &t, dim).unwrap());
    let before = gpu.counters();
    new.knn2_u8(&q, &t, dim).unwrap();
    let per_call = gpu.counters().since(&before);
    assert!(old_n == new_n, "the old and the new kernel disagree");
    let macs = nq as f64 * nt as f64 * dim as f64;
    let checked = macs <= 2e10;
    if checked {
        let cpu = knn2_u8(
            &q,
            &t,
            dim,
            &Options {
                kernel: Kernel::available()[0],
                ..Options::default()
            },
        );
        assert!(
            cpu.unwrap() == new_n,
            "the GPU disagrees with the CPU kernel"
        );
    }
    println!(
        "{}",
        serde_json::json!({
            "device": gpu.info().name, "n_query": nq, "n_train": nt, "dim": dim,
            "old_seconds": old_s, "new_seconds": new_s, "speedup": old_s / new_s,
            "old_gmacs": macs / old_s / 1e9, "new_gmacs": macs / new_s / 1e9,
            "identical": true, "checked_against_cpu": checked,
            "new_per_call": per_call, "new_objects_per_call": per_call.objects(),
        })
    );
}
