// Exact top-2 nearest neighbours of u8 descriptors, the ratio test fused (see mod.rs).
//
// A template: shader.rs replaces each `// @name` line with straight-line code (the register
// block's declarations, the unrolled dot products of one stage, the top-2 updates), so that no
// loop or array index stands between the accumulators and registers.
//
// `search`: one workgroup = 256 invocations as 16 x 16 = 128 queries x one split of the train
// chunk, walked in tiles of 128 points. Invocation (tx, ty) owns queries 4ty + r and
// 64 + 4ty + r, and in each tile points 4tx + c and 64 + 4tx + c (r, c in 0..4): an 8 x 8
// register block of dot products (`dot4U8Packed`, 4 u8 products per instruction). The tiles go
// through workgroup memory KC words (4 KC bytes) of every descriptor at a time, word-major, so
// that one 16-byte load gives 4 queries' (or 4 points') word. Each invocation keeps a top-2 per
// query over the points it sees (increasing index, strict <: equal keys keep the lower index);
// at the end the 16 partial top-2s of each query are merged in (key, index) order and written
// to `part[split][query]`.
//
// `merge`: one invocation per query merges the splits' top-2s (and, with `seeded`, the
// previous train chunks' result in `top`), turns keys into squared distances and applies the
// ratio test.

struct Search {
    nq: u32,          // queries in this chunk
    nt: u32,          // train points in this chunk
    w: u32,           // u32 words per descriptor row: a multiple of KC
    t_base: u32,      // global index of the chunk's first train point
    stride: u32,      // workgroups per grid row (Gpu::row_stride)
    qblocks: u32,     // query blocks of 128
    split_tiles: u32, // train tiles of 128 per split
    pad0: u32,
}

struct Merge {
    nq: u32,      // queries in this chunk
    splits: u32,  // top-2s per query in `part`
    seeded: u32,  // 1: `top` holds the earlier train chunks' result, merge with it
    ratio: u32,   // 1: last train chunk, write the ratio test's verdict
    shift: u32,   // ratio² = (m2_hi · 2³² + m2_lo) / 2^shift
    m2_lo: u32,
    m2_hi: u32,
    stride: u32,  // workgroups per grid row
}

@group(0) @binding(0) var<storage, read> qd: array<u32>;
@group(0) @binding(1) var<storage, read> td: array<u32>;
// ‖t‖², padded with KEY_MAX to whole tiles: a padding point's key is KEY_MAX, never taken.
@group(0) @binding(2) var<storage, read> tn: array<vec4<u32>>;
// Per split and query: key1, index1, key2, index2 (keys ‖t‖² − 2 q·t as i32 bits).
@group(0) @binding(3) var<storage, read_write> part: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> qn: array<u32>;
// Per query: d1, i1, d2, i2 (true squared distances; NONE where there is no neighbour).
@group(0) @binding(5) var<storage, read_write> top: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> passed: array<u32>;
@group(0) @binding(7) var<uniform> sp: Search;
@group(0) @binding(8) var<uniform> mp: Merge;

const NONE: u32 = 0xffffffffu;
const KEY_MAX: i32 = 0x7fffffff;
// Words of each descriptor per stage (shader.rs: KC).
const KC: u32 = 8u;
// vec4 pitch of one staged word: 32 vec4 (128 rows) + 1, so that the stores of one stage
// spread over the banks.
const P: u32 = 33u;

// One stage of the query and train tiles: word k of rows 4i..4i+3 at [k * P + i]. The final
// merge reuses them for the partial top-2s.
var<workgroup> shq: array<vec4<u32>, 264>;
var<workgroup> sht: array<vec4<u32>, 264>;

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

// Both entries of a (key1, index1, key2, index2) vector; NONE entries are never taken.
fn insert2(t: ptr<function, Top>, v: vec4<u32>) {
    insert(t, bitcast<i32>(v.x), v.y);
    insert(t, bitcast<i32>(v.z), v.w);
}

// q · t for 4 train words at once.
fn d4(q: u32, t: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(
        dot4U8Packed(q, t.x),
        dot4U8Packed(q, t.y),
        dot4U8Packed(q, t.z),
        dot4U8Packed(q, t.w),
    );
}

// Word `k` of query rows r0..r0+3 (zeros past the chunk's end).
fn fetch_q(r0: u32, k: u32) -> vec4<u32> {
    var v = vec4<u32>(0u);
    let o = r0 * sp.w + k;
    if (r0 < sp.nq) {
        v.x = qd[o];
    }
    if (r0 + 1u < sp.nq) {
        v.y = qd[o + sp.w];
    }
    if (r0 + 2u < sp.nq) {
        v.z = qd[o + 2u * sp.w];
    }
    if (r0 + 3u < sp.nq) {
        v.w = qd[o + 3u * sp.w];
    }
    return v;
}

