// Movement family: strided copy (view -> view), fill and arange. Contiguous copies, pad and
// cat are all a strided copy into a (sub)view of a fresh buffer.

//! kernel copy
// view 0 addresses out (the destination), view 1 addresses in0
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    out[view_index(i, 0u)] = in0[view_index(i, 1u)];
}

//! kernel copy2
// two copies of one shape in one dispatch (a KV cache's k and v rows): view 0 addresses out, 1 in0,
// 2 in1 (the second destination, bound read_write), 3 in2
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    out[view_index(i, 0u)] = in0[view_index(i, 1u)];
    in1[view_index(i, 2u)] = in2[view_index(i, 3u)];
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
