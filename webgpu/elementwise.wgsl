// Elementwise family: unary, binary (broadcast, strided views, scalar operand), where, cast.
// Op functions are named op_<name>_<kind>, kind f (f32), i (i32), u (u32); the backend picks
// one by name and reports a clear error when a kind lacks the op.

// ---------------------------------------------------------------- unary, float
fn op_neg_f(x: f32) -> f32 { return -x; }
fn op_exp_f(x: f32) -> f32 { return exp(x); }
fn op_log_f(x: f32) -> f32 {
    if (x < 0.0) { return f_nan(); }
    if (x == 0.0) { return -f_inf(); }
    return log(x);
}
fn op_sin_f(x: f32) -> f32 { return sin(x); }
fn op_cos_f(x: f32) -> f32 { return cos(x); }
fn op_sqrt_f(x: f32) -> f32 { return select(sqrt(x), f_nan(), x < 0.0); }
fn op_rsqrt_f(x: f32) -> f32 { return select(1.0 / sqrt(x), f_nan(), x < 0.0); }
fn op_tanh_f(x: f32) -> f32 {
    // some drivers return NaN for large |x|; tanh is +-1 to f32 precision beyond 10
    if (is_nan(x)) { return x; }
    return tanh(clamp(x, -10.0, 10.0));
}
fn op_erf_f(x: f32) -> f32 {
    // Numerical Recipes erfc Chebyshev fit, fractional error < 1.2e-7
    if (is_nan(x)) { return x; }
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
            t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
            t * (-0.82215223 + t * 0.17087277)))))))));
    let e = 1.0 - r;
    return select(-e, e, x >= 0.0);
}
fn op_abs_f(x: f32) -> f32 { return abs(x); }
fn op_sign_f(x: f32) -> f32 {
    if (is_nan(x)) { return 0.0; }
    return select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0);
}
fn op_floor_f(x: f32) -> f32 { return floor(x); }
fn op_ceil_f(x: f32) -> f32 { return ceil(x); }
fn op_round_f(x: f32) -> f32 { return round(x); }  // WGSL rounds half to even, as torch
fn op_sigmoid_f(x: f32) -> f32 {
    if (x >= 0.0) { return 1.0 / (1.0 + exp(-x)); }
    let e = exp(x);
    return e / (1.0 + e);
}
fn op_recip_f(x: f32) -> f32 { return 1.0 / x; }

// ---------------------------------------------------------------- unary, integer and bool
fn op_neg_i(x: i32) -> i32 { return -x; }
fn op_abs_i(x: i32) -> i32 { return abs(x); }
fn op_sign_i(x: i32) -> i32 { return sign(x); }
fn op_floor_i(x: i32) -> i32 { return x; }
fn op_ceil_i(x: i32) -> i32 { return x; }
fn op_round_i(x: i32) -> i32 { return x; }
fn op_neg_u(x: u32) -> u32 { return 0u - x; }
fn op_abs_u(x: u32) -> u32 { return x; }
fn op_sign_u(x: u32) -> u32 { return select(0u, 1u, x > 0u); }
fn op_not_u(x: u32) -> u32 { return select(0u, 1u, x == 0u); }

// ---------------------------------------------------------------- binary, float
fn op_add_f(a: f32, b: f32) -> f32 { return a + b; }
fn op_sub_f(a: f32, b: f32) -> f32 { return a - b; }
fn op_mul_f(a: f32, b: f32) -> f32 { return a * b; }
fn op_div_f(a: f32, b: f32) -> f32 { return a / b; }
fn op_pow_f(a: f32, b: f32) -> f32 {
    // WGSL pow is exp2(b * log2(a)): undefined for a < 0, so handle signs and zero here
    if (b == 0.0) { return 1.0; }
    if (is_nan(a) || is_nan(b)) { return f_nan(); }
    if (a == 0.0) { return select(0.0, f_inf(), b < 0.0); }
    let r = pow(abs(a), b);
    if (a > 0.0) { return r; }
    if (floor(b) != b) { return f_nan(); }
    let odd = abs(b) < 16777216.0 && (i32(abs(b)) & 1) == 1;
    return select(r, -r, odd);
}
fn op_maximum_f(a: f32, b: f32) -> f32 { return select(max(a, b), f_nan(), is_nan(a) || is_nan(b)); }
fn op_minimum_f(a: f32, b: f32) -> f32 { return select(min(a, b), f_nan(), is_nan(a) || is_nan(b)); }
fn op_fmod_f(a: f32, b: f32) -> f32 {
    if (b == 0.0 || is_nan(a) || is_nan(b) || abs(a) == f_inf()) { return f_nan(); }
    if (abs(b) == f_inf()) { return a; }
    return a - b * trunc(a / b);
}
fn op_floordiv_f(a: f32, b: f32) -> f32 {
    // numpy's floor_divide: derived from fmod so that a == b * q + r holds exactly
    if (b == 0.0) { return a / b; }
    let m = op_fmod_f(a, b);
    var d = (a - m) / b;
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) { d = d - 1.0; }
    if (d == 0.0) { return select(0.0, -0.0, a / b < 0.0); }
    let f = floor(d);
    return select(f, f + 1.0, d - f > 0.5);
}
fn op_eq_f(a: f32, b: f32) -> bool { return a == b; }
fn op_ne_f(a: f32, b: f32) -> bool { return a != b || is_nan(a) || is_nan(b); }
fn op_lt_f(a: f32, b: f32) -> bool { return a < b; }
fn op_le_f(a: f32, b: f32) -> bool { return a <= b; }
fn op_gt_f(a: f32, b: f32) -> bool { return a > b; }
fn op_ge_f(a: f32, b: f32) -> bool { return a >= b; }
fn op_and_f(a: f32, b: f32) -> bool { return a != 0.0 && b != 0.0; }
fn op_or_f(a: f32, b: f32) -> bool { return a != 0.0 || b != 0.0; }
fn op_xor_f(a: f32, b: f32) -> bool { return (a != 0.0) != (b != 0.0); }

