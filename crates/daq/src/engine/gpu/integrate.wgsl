// Azimuthal integration: the bin-major CSR matrix times the image, one workgroup per bin, each
// invocation summing a strided share of the bin's entries with compensated (two-sum) f32
// arithmetic and the workgroup combining the pairs, so the result carries about twice f32's
// precision. Invalid pixels add what they would have contributed to the `bad` sums, which the
// host subtracts from the matrix totals (as the CPU engines do). The image may lie in bands:
// a pass sums the entries whose pixel is in its band and adds to what earlier passes left.
struct IntParams {
    bins: u32,
    stride: u32,
    lo: u32,
    hi: u32,
    total: u32,
    first: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> indptr: array<u32>;
@group(0) @binding(1) var<storage, read> indices: array<u32>;
@group(0) @binding(2) var<storage, read> coef: array<f32>;
@group(0) @binding(3) var<storage, read> ncoef: array<f32>;
@group(0) @binding(4) var<storage, read> image: array<f32>;
// Per bin: signal (sum, err), bad ncoef (sum, err), bad coef (sum, err), 2 spare.
@group(0) @binding(5) var<storage, read_write> acc: array<f32>;
@group(0) @binding(6) var<storage, read> p: IntParams;

var<workgroup> red: array<vec2<f32>, 768>;

@compute @workgroup_size(256)
fn integrate(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let b = flat(g, p.stride);
    if (b >= p.bins) {
        return;
    }
    var s = vec2<f32>(0.0, 0.0);
    var bn = vec2<f32>(0.0, 0.0);
    var bc = vec2<f32>(0.0, 0.0);
    let end = indptr[b + 1u];
    for (var k = indptr[b] + l; k < end; k = k + WG) {
        let px = indices[k];
        var v = 0.0;
        var here = false;
        var bad = false;
        if (px >= p.total) {
            bad = p.first != 0u;
        } else if (px >= p.lo && px < p.hi) {
            v = image[px - p.lo];
            here = true;
            bad = !is_finite(v);
        }
        if (bad) {
            bn = add2(bn, vec2<f32>(ncoef[k], 0.0));
            bc = add2(bc, vec2<f32>(coef[k], 0.0));
        } else if (here) {
            let c = coef[k];
            // The product's rounding error, exactly, through fma.
            let m = c * v;
            let me = fma(c, v, -m);
            s = add2(s, vec2<f32>(m, me));
        }
    }
    red[l] = s;
    red[l + WG] = bn;
    red[l + 2u * WG] = bc;
    for (var d = WG / 2u; d > 0u; d = d >> 1u) {
        workgroupBarrier();
        if (l < d) {
            red[l] = add2(red[l], red[l + d]);
            red[l + WG] = add2(red[l + WG], red[l + WG + d]);
            red[l + 2u * WG] = add2(red[l + 2u * WG], red[l + 2u * WG + d]);
        }
    }
    workgroupBarrier();
    if (l == 0u) {
        let o = b * 8u;
        var prev = array<vec2<f32>, 3>(vec2<f32>(0.0), vec2<f32>(0.0), vec2<f32>(0.0));
        if (p.first == 0u) {
            prev[0] = vec2<f32>(acc[o], acc[o + 1u]);
            prev[1] = vec2<f32>(acc[o + 2u], acc[o + 3u]);
            prev[2] = vec2<f32>(acc[o + 4u], acc[o + 5u]);
        }
        let t0 = add2(prev[0], red[0]);
        let t1 = add2(prev[1], red[WG]);
        let t2 = add2(prev[2], red[2u * WG]);
        acc[o] = t0.x;
        acc[o + 1u] = t0.y;
        acc[o + 2u] = t1.x;
        acc[o + 3u] = t1.y;
        acc[o + 4u] = t2.x;
        acc[o + 5u] = t2.y;
    }
}
