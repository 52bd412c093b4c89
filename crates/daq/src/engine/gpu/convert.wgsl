// Conversion of raw words to keV (or photons) with the special words flagged and counted, and
// the veto's pixel count in the same pass; pedestal tracking; counting above a threshold.
struct ConvParams {
    n: u32,
    stride: u32,
    photons: u32,
    window: u32,
    threshold: f32,
    energy: f32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> raw: array<u32>;
@group(0) @binding(1) var<storage, read_write> ped: array<f32>;
@group(0) @binding(2) var<storage, read> gain: array<f32>;
@group(0) @binding(3) var<storage, read_write> outv: array<u32>;
@group(0) @binding(4) var<storage, read_write> stats: array<atomic<u32>, 4>;
@group(0) @binding(5) var<storage, read> p: ConvParams;

var<workgroup> acc: array<atomic<u32>, 4>;

fn word(i: u32) -> u32 {
    return (raw[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
}

fn photons(e: f32) -> u32 {
    if (is_nan(e)) {
        return 0x80000000u;
    }
    let q = round(e / p.energy);
    if (is_nan(q)) {
        return 0x80000000u;
    }
    if (q > 2147483520.0) {
        return 0x7fffffffu;
    }
    if (q < -2147483648.0) {
        return 0x80000000u;
    }
    return bitcast<u32>(i32(q));
}

@compute @workgroup_size(256)
fn convert(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    if (l < 4u) {
        atomicStore(&acc[l], 0u);
    }
    workgroupBarrier();
    let i = flat(g, p.stride) * WG + l;
    if (i < p.n) {
        let w = word(i);
        var e = 0.0;
        // 0: a value; 1: invalid (NaN); 2: saturated (+inf)
        var flag = 0u;
        if (is_nan(ped[i])) {
            flag = 1u;
        } else if (w == 0xc000u) {
            atomicAdd(&acc[1], 1u);
            flag = 2u;
        } else if (w == 0xffffu || w == 0x4000u) {
            atomicAdd(&acc[2], 1u);
            flag = 1u;
        } else {
            let s = w >> 14u;
            if (s == 2u) {
                atomicAdd(&acc[3], 1u);
                flag = 1u;
            } else {
                let k = select(s, 2u, s == 3u) * p.n + i;
                e = (f32(w & 0x3fffu) - ped[k]) / gain[k];
            }
        }
        var o = 0u;
        if (flag == 0u) {
            if (above(e, p.threshold)) {
                atomicAdd(&acc[0], 1u);
            }
            o = select(bitcast<u32>(e), photons(e), p.photons != 0u);
        } else if (flag == 1u) {
            o = select(NAN_BITS, 0x80000000u, p.photons != 0u);
        } else {
            if (above(bitcast<f32>(INF_BITS), p.threshold)) {
                atomicAdd(&acc[0], 1u);
            }
            o = select(INF_BITS, 0x7fffffffu, p.photons != 0u);
        }
        outv[i] = o;
    }
    workgroupBarrier();
    if (l < 4u) {
        let v = atomicLoad(&acc[l]);
        if (v != 0u) {
            atomicAdd(&stats[l], v);
        }
    }
}

// G0 pixels enter a moving average of up to `window` frames (`outv` holds the counts).
@compute @workgroup_size(256)
fn track(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let i = flat(g, p.stride) * WG + l;
    if (i < p.n) {
        let w = word(i);
        if ((w >> 14u) == 0u) {
            let n = min(outv[i] + 1u, p.window);
            outv[i] = n;
            let q = ped[i];
            ped[i] = q + (f32(w) - q) / f32(n);
        }
    }
}

// Pixels of `ped` (here: any f32 data) above the threshold, into stats[0].
@compute @workgroup_size(256)
fn count(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    if (l == 0u) {
        atomicStore(&acc[0], 0u);
    }
    workgroupBarrier();
    let i = flat(g, p.stride) * WG + l;
    if (i < p.n && above(ped[i], p.threshold)) {
        atomicAdd(&acc[0], 1u);
    }
    workgroupBarrier();
    if (l == 0u) {
        let v = atomicLoad(&acc[0]);
        if (v != 0u) {
            atomicAdd(&stats[0], v);
        }
    }
}
