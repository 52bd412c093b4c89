// CSR of the pixels above a threshold, in three passes over a band of whole rows: count per
// row (one workgroup per row), exclusive scan of the counts (one workgroup), fill in column
// order (one workgroup per row, a workgroup-wide scan per block of 256 columns).
struct CsrParams {
    rows: u32,
    cols: u32,
    stride: u32,
    pad: u32,
    threshold: f32,
    pad1: u32,
    pad2: u32,
    pad3: u32,
}

@group(0) @binding(0) var<storage, read> frame: array<f32>;
@group(0) @binding(1) var<storage, read_write> row_ptr: array<u32>;
@group(0) @binding(2) var<storage, read_write> col: array<u32>;
@group(0) @binding(3) var<storage, read_write> val: array<f32>;
@group(0) @binding(4) var<storage, read> p: CsrParams;

var<workgroup> part: array<u32, 256>;

// Inclusive scan of `part` (Hillis–Steele); every invocation must call it.
fn scan_part(l: u32) {
    for (var d = 1u; d < WG; d = d << 1u) {
        workgroupBarrier();
        var v = 0u;
        if (l >= d) {
            v = part[l - d];
        }
        workgroupBarrier();
        part[l] = part[l] + v;
    }
    workgroupBarrier();
}

var<workgroup> total: atomic<u32>;

// row_ptr[r + 1] = pixels above the threshold in row r (a sum: workgroup atomics, no scan).
@compute @workgroup_size(256)
fn count_rows(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let r = flat(g, p.stride);
    if (r >= p.rows) {
        return;
    }
    if (l == 0u) {
        atomicStore(&total, 0u);
    }
    workgroupBarrier();
    var c = 0u;
    for (var x = l; x < p.cols; x = x + WG) {
        c = c + u32(above(frame[r * p.cols + x], p.threshold));
    }
    if (c != 0u) {
        atomicAdd(&total, c);
    }
    workgroupBarrier();
    if (l == 0u) {
        row_ptr[r + 1u] = atomicLoad(&total);
    }
}

// row_ptr[0] = 0 and row_ptr[1..] becomes its inclusive prefix sum.
@compute @workgroup_size(256)
fn scan_rows(@builtin(local_invocation_index) l: u32) {
    let per = (p.rows + WG - 1u) / WG;
    let lo = min(l * per, p.rows);
    let hi = min(lo + per, p.rows);
    var s = 0u;
    for (var r = lo; r < hi; r = r + 1u) {
        s = s + row_ptr[r + 1u];
    }
    part[l] = s;
    scan_part(l);
    var run = part[l] - s;
    for (var r = lo; r < hi; r = r + 1u) {
        run = run + row_ptr[r + 1u];
        row_ptr[r + 1u] = run;
    }
    if (l == 0u) {
        row_ptr[0] = 0u;
    }
}

// Entries in column order: each invocation takes four neighbouring columns of a block of
// 1024, so one workgroup scan places a whole block.
@compute @workgroup_size(256)
fn fill_rows(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let r = flat(g, p.stride);
    if (r >= p.rows) {
        return;
    }
    var base = row_ptr[r];
    let row = r * p.cols;
    for (var x0 = 0u; x0 < p.cols; x0 = x0 + 4u * WG) {
        let x = x0 + 4u * l;
        var v = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
        var m = 0u;
        var c = 0u;
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (x + j < p.cols) {
                v[j] = frame[row + x + j];
                if (above(v[j], p.threshold)) {
                    m = m | (1u << j);
                    c = c + 1u;
                }
            }
        }
        part[l] = c;
        scan_part(l);
        var k = base + part[l] - c;
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (((m >> j) & 1u) != 0u) {
                col[k] = x + j;
                val[k] = v[j];
                k = k + 1u;
            }
        }
        base = base + part[WG - 1u];
        workgroupBarrier();
    }
}

// The CSR as the host reads it, in host-visible buffers: row pointers, columns packed two
// 16-bit values per word (entry 2i low, 2i + 1 high), values. Only the kept entries (rounded up
// to four) are written, so only they cross the bus. Each invocation stores four values as one
// vec4 and their columns as one vec2, so a subgroup's stores cover whole contiguous lines: on
// a discrete GPU these buffers are host memory, and stores of every other word (the two
// scalar stores per invocation before) cross the bus as partial lines.
@group(0) @binding(5) var<storage, read_write> out_ptr: array<u32>;
@group(0) @binding(6) var<storage, read_write> out_col: array<vec2<u32>>;
@group(0) @binding(7) var<storage, read_write> out_val: array<vec4<f32>>;

@compute @workgroup_size(256)
fn pack(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let i = flat(g, p.stride) * WG + l;
    if (i <= p.rows) {
        out_ptr[i] = row_ptr[i];
    }
    let nnz = row_ptr[p.rows];
    let k = 4u * i;
    if (k < nnz) {
        var v = vec4<f32>(0.0);
        var c = vec2<u32>(0u);
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (k + j < nnz) {
                v[j] = val[k + j];
                c[j / 2u] = c[j / 2u] | ((col[k + j] & 0xffffu) << (16u * (j % 2u)));
            }
        }
        out_val[i] = v;
        out_col[i] = c;
    }
}
