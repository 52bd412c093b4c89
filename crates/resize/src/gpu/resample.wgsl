// The separable resample on interleaved 8-bit pixels, fast_image_resize's integer arithmetic:
// i32 sums of u8 samples times i16 weights, starting from half a unit, shifted right by the
// axis' precision and clamped to 0..255. Images are bytes packed four to a u32 (rows packed,
// no padding); each invocation writes one whole u32 of the output (four samples), so no two
// invocations share a word and no atomics are needed.

struct Params {
    out_w: u32,     // output pixels per row
    out_h: u32,     // output rows
    in_w: u32,      // input pixels per row
    channels: u32,  // 1 to 4; with 2 or 4 the last is alpha
    frac: u32,      // fractional bits of the weights
    window: u32,    // weights per output index
    premul: u32,    // 1: premultiply alpha while reading (the first pass over the source)
    stride: u32,    // workgroups per grid row (Gpu::row_stride)
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read> p: Params;
@group(0) @binding(3) var<storage, read> bounds: array<vec2<u32>>; // (first input index, taps)
@group(0) @binding(4) var<storage, read> weights: array<i32>;

fn byte_at(i: u32) -> u32 {
    return (src[i >> 2u] >> ((i & 3u) * 8u)) & 255u;
}

// a·b/255 rounded, as fast_image_resize's mul_div_255.
fn mul_div_255(a: u32, b: u32) -> u32 {
    let t = a * b + 128u;
    return ((t >> 8u) + t) >> 8u;
}

// Sample `i` (channel `ch`), premultiplied by its pixel's alpha when asked.
fn sample(i: u32, ch: u32) -> i32 {
    var v = byte_at(i);
    if (p.premul != 0u && ch + 1u != p.channels) {
        v = mul_div_255(v, byte_at(i + p.channels - 1u - ch));
    }
    return i32(v);
}

fn finish(acc: i32) -> u32 {
    return u32(clamp(acc >> p.frac, 0, 255));
}

fn word_index(g: vec3<u32>, l: u32) -> u32 {
    return (g.x + g.y * p.stride) * 64u + l;
}

// Output row y from the input rows bounds[y]; input and output rows are equally long.
@compute @workgroup_size(64)
fn vertical(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let w = word_index(g, l);
    let row_len = p.out_w * p.channels;
    let total = row_len * p.out_h;
    if (w >= (total + 3u) / 4u) {
        return;
    }
    if (row_len % 4u == 0u) {
        // Rows of whole words: the word's four samples share a row and read one aligned
        // source word per tap (whole pixels too when premultiplying: RGBA or two GA).
        let y = (w * 4u) / row_len;
        let bd = bounds[y];
        let k = y * p.window;
        let step = row_len / 4u;
        var s = bd.x * step + (w - y * step);
        var acc = vec4<i32>(1 << (p.frac - 1u));
        for (var t = 0u; t < bd.y; t++) {
            var v = (vec4<u32>(src[s]) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
            if (p.premul != 0u) {
                // Colour times its pixel's alpha, alpha times 255 (kept as it is).
                var a = vec4<u32>(v.y, 255u, v.w, 255u);
                if (p.channels == 4u) {
                    a = vec4<u32>(v.w, v.w, v.w, 255u);
                }
                let m = v * a + vec4<u32>(128u);
                v = ((m >> vec4<u32>(8u)) + m) >> vec4<u32>(8u);
            }
            acc += vec4<i32>(v) * weights[k + t];
            s += step;
        }
        let r = vec4<u32>(clamp(acc >> vec4<u32>(p.frac), vec4<i32>(0), vec4<i32>(255)));
        dst[w] = r.x | (r.y << 8u) | (r.z << 16u) | (r.w << 24u);
        return;
    }
    var word = 0u;
    for (var b = 0u; b < 4u; b++) {
        let i = w * 4u + b;
        if (i >= total) {
            break;
        }
        let y = i / row_len;
        let xc = i - y * row_len;
        let ch = xc % p.channels;
        let bd = bounds[y];
        let k = y * p.window;
        var s = bd.x * row_len + xc;
        var acc = 1 << (p.frac - 1u);
        for (var t = 0u; t < bd.y; t++) {
            acc += sample(s, ch) * weights[k + t];
            s += row_len;
        }
        word |= finish(acc) << (b * 8u);
    }
    dst[w] = word;
}

// Output column x from the input columns bounds[x] of the same row.
@compute @workgroup_size(64)
fn horizontal(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let w = word_index(g, l);
    let c = p.channels;
    let total = p.out_w * p.out_h * c;
    if (w >= (total + 3u) / 4u) {
        return;
    }
    var word = 0u;
    for (var b = 0u; b < 4u; b++) {
        let i = w * 4u + b;
        if (i >= total) {
            break;
        }
        let px = i / c;
        let ch = i - px * c;
        let y = px / p.out_w;
        let x = px - y * p.out_w;
        let bd = bounds[x];
        let k = x * p.window;
        var s = (y * p.in_w + bd.x) * c + ch;
        var acc = 1 << (p.frac - 1u);
        for (var t = 0u; t < bd.y; t++) {
            acc += sample(s, ch) * weights[k + t];
            s += c;
        }
        word |= finish(acc) << (b * 8u);
    }
    dst[w] = word;
}

// Colour divided by alpha again, as fast_image_resize's divide_alpha: v·round(255·256/a)/256
// rounded, at most 255; alpha 0 gives 0.
@compute @workgroup_size(64)
fn unpremultiply(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let w = word_index(g, l);
    let c = p.channels;
    let total = p.out_w * p.out_h * c;
    if (w >= (total + 3u) / 4u) {
        return;
    }
    var word = 0u;
    for (var b = 0u; b < 4u; b++) {
        let i = w * 4u + b;
        if (i >= total) {
            break;
        }
        let ch = i % c;
        var v = byte_at(i);
        if (ch + 1u != c) {
            let a = byte_at(i + c - 1u - ch);
            var recip = 0u;
            if (a != 0u) {
                recip = ((255u * 512u) / a + 1u) >> 1u;
            }
            v = min((v * recip + 128u) >> 8u, 255u);
        }
        word |= v << (b * 8u);
    }
    dst[w] = word;
}
