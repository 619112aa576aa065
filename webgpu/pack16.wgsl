// Packed 16-bit storage (pack16.py): float16 / bfloat16 <-> f32 conversions, exact on specials (WGSL leaves
// pack2x16float of inf and NaN indeterminate), prepended to every kernel with a packed binding.
fn pk_f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-08)); }  // m * 2^-24
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn pk_f32_to_f16(x: f32) -> u32 {
    let v = fix_f16(x);                 // round to nearest even (overflow to inf) first: then exact below
    let u = bitcast<u32>(v);
    let s = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u; }
    if (a >= 0x47800000u) { return s | 0x7c00u; }
    if (a < 0x38800000u) { return s | u32(round(bitcast<f32>(a) * 16777216.0)); }
    return s | (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
}
fn pk_bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }
fn pk_f32_to_bf16(x: f32) -> u32 { return bitcast<u32>(fix_bf16(x)) >> 16u; }

//! kernel map_pair
// A packed result a word per thread: each thread evaluates its loads and expression (which read element i:
// elementwise.map's, or in0[i] of f32 values already rounded to the format) for i = 2w and 2w + 1 and stores
// their word whole, so no two threads share a word and no atomics are needed
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let w = flat_id(wid, nwg, lid);
    let n = prm[0];
    if (2u * w >= n) { return; }
    var h = array<u32, 2>(0u, 0u);
    for (var e = 0u; e < 2u; e = e + 1u) {
        let i = 2u * w + e;
        if (i < n) {
            $LOADS
            h[e] = pk_f32_to_$FMT($EXPR);
        }
    }
    out[w] = h[0] | (h[1] << 16u);
}
