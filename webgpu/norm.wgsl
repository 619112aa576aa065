// Fused row kernels over the last (contiguous) axis: softmax, log_softmax, layer_norm,
// rms_norm and the scale+mask+softmax step of attention. One workgroup per row; statistics
// in f32 through a shared-memory tree. prm: [0] rows [1] row length [2] eps/scale bits
// [3] flags (bit 0 weight, bit 1 bias, bit 2 mask, bit 3 causal) [4] mask row stride
// [5] mask batch stride [6] rows per mask batch (L) [7] causal diagonal offset (0: top-left aligned, as torch)
// [8] mask offset [9] mask column stride

var<workgroup> sh: array<f32, 256>;

fn tree_sum(lid: u32, v: f32) -> f32 {
    sh[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh[lid] = sh[lid] + sh[lid + s]; }
        workgroupBarrier();
    }
    let r = sh[0];
    workgroupBarrier();
    return r;
}

fn tree_max(lid: u32, v: f32) -> f32 {
    sh[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh[lid] = max(sh[lid], sh[lid + s]); }
        workgroupBarrier();
    }
    let r = sh[0];
    workgroupBarrier();
    return r;
}

//! kernel softmax
// $LOG: false = softmax, true = log_softmax
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    let n = prm[1];
    if (row >= prm[0]) { return; }  // uniform per workgroup, so the barriers below stay valid
    let base = row * n;
    var m = -f_inf();
    for (var r = lid; r < n; r = r + 256u) { m = max(m, f32(in0[base + r])); }
    m = tree_max(lid, m);
    var s = 0.0;
    for (var r = lid; r < n; r = r + 256u) { s = s + exp(f32(in0[base + r]) - m); }
    s = tree_sum(lid, s);
    let ls = log(s);
    for (var r = lid; r < n; r = r + 256u) {
        let z = f32(in0[base + r]) - m;
        out[base + r] = $OT($FIX(select(exp(z) / s, z - ls, $LOG)));
    }
}

//! kernel norm
// $RMS: false = layer_norm (x - mean) / sqrt(var + eps), true = rms_norm x / sqrt(mean(x^2) + eps)
// $PRE: empty, or a pass computing a pending elementwise x (fusion.py: a residual add) into in0 first
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    let n = prm[1];
    if (row >= prm[0]) { return; }  // uniform per workgroup, so the barriers below stay valid
    let base = row * n;
    $PRE
    var mu = 0.0;
    if (!$RMS) {
        var s = 0.0;
        for (var r = lid; r < n; r = r + 256u) { s = s + f32(in0[base + r]); }
        mu = tree_sum(lid, s) / f32(n);
    }
    var q = 0.0;
    for (var r = lid; r < n; r = r + 256u) {
        let d = f32(in0[base + r]) - mu;
        q = q + d * d;
    }
    let inv = 1.0 / sqrt(tree_sum(lid, q) / f32(n) + bitcast<f32>(prm[2]));
    let flags = prm[3];
    for (var r = lid; r < n; r = r + 256u) {
        var y = (f32(in0[base + r]) - mu) * inv;
        if ((flags & 1u) != 0u) { y = y * f32(in1[r]); }
        if ((flags & 2u) != 0u) { y = y + f32(in2[r]); }
        out[base + r] = $OT($FIX(y));
    }
}

//! kernel attn_softmax
// softmax(s * scale + mask) in place of the score rows; mask is a strided (L, S) view per batch
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    let n = prm[1];
    if (row >= prm[0]) { return; }
    let rr = row;
    let base = rr * n;
    let scale = bitcast<f32>(prm[2]);
    let flags = prm[3];
    let l = rr % prm[6];
    let mbase = bitcast<i32>(prm[8]) + i32(rr / prm[6]) * bitcast<i32>(prm[5]) + i32(l) * bitcast<i32>(prm[4]);
    let mstep = bitcast<i32>(prm[9]);
    var m = -f_inf();
    for (var r = lid; r < n; r = r + 256u) {
        var v = f32(in0[base + r]) * scale;
        if ((flags & 4u) != 0u) { v = v + f32(in1[mbase + i32(r) * mstep]); }
        if ((flags & 8u) != 0u && r > l + prm[7]) { v = -f_inf(); }
        out[base + r] = v;
        m = max(m, v);
    }
    m = tree_max(lid, m);
    var s = 0.0;
    for (var r = lid; r < n; r = r + 256u) {
        let e = select(exp(out[base + r] - m), 0.0, out[base + r] == -f_inf());
        out[base + r] = e;
        s = s + e;
    }
    s = tree_sum(lid, s);
    for (var r = lid; r < n; r = r + 256u) { out[base + r] = $FIX(out[base + r] / s); }
}
