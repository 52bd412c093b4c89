// Assembly of a converted raw frame into the detector image through the per-pixel map. The raw
// frame may lie in several bands (each its own binding): one pass per band writes the image
// pixels that read from it, the first pass also gaps and out-of-range entries (NaN).
struct AsmParams {
    n: u32,
    stride: u32,
    lo: u32,
    hi: u32,
    total: u32,
    first: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read> energy: array<f32>;
@group(0) @binding(2) var<storage, read_write> image: array<u32>;
@group(0) @binding(3) var<storage, read> p: AsmParams;

@compute @workgroup_size(256)
fn assemble(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let i = flat(g, p.stride) * WG + l;
    if (i >= p.n) {
        return;
    }
    let e = src[i];
    let r = e & 0x3fffffffu;
    if (e == 0xffffffffu || r >= p.total) {
        if (p.first != 0u) {
            image[i] = NAN_BITS;
        }
        return;
    }
    if (r < p.lo || r >= p.hi) {
        return;
    }
    let v = energy[r - p.lo];
    let code = e >> 30u;
    var w = 0.25;
    if (code == 0u) {
        w = 1.0;
    } else if (code == 1u) {
        w = 0.5;
    }
    image[i] = select(bitcast<u32>(v * w), bitcast<u32>(v), is_nan(v));
}
