// Shared helpers. NaN and infinity are tested on the bits: shader compilers may assume finite
// arithmetic, and the CPU engines' flags (NaN = invalid, +inf = saturated) must survive exactly.
const NAN_BITS: u32 = 0x7fc00000u;
const INF_BITS: u32 = 0x7f800000u;
const WG: u32 = 256u;

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

// `x > t` as the CPU computes it (false when either is NaN).
fn above(x: f32, t: f32) -> bool {
    return !is_nan(x) && !is_nan(t) && x > t;
}

fn flat(g: vec3<u32>, stride: u32) -> u32 {
    return g.x + g.y * stride;
}

// Error-free sum of two floats (Knuth's two-sum): s + e == a + b exactly.
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    return vec2<f32>(s, e);
}

// Adds compensated pairs (sum, error).
fn add2(x: vec2<f32>, y: vec2<f32>) -> vec2<f32> {
    let t = two_sum(x.x, y.x);
    return vec2<f32>(t.x, t.y + x.y + y.y);
}
