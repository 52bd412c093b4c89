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

// row_ptr[r + 1] = pixels above the threshold in row r.
@compute @workgroup_size(256)
fn count_rows(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let r = flat(g, p.stride);
    if (r >= p.rows) {
        return;
    }
    var c = 0u;
    for (var x = l; x < p.cols; x = x + WG) {
        c = c + u32(above(frame[r * p.cols + x], p.threshold));
    }
    part[l] = c;
    scan_part(l);
    if (l == 0u) {
        row_ptr[r + 1u] = part[WG - 1u];
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

@compute @workgroup_size(256)
fn fill_rows(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let r = flat(g, p.stride);
    if (r >= p.rows) {
        return;
    }
    var base = row_ptr[r];
    for (var x0 = 0u; x0 < p.cols; x0 = x0 + WG) {
        let x = x0 + l;
        var v = 0.0;
        var keep = false;
        if (x < p.cols) {
            v = frame[r * p.cols + x];
            keep = above(v, p.threshold);
        }
        part[l] = u32(keep);
        scan_part(l);
        if (keep) {
            let k = base + part[l] - 1u;
            col[k] = x;
            val[k] = v;
        }
        base = base + part[WG - 1u];
        workgroupBarrier();
    }
}
