// The registry's flash_attention_combine kernel on webgpu (webgpu/fused.py FLASH_COMBINE): flash-decoding's pass 2.
// in0 (rows, n, Dv + 2) chunk rows from attention.wgsl's split pass -> out (rows, Dv): one thread per output
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let n = prm[1];
    let Dv = prm[2];
    let base = (i / Dv) * n * (Dv + 2u);
    let c = i % Dv;
    var big = -f_inf();
    for (var j = 0u; j < n; j = j + 1u) { big = max(big, f32(in0[base + j * (Dv + 2u) + Dv])); }
    var num = 0.0;
    var den = 0.0;
    for (var j = 0u; j < n; j = j + 1u) {
        let row = base + j * (Dv + 2u);
        let m = f32(in0[row + Dv]);
        let w = select(exp(m - big), 0.0, m == -f_inf());
        num = num + w * f32(in0[row + c]);
        den = den + w * f32(in0[row + Dv + 1u]);
    }
    out[i] = to_out(num / den);
}
