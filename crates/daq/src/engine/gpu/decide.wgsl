// The veto on the device: from the frame's count of pixels above the veto threshold, the
// indirect dispatch sizes of every later stage (zero workgroups for a rejected frame), so the
// chain runs without the host looking at the frame between stages.
struct DecideParams {
    min_pixels: u32,
    stride: u32,
    n: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> stats: array<u32>;
@group(0) @binding(1) var<storage, read> groups: array<u32>;
@group(0) @binding(2) var<storage, read_write> args: array<u32>;
@group(0) @binding(3) var<storage, read> p: DecideParams;

@compute @workgroup_size(64)
fn decide(@builtin(local_invocation_index) l: u32) {
    let kept = stats[0] >= p.min_pixels;
    for (var j = l; j < p.n; j = j + 64u) {
        let n = select(0u, groups[j], kept);
        let x = min(n, p.stride);
        args[3u * j] = x;
        args[3u * j + 1u] = select(0u, (n + p.stride - 1u) / p.stride, n > 0u);
        args[3u * j + 2u] = 1u;
    }
}
