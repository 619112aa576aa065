// Indexing family: gather (index_select is a gather whose index view has zero strides off
// the axis) and scatter (replace, or add with atomics). Indices are i32 words.
// prm: common layout; [4] the addressed tensor's stride along the axis; view 0 = index,
// view 1 = x (gather) or src (scatter), view 2 = scatter's output; the addressed view has a
// zero stride on the axis, whose term comes from the index value instead.

// offsets of iteration index i in views 0, 1, 2
fn walk(i: u32) -> vec3<i32> {
    var rem = i;
    var io = bitcast<i32>(prm[16]);
    var vo = bitcast<i32>(prm[25]);
    var to = bitcast<i32>(prm[34]);
    for (var d = prm[1]; d > 0u; d = d - 1u) {
        let c = i32(rem % prm[7u + d]);
        rem = rem / prm[7u + d];
        io = io + c * bitcast<i32>(prm[16u + d]);
        vo = vo + c * bitcast<i32>(prm[25u + d]);
        to = to + c * bitcast<i32>(prm[34u + d]);
    }
    return vec3<i32>(io, vo, to);
}

//! kernel gather
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let w = walk(i);
    out[i] = in0[w.y + in1[w.x] * bitcast<i32>(prm[4])];
}

//! kernel scatter_set
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let w = walk(i);
    out[w.z + in1[w.x] * bitcast<i32>(prm[4])] = in0[w.y];
}

//! kernel scatter_add
// floats: compare-and-swap loop on the word's bits (WGSL has no float atomics)
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let w = walk(i);
    let t = w.z + in1[w.x] * bitcast<i32>(prm[4]);
    $ADD
}