// Word `k` of train rows r0..r0+3 (zeros past the chunk's end).
fn fetch_t(r0: u32, k: u32) -> vec4<u32> {
    var v = vec4<u32>(0u);
    let o = r0 * sp.w + k;
    if (r0 < sp.nt) {
        v.x = td[o];
    }
    if (r0 + 1u < sp.nt) {
        v.y = td[o + sp.w];
    }
    if (r0 + 2u < sp.nt) {
        v.z = td[o + 2u * sp.w];
    }
    if (r0 + 3u < sp.nt) {
        v.w = td[o + 3u * sp.w];
    }
    return v;
}

@compute @workgroup_size(256)
fn search(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let flat = g.x + g.y * sp.stride;
    let split = flat / sp.qblocks;
    let q0 = (flat % sp.qblocks) * 128u;
    let t_first = split * sp.split_tiles * 128u;
    let t_end = min(sp.nt, t_first + sp.split_tiles * 128u);
    let tx = l % 16u;
    let ty = l / 16u;
    // Staging: this invocation loads word lk of the 4 rows 4 lr .. 4 lr + 3 of each tile.
    let lk = l % KC;
    let lr = l / KC;
    let stages = sp.w / KC;
    // @declare
    var nq4 = fetch_q(q0 + 4u * lr, lk);
    var nt4 = fetch_t(t_first + 4u * lr, lk);
    for (var t0 = t_first; t0 < t_end; t0 += 128u) {
        // @zero
        for (var s = 0u; s < stages; s++) {
            workgroupBarrier();
            shq[lk * P + lr] = nq4;
            sht[lk * P + lr] = nt4;
            workgroupBarrier();
            // The next stage's words (the next tile's first) load while this one computes.
            var ns = s + 1u;
            var nt0 = t0;
            if (ns == stages) {
                ns = 0u;
                nt0 = t0 + 128u;
            }
            nq4 = fetch_q(q0 + 4u * lr, ns * KC + lk);
            nt4 = fetch_t(nt0 + 4u * lr, ns * KC + lk);
            // @stage
        }
        let na = tn[(t0 >> 2u) + tx];
        let nb = tn[(t0 >> 2u) + 16u + tx];
        let j0 = sp.t_base + t0 + 4u * tx;
        // @update
    }
    // The partial top-2s through workgroup memory, two invocations' (tx = 2i, 2i + 1) per
    // round; invocation l < 128 merges query l's.
    var m = Top(KEY_MAX, NONE, KEY_MAX, NONE);
    for (var round = 0u; round < 8u; round++) {
        workgroupBarrier();
        if (tx / 2u == round) {
            if (tx % 2u == 0u) {
                // @spill shq
            } else {
                // @spill sht
            }
        }
        workgroupBarrier();
        if (l < 128u) {
            insert2(&m, shq[l]);
            insert2(&m, sht[l]);
        }
    }
    if (l < 128u && q0 + l < sp.nq) {
        part[split * sp.nq + q0 + l] =
            vec4<u32>(bitcast<u32>(m.k1), m.i1, bitcast<u32>(m.k2), m.i2);
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
    let a = mul32(mp.m2_lo, d2);
    let b = mul32(mp.m2_hi, d2);
    let r0 = a.x;
    let r1 = a.y + b.x;
    let r2 = b.y + select(0u, 1u, r1 < a.y);
    if (d1 == 0u) {
        return (r0 | r1 | r2) != 0u;
    }
    // m2 · d2 < 2⁷⁵ <= d1 · 2^shift.
    if (mp.shift >= 75u) {
        return false;
    }
    let w = mp.shift / 32u;
    let s = mp.shift % 32u;
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
fn merge(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let q = (g.x + g.y * mp.stride) * 256u + l;
    if (q >= mp.nq) {
        return;
    }
    let qq = i32(qn[q]);
    var m = Top(KEY_MAX, NONE, KEY_MAX, NONE);
    if (mp.seeded != 0u) {
        // Earlier chunks hold lower train indices; as keys they merge like the rest.
        let o = top[q];
        if (o.y != NONE) {
            m.k1 = i32(o.x) - qq;
            m.i1 = o.y;
        }
        if (o.w != NONE) {
            m.k2 = i32(o.z) - qq;
            m.i2 = o.w;
        }
    }
    for (var s = 0u; s < mp.splits; s++) {
        insert2(&m, part[s * mp.nq + q]);
    }
    let d1 = select(NONE, u32(m.k1 + qq), m.i1 != NONE);
    let d2 = select(NONE, u32(m.k2 + qq), m.i2 != NONE);
    top[q] = vec4<u32>(d1, m.i1, d2, m.i2);
    if (mp.ratio != 0u) {
        passed[q] = select(0u, 1u, m.i2 != NONE && ratio_ok(d1, d2));
    }
}
