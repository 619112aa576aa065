// Shared helpers, prepended to every ember kernel.
// prm (parameter words) layout (u32 words): [0] n  [1] ndim  [2] flat-view bitmask  [3..7] scalar params
//                          [8..15] iteration shape  [16 + 9k] view k: offset, strides[8] (i32 bits)
const WG: u32 = 256u;

fn flat_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    // 2-D dispatches cover more than 65535 workgroups
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// element offset of iteration index i in view k (a view follows the iteration shape)
fn view_index(i: u32, k: u32) -> i32 {
    let base = 16u + k * 9u;
    var off = bitcast<i32>(prm[base]);
    if ((prm[2] & (1u << k)) != 0u) {
        return off + i32(i);
    }
    var rem = i;
    for (var d = prm[1]; d > 0u; d = d - 1u) {
        let s = prm[7u + d];
        off = off + i32(rem % s) * bitcast<i32>(prm[base + d]);
        rem = rem / s;
    }
    return off;
}

// private vars, not literals: Tint rejects a constant-folded inf/NaN
var<private> INF_BITS: u32 = 0x7f800000u;
var<private> NAN_BITS: u32 = 0x7fc00000u;
fn f_inf() -> f32 { return bitcast<f32>(INF_BITS); }
fn f_nan() -> f32 { return bitcast<f32>(NAN_BITS); }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn never_i(x: i32) -> bool { return false; }  // is_nan for integer kernels
fn never_u(x: u32) -> bool { return false; }

// float16 values stored in f32 words: round to nearest even, overflow to inf, subnormals kept
fn fix_f16(x: f32) -> f32 {
    let a = abs(x);
    if (is_nan(x)) { return x; }
    if (a >= 65520.0) { return select(-f_inf(), f_inf(), x > 0.0); }
    if (a < 6.103515625e-05) { return round(x * 16777216.0) / 16777216.0; }
    let u = bitcast<u32>(x);
    return bitcast<f32>((u + 0xfffu + ((u >> 13u) & 1u)) & 0xffffe000u);
}

// bfloat16 values stored in f32 words: round to nearest even; NaN stays a quiet NaN
fn fix_bf16(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if (is_nan(x)) { return bitcast<f32>((u | 0x00400000u) & 0xffff0000u); }
    return bitcast<f32>((u + 0x7fffu + ((u >> 16u) & 1u)) & 0xffff0000u);
}

fn fix_u8(x: u32) -> u32 { return x & 255u; }
fn fix_i8(x: i32) -> i32 { return (x << 24u) >> 24u; }
