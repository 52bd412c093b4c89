// Exact top-2 nearest neighbours of u8 descriptors, the ratio test fused (see mod.rs).
//
// One workgroup: 64 queries, 256 invocations as 16 x 16. Invocation (tx, ty) owns queries
// ty + 16r and, in each tile of 64 train points, points tx + 16c (r, c in 0..4): a 4 x 4
// register block of dot products. The dims are staged in slices of KC words through
// workgroup memory. Each invocation keeps its own top-2 per query over the points it sees
// (increasing index, strict <, so equal keys keep the lower index); at the end one invocation
// per query merges the 16 partial results (and the previous train chunk's) in (key, index)
// order, which is the order the CPU kernels produce.

struct Params {
    nq: u32,      // queries in this chunk
    nt: u32,      // train points in this chunk
    dw: u32,      // u32 words per descriptor
    t_base: u32,  // global index of the chunk's first train point
    stride: u32,  // workgroups per grid row (Gpu::row_stride)
    seeded: u32,  // 1: `top` holds the earlier train chunks' result, merge with it
    ratio: u32,   // 1: last train chunk, write the ratio test's verdict
    shift: u32,   // ratio² = (m2_hi · 2³² + m2_lo) / 2^shift
    m2_lo: u32,
    m2_hi: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> qd: array<u32>;
@group(0) @binding(1) var<storage, read> td: array<u32>;
@group(0) @binding(2) var<storage, read> qn: array<u32>;
@group(0) @binding(3) var<storage, read> tn: array<u32>;
// Per query: d1, i1, d2, i2 (true squared distances; NONE where there is no neighbour).
@group(0) @binding(4) var<storage, read_write> top: array<u32>;
@group(0) @binding(5) var<storage, read_write> passed: array<u32>;
@group(0) @binding(6) var<uniform> p: Params;

const NONE: u32 = 0xffffffffu;
const KEY_MAX: i32 = 0x7fffffff;
const KC: u32 = 16u;
// Row pitch of the staged tiles: KC + 1 words, so that the 16 rows read at once sit in
// different banks.
const PITCH: u32 = 17u;
const T_OFF: u32 = 1088u; // 64 * PITCH: the train tile follows the query tile.

// The staged tiles (2 x 64 x PITCH words), later the 64 x 16 partial top-2s (4 words each):
// 16 KiB, WebGPU's guaranteed minimum.
var<workgroup> sh: array<u32, 4096>;

struct Top {
    k1: i32,
    i1: u32,
    k2: i32,
    i2: u32,
}

// (key, index) order: the smaller key, then the lower index.
fn before(k: i32, i: u32, k0: i32, i0: u32) -> bool {
    return k < k0 || (k == k0 && i < i0);
}

fn insert(t: ptr<function, Top>, k: i32, i: u32) {
    if (before(k, i, (*t).k2, (*t).i2)) {
        if (before(k, i, (*t).k1, (*t).i1)) {
            (*t).k2 = (*t).k1;
            (*t).i2 = (*t).i1;
            (*t).k1 = k;
            (*t).i1 = i;
        } else {
            (*t).k2 = k;
            (*t).i2 = i;
        }
    }
}

// a · b as (low, high) words.
fn mul32(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi);
}

