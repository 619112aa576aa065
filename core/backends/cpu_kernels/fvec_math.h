// fvec.h's vector math, written once and included there once per vector width: VT the vector, VM its lane mask,
// V(name) the width's function (f8_exp, fw_exp, ...). Plain IEEE operations in one order, no fused multiply-add:
// each lane's value is the same whichever target or width computes it (NaN aside, whose payload may differ).
// (No include guard: fvec.h defines VT, VM and V before each inclusion.)

static inline VT V(c)(float c) { return V(splat)(c); }

// exp(x), Cephes expf (elementwise.c's, decode.c's): x = m ln2 + r, a degree-7 polynomial for e^r, 2^m in the
// exponent bits. ~2 ulp; below -87.3 exp(-87.3), above 88.7 inf, NaN stays NaN.
static inline VT V(exp)(VT x0) {
    VT x = V(min)(V(c)(88.7228390f), V(max)(V(c)(-87.3365448f), x0));  // (NaN passes both)
    VT m = V(floor)(V(add)(V(mul)(x, V(c)(1.44269504088896341f)), V(c)(0.5f)));
    VT r = V(sub)(x, V(mul)(m, V(c)(0.693359375f)));
    r = V(sub)(r, V(mul)(m, V(c)(-2.12194440e-4f)));
    VT p = V(c)(1.9875691500e-4f);
    p = V(add)(V(mul)(p, r), V(c)(1.3981999507e-3f));
    p = V(add)(V(mul)(p, r), V(c)(8.3334519073e-3f));
    p = V(add)(V(mul)(p, r), V(c)(4.1665795894e-2f));
    p = V(add)(V(mul)(p, r), V(c)(1.6666665459e-1f));
    p = V(add)(V(mul)(p, r), V(c)(5.0000001201e-1f));
    p = V(add)(V(add)(V(mul)(V(mul)(p, r), r), r), V(c)(1.0f));
#if defined(V_SCALEF)
    // p 2^m in one instruction and one rounding (AVX-512's scalef), as p pow2i(m) rounds it for m up to 127; m is
    // 128 from x0 = 88.376 on (x is held at 88.72), where pow2i(128) is inf and so is p inf: inf here too (p > 0),
    // and past 88.72 (m is 128 there). A NaN's m fails the test and scales a NaN p: NaN. The values of the lines below
    return V(sel)(V(gt)(m, V(c)(127.5f)), V(c)(__builtin_inff()), V_SCALEF(p, m));
#else
    // Past 88.72 x is held there, whose m is 128: pow2i(128)'s exponent field is all ones, inf, and p > 0, so y is inf
    // with no test of its own (m is 128 from x0 = 88.3763 on: inf there too, as it always was here)
#if defined(V_POW2I_ANY)  // the target's pow2i takes any m: a NaN's gives some power, p is NaN then
    return V(mul)(p, V(pow2i)(m));
#else
    return V(mul)(p, V(pow2i)(V(sel)(V(eq)(m, m), m, V(zero)())));  // (a NaN's m: 2^0, p is NaN)
#endif
#endif
}

static inline VT V(silu)(VT x) {  // x / (1 + exp(-x)); silu(-inf) = NaN, as torch
    return V(div)(x, V(add)(V(c)(1.0f), V(exp)(V(sub)(V(zero)(), x))));
}

// x Phi(x) = relu(x) - |x| Phi(-|x|) with Phi(-|x|) = t P(t) exp(-x^2 / 2) / 2, t = 1 / (1 + p |x| / sqrt 2)
// (Abramowitz & Stegun 7.1.26, |abs err| < 1.5e-7): the CPU backend's erf GELU (cpu_fused.py) step for step.
// gelu(+inf) = +inf, gelu(-inf) = NaN, as torch. The tail is 0 past |x| = 12.6 (below 1.5e-35; torch's 1 + erf
// rounds to 0 from x = -5.9), computed from |x| held at 12.6: no step makes a subnormal (each costs a microcode
// assist, there and in the next product: Whisper's last fc2 was 20x slower, the GELU itself 10x).
static inline VT V(gelu)(VT x) {
    VT ax = V(abs)(x), a = V(min)(V(c)(12.6f), ax);  // (NaN stays)
    VT t = V(div)(V(c)(1.0f), V(add)(V(c)(1.0f), V(mul)(a, V(c)(0.2316419f))));
    VT p = V(c)(1.061405429f * 0.5f);
    p = V(mul)(V(add)(V(mul)(p, t), V(c)(-1.453152027f * 0.5f)), t);
    p = V(mul)(V(add)(p, V(c)(1.421413741f * 0.5f)), t);
    p = V(mul)(V(add)(p, V(c)(-0.284496736f * 0.5f)), t);
    p = V(mul)(V(add)(p, V(c)(0.254829592f * 0.5f)), t);
    VT tail = V(mul)(V(mul)(p, V(exp)(V(mul)(V(mul)(a, a), V(c)(-0.5f)))), a);
    tail = V(sel)(V(gt)(ax, V(c)(12.6f)), V(zero)(), tail);
    VM inf = V(eq)(ax, V(c)(__builtin_inff()));  // 0 * inf in the tail: 0 at +inf, NaN at -inf
    tail = V(sel)(inf, V(sel)(V(gt)(x, V(zero)()), V(zero)(), V(c)(__builtin_nanf(""))), tail);
    return V(sub)(V(max)(x, V(zero)()), tail);
}

// tanh(x), Cephes tanhf (decode.c's): a polynomial near 0, 1 - 2 / (e^2|x| + 1) beyond; ~2 ulp
static inline VT V(tanh)(VT x) {
    VT a = V(abs)(x), z = V(mul)(x, x);
    VT p = V(c)(-5.70498872745e-3f);
    p = V(add)(V(mul)(p, z), V(c)(2.06390887954e-2f));
    p = V(sub)(V(mul)(p, z), V(c)(5.37397155531e-2f));
    p = V(add)(V(mul)(p, z), V(c)(1.33314422036e-1f));
    p = V(sub)(V(mul)(p, z), V(c)(3.33332819422e-1f));
    VT near = V(add)(V(mul)(V(mul)(p, z), x), x);
    VT far = V(sub)(V(c)(1.0f), V(div)(V(c)(2.0f), V(add)(V(exp)(V(mul)(V(c)(2.0f), a)), V(c)(1.0f))));
    far = V(sel)(V(gt)(V(zero)(), x), V(sub)(V(zero)(), far), far);
    return V(sel)(V(gt)(a, V(c)(0.625f)), far, near);
}

static inline VT V(gelu_tanh)(VT x) {  // ember's tanh GELU: (tanh(sqrt(2/pi) (x + 0.044715 x^3)) + 1) x / 2
    VT u = V(mul)(V(add)(x, V(mul)(V(mul)(V(mul)(V(c)(0.044715f), x), x), x)), V(c)(0.7978845608028654f));
    return V(mul)(V(mul)(V(add)(V(tanh)(u), V(c)(1.0f)), x), V(c)(0.5f));
}

static inline VT V(act)(VT v, int act) {  // fvec.h's ACT_* (an epilogue's activation)
    switch (act) {
    case ACT_RELU: return V(max)(V(zero)(), v);  // (0 > NaN is false: NaN stays, as torch)
    case ACT_SILU: return V(silu)(v);
    case ACT_GELU: return V(gelu)(v);
    case ACT_GELU_TANH: return V(gelu_tanh)(v);
    default: return v;
    }
}