// ---------------------------------------------------------------- binary, signed integer
fn op_add_i(a: i32, b: i32) -> i32 { return a + b; }
fn op_sub_i(a: i32, b: i32) -> i32 { return a - b; }
fn op_mul_i(a: i32, b: i32) -> i32 { return a * b; }
fn op_div_i(a: i32, b: i32) -> i32 { return i32(f32(a) / f32(b)); }
fn op_pow_i(a: i32, b: i32) -> i32 {
    var r = 1;
    var base = a;
    var e = b;
    loop {
        if (e <= 0) { break; }
        if ((e & 1) == 1) { r = r * base; }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}
fn op_maximum_i(a: i32, b: i32) -> i32 { return max(a, b); }
fn op_minimum_i(a: i32, b: i32) -> i32 { return min(a, b); }
// remainders from the quotient, not `%`: NVIDIA's Vulkan driver gave -1 % 3 == 0 (an unsigned remainder)
fn op_fmod_i(a: i32, b: i32) -> i32 { return select(a - b * (a / b), 0, b == 0); }
fn op_floordiv_i(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    let q = a / b;
    let r = a - b * q;
    return select(q, q - 1, (r != 0) && ((r < 0) != (b < 0)));
}
fn op_eq_i(a: i32, b: i32) -> bool { return a == b; }
fn op_ne_i(a: i32, b: i32) -> bool { return a != b; }
fn op_lt_i(a: i32, b: i32) -> bool { return a < b; }
fn op_le_i(a: i32, b: i32) -> bool { return a <= b; }
fn op_gt_i(a: i32, b: i32) -> bool { return a > b; }
fn op_ge_i(a: i32, b: i32) -> bool { return a >= b; }
fn op_and_i(a: i32, b: i32) -> bool { return a != 0 && b != 0; }
fn op_or_i(a: i32, b: i32) -> bool { return a != 0 || b != 0; }
fn op_xor_i(a: i32, b: i32) -> bool { return (a != 0) != (b != 0); }

// ---------------------------------------------------------------- binary, unsigned and bool
fn op_add_u(a: u32, b: u32) -> u32 { return a + b; }
fn op_sub_u(a: u32, b: u32) -> u32 { return a - b; }
fn op_mul_u(a: u32, b: u32) -> u32 { return a * b; }
fn op_div_u(a: u32, b: u32) -> u32 { return u32(f32(a) / f32(b)); }
fn op_maximum_u(a: u32, b: u32) -> u32 { return max(a, b); }
fn op_minimum_u(a: u32, b: u32) -> u32 { return min(a, b); }
fn op_fmod_u(a: u32, b: u32) -> u32 { return select(a % b, 0u, b == 0u); }
fn op_floordiv_u(a: u32, b: u32) -> u32 { return select(a / b, 0u, b == 0u); }
fn op_eq_u(a: u32, b: u32) -> bool { return a == b; }
fn op_ne_u(a: u32, b: u32) -> bool { return a != b; }
fn op_lt_u(a: u32, b: u32) -> bool { return a < b; }
fn op_le_u(a: u32, b: u32) -> bool { return a <= b; }
fn op_gt_u(a: u32, b: u32) -> bool { return a > b; }
fn op_ge_u(a: u32, b: u32) -> bool { return a >= b; }
fn op_and_u(a: u32, b: u32) -> bool { return a != 0u && b != 0u; }
fn op_or_u(a: u32, b: u32) -> bool { return a != 0u || b != 0u; }
fn op_xor_u(a: u32, b: u32) -> bool { return (a != 0u) != (b != 0u); }

//! kernel map
// out[i] = $EXPR over up to three strided inputs (loaded as a, b, c) and a scalar s
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    $LOADS
    out[i] = $EXPR;
}