// Lowe's test d1 < ratio · d2 on plain distances, exactly: d1 · 2^shift < m2 · d2 on 96-bit
// integers (d1, d2 < 2²⁷, m2 < 2⁴⁸), the same rule as the CPU's ratio.rs.
fn ratio_ok(d1: u32, d2: u32) -> bool {
    let a = mul32(p.m2_lo, d2);
    let b = mul32(p.m2_hi, d2);
    let r0 = a.x;
    let r1 = a.y + b.x;
    let r2 = b.y + select(0u, 1u, r1 < a.y);
    if (d1 == 0u) {
        return (r0 | r1 | r2) != 0u;
    }
    // m2 · d2 < 2⁷⁵ <= d1 · 2^shift.
    if (p.shift >= 75u) {
        return false;
    }
    let w = p.shift / 32u;
    let s = p.shift % 32u;
    var l = vec4<u32>(0u);
    l[w] = d1 << s;
    l[w + 1u] = select(0u, d1 >> (32u - s), s != 0u);
    if (l.w != 0u) {
        return false;
    }
    if (l.z != r2) {
        return l.z < r2;
    }
    if (l.y != r1) {
        return l.y < r1;
    }
    return l.x < r0;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let q0 = (g.x + g.y * p.stride) * 64u;
    if (q0 >= p.nq) {
        return;
    }
    let tx = l % 16u;
    let ty = l / 16u;
    // Keys ‖t‖² − 2 q·t: the squared distance less ‖q‖², exact in i32 (|key| < 2²⁷).
    var k1: array<i32, 4>;
    var i1: array<u32, 4>;
    var k2: array<i32, 4>;
    var i2: array<u32, 4>;
    for (var r = 0u; r < 4u; r++) {
        k1[r] = KEY_MAX;
        i1[r] = NONE;
        k2[r] = KEY_MAX;
        i2[r] = NONE;
    }
    for (var t0 = 0u; t0 < p.nt; t0 += 64u) {
        var acc: array<u32, 16>;
        for (var k0 = 0u; k0 < p.dw; k0 += KC) {
            // 2 x 64 rows x KC words, 4 + 4 per invocation; zeros past the ends.
            for (var e = 0u; e < 4u; e++) {
                let idx = l + e * 256u;
                let row = idx / KC;
                let kk = idx % KC;
                let k = k0 + kk;
                var qv = 0u;
                if (q0 + row < p.nq && k < p.dw) {
                    qv = qd[(q0 + row) * p.dw + k];
                }
                sh[row * PITCH + kk] = qv;
                var tv = 0u;
                if (t0 + row < p.nt && k < p.dw) {
                    tv = td[(t0 + row) * p.dw + k];
                }
                sh[T_OFF + row * PITCH + kk] = tv;
            }
            workgroupBarrier();
            let kn = min(KC, p.dw - k0);
            for (var kk = 0u; kk < kn; kk++) {
                var qw: array<u32, 4>;
                var tw: array<u32, 4>;
                for (var r = 0u; r < 4u; r++) {
                    qw[r] = sh[(ty + 16u * r) * PITCH + kk];
                    tw[r] = sh[T_OFF + (tx + 16u * r) * PITCH + kk];
                }
                for (var r = 0u; r < 4u; r++) {
                    for (var c = 0u; c < 4u; c++) {
                        acc[r * 4u + c] += dot4U8Packed(qw[r], tw[c]);
                    }
                }
            }
            workgroupBarrier();
        }
        for (var c = 0u; c < 4u; c++) {
            let t = t0 + tx + 16u * c;
            if (t < p.nt) {
                let n = i32(tn[t]);
                let j = p.t_base + t;
                for (var r = 0u; r < 4u; r++) {
                    let key = n - 2 * i32(acc[r * 4u + c]);
                    let lt1 = key < k1[r];
                    let lt2 = key < k2[r];
                    k2[r] = select(k2[r], select(key, k1[r], lt1), lt2);
                    i2[r] = select(i2[r], select(j, i1[r], lt1), lt2);
                    k1[r] = select(k1[r], key, lt1);
                    i1[r] = select(i1[r], j, lt1);
                }
            }
        }
    }
    // The partial top-2s to workgroup memory (the tiles are no longer read: the last barrier
    // above ended the final slice), then one invocation per query merges its row's 16.
    for (var r = 0u; r < 4u; r++) {
        let b = ((ty + 16u * r) * 16u + tx) * 4u;
        sh[b] = bitcast<u32>(k1[r]);
        sh[b + 1u] = i1[r];
        sh[b + 2u] = bitcast<u32>(k2[r]);
        sh[b + 3u] = i2[r];
    }
    workgroupBarrier();
    if (l < 64u && q0 + l < p.nq) {
        let q = q0 + l;
        let o = q * 4u;
        let qq = i32(qn[q]);
        var t = Top(KEY_MAX, NONE, KEY_MAX, NONE);
        if (p.seeded != 0u) {
            // Earlier chunks hold lower train indices; as keys they merge like the rest.
            if (top[o + 1u] != NONE) {
                t.k1 = i32(top[o]) - qq;
                t.i1 = top[o + 1u];
            }
            if (top[o + 3u] != NONE) {
                t.k2 = i32(top[o + 2u]) - qq;
                t.i2 = top[o + 3u];
            }
        }
        for (var x = 0u; x < 16u; x++) {
            let b = (l * 16u + x) * 4u;
            insert(&t, bitcast<i32>(sh[b]), sh[b + 1u]);
            insert(&t, bitcast<i32>(sh[b + 2u]), sh[b + 3u]);
        }
        let d1 = select(NONE, u32(t.k1 + qq), t.i1 != NONE);
        let d2 = select(NONE, u32(t.k2 + qq), t.i2 != NONE);
        top[o] = d1;
        top[o + 1u] = t.i1;
        top[o + 2u] = d2;
        top[o + 3u] = t.i2;
        if (p.ratio != 0u) {
            passed[q] = select(0u, 1u, t.i2 != NONE && ratio_ok(d1, d2));
        }
    }
}
