// Reduction family over contiguous rows: prm [0] rows, [1] row length R.
// One workgroup per row with a shared-memory tree; the backend moves the reduced axes last.

fn comb_sum(a: $T, b: $T) -> $T { return a + b; }
fn comb_prod(a: $T, b: $T) -> $T { return a * b; }
fn comb_max(a: $T, b: $T) -> $T { return max(a, b); }  // NaN is handled by the kernel
fn comb_min(a: $T, b: $T) -> $T { return min(a, b); }

//! kernel reduce
var<workgroup> sh: array<$T, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    let n = prm[1];
    var acc: $T = $INIT;
    var bad = false;  // NaN seen (max/min propagate NaN as torch)
    if (row < prm[0]) {
        for (var r = lid; r < n; r = r + 256u) {
            let v = $T(in0[row * n + r]);
            bad = bad || $NAN(v);
            acc = comb_$OP(acc, v);
        }
    }
    sh[lid] = select(acc, $NANVAL, bad && $PROPAGATE);
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let a = sh[lid];
            let b = sh[lid + s];
            sh[lid] = select(comb_$OP(a, b), $NANVAL, $PROPAGATE && ($NAN(a) || $NAN(b)));
        }
        workgroupBarrier();
    }
    if (lid == 0u && row < prm[0]) { out[row] = $FIX($OT(sh[0])); }
}

//! kernel arg_reduce
// argmax/argmin: first occurrence wins, NaN counts as the extreme (torch)
var<workgroup> shv: array<$T, 256>;
var<workgroup> shi: array<u32, 256>;
fn wins(a: $T, ia: u32, b: $T, ib: u32) -> bool {
    if (ib == 0xffffffffu) { return true; }
    if (ia == 0xffffffffu) { return false; }
    let na = $NAN(a);
    let nb = $NAN(b);
    if (na || nb) { return select(na, ia < ib, na && nb); }
    if (a == b) { return ia < ib; }
    return a $CMP b;
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    let n = prm[1];
    var best: $T = $T(0);
    var bi = 0xffffffffu;
    if (row < prm[0]) {
        for (var r = lid; r < n; r = r + 256u) {
            let v = $T(in0[row * n + r]);
            if (wins(v, r, best, bi)) { best = v; bi = r; }
        }
    }
    shv[lid] = best;
    shi[lid] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s && wins(shv[lid + s], shi[lid + s], shv[lid], shi[lid])) {
            shv[lid] = shv[lid + s];
            shi[lid] = shi[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u && row < prm[0]) { out[row] = i32(shi[0]); }
}

//! kernel cumsum
// one invocation per row, sequential in the row's order (as numpy's cumsum)
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = flat_id(wid, nwg, lid);
    if (row >= prm[0]) { return; }
    let n = prm[1];
    var acc: $T = $T(0);
    for (var r = 0u; r < n; r = r + 1u) {
        acc = acc + $T(in0[row * n + r]);
        out[row * n + r] = $OT($FIX(acc));  // accumulate unrounded, as numpy's f16 cumsum in f32
    }
}

//! kernel argsort
// stable rank sort: element r of a row goes to the count of elements ordered before it
// (O(R^2) per row, fine for the row lengths ember sorts: top-k, sampling, nms)
fn before(a: $T, ia: u32, b: $T, ib: u32) -> bool {
    // NaN sorts as the largest value, ties keep index order
    let na = $NAN(a);
    let nb = $NAN(b);
    if (na || nb) { return select(!na, ia < ib, na && nb); }
    if (a == b) { return ia < ib; }
    return a $CMP b;
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    let n = prm[1];
    if (i >= prm[0] * n) { return; }
    let row = i / n;
    let r = i % n;
    let v = $T(in0[i]);
    var rank = 0u;
    for (var j = 0u; j < n; j = j + 1u) {
        if (before($T(in0[row * n + j]), j, v, r)) { rank = rank + 1u; }
    }
    out[row * n + rank] = i32(r);
}
