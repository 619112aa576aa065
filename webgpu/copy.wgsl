// Movement family: strided copy (view -> view), fill and arange. Contiguous copies, pad and
// cat are all a strided copy into a (sub)view of a fresh buffer.

//! kernel copy
// view 0 addresses out (the destination), view 1 addresses in0; $PAIR: empty, or a second copy of the
// same shape in the same dispatch (a KV cache's k and v rows: in1[view 2] = in2[view 3], in1 read_write)
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    out[view_index(i, 0u)] = in0[view_index(i, 1u)];
    $PAIR
}

//! kernel fill
// view 0 addresses out; prm[3] holds the value's bits
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    out[view_index(i, 0u)] = $VAL;
}

//! kernel arange
// prm[3], prm[4]: start and step bits in the compute type $CT
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    out[i] = $OT($FIX(bitcast<$CT>(prm[3]) + $CT(i) * bitcast<$CT>(prm[4])));
}
