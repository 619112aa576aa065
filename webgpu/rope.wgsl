// The registry's rotary_embedding kernel on webgpu (webgpu/fused.py ROTARY, run through custom_kernel).
// x (B, T, H, D) -> [x1 cos - x2 sin, x2 cos + x1 sin] per (t, j): one thread per output element
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let T = prm[1];
    let H = prm[2];
    let D = prm[3];
    let half = D / 2u;
    let d = i % D;
    let cs = ((i / (D * H)) % T) * half + d % half;   // row t, column j of cos / sin (T, D / 2)
    let x = f32(in0[i]);
    var r = x * f32(in1[cs]);
    if (d < half) { r = r - f32(in0[i + half]) * f32(in2[cs]); } else { r = r + f32(in0[i - half]) * f32(in2[cs]); }
    out[i] = to_out(r);
}
