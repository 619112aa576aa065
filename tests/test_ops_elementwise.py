"""Elementwise, comparison, activation ops: forward and gradients vs torch 2.13 CPU, on every device."""
import numpy as np
import pytest

import ember
from op_helper import check, make

UNARY = {
    "exp": (lambda m, x: x.exp(), -2, 2), "log": (lambda m, x: x.log(), 0.1, 3),
    "sin": (lambda m, x: x.sin(), -3, 3), "cos": (lambda m, x: x.cos(), -3, 3),
    "tanh": (lambda m, x: x.tanh(), -3, 3), "sqrt": (lambda m, x: x.sqrt(), 0.1, 3),
    "rsqrt": (lambda m, x: x.rsqrt(), 0.2, 3), "abs": (lambda m, x: x.abs(), -2, 2),
    "neg": (lambda m, x: -x, -2, 2), "sign": (lambda m, x: x.sign(), -2, 2),
    "floor": (lambda m, x: x.floor(), -3, 3), "ceil": (lambda m, x: x.ceil(), -3, 3),
    "round": (lambda m, x: x.round(), -3, 3), "erf": (lambda m, x: m.erf(x), -3, 3),
    "sigmoid": (lambda m, x: x.sigmoid(), -8, 8), "reciprocal": (lambda m, x: x.reciprocal(), 0.3, 3),
    "relu": (lambda m, x: m.nn.functional.relu(x), -2, 2),
    "gelu": (lambda m, x: m.nn.functional.gelu(x), -4, 4),
    "gelu_tanh": (lambda m, x: m.nn.functional.gelu(x, approximate="tanh"), -4, 4),
    "silu": (lambda m, x: m.nn.functional.silu(x), -5, 5),
    "softplus": (lambda m, x: m.nn.functional.softplus(x), -30, 30),
    "leaky_relu": (lambda m, x: m.nn.functional.leaky_relu(x, 0.1), -2, 2),
    "elu": (lambda m, x: m.nn.functional.elu(x), -2, 2),
    "clamp": (lambda m, x: x.clamp(-0.5, 0.7), -2, 2),
    "clamp_min": (lambda m, x: m.clamp(x, min=0.1), -2, 2),
    "pow_scalar": (lambda m, x: x.pow(3), -2, 2), "pow_frac": (lambda m, x: x ** 1.5, 0.1, 2),
    "square": (lambda m, x: x * x, -2, 2), "log2": (lambda m, x: x.log2(), 0.1, 3),
    "trunc": (lambda m, x: x.trunc(), -3, 3), "mish": (lambda m, x: m.nn.functional.mish(x), -3, 3),
    "hardswish": (lambda m, x: m.nn.functional.hardswish(x), -4, 4),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(3, 5), (2, 1, 4), (0, 3), ()], ids=str)
def test_unary(device, name, shape):
    fn, lo, hi = UNARY[name]
    check(fn, [shape], device=device, low=lo, high=hi)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "gelu", "silu", "sigmoid", "sqrt"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unary_low_precision(device, name, dtype):
    fn, lo, hi = UNARY[name]
    check(fn, [(4, 6)], device=device, dtype=dtype, low=lo, high=hi)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gelu_fused_without_grad(device, approximate, dtype):
    # no gradient recorded: the backend's fused GELU runs (chunked on cpu; this size spans chunk edges)
    check(lambda m, x: m.nn.functional.gelu(x, approximate=approximate), [(3, 40000)], device=device, dtype=dtype,
          grad=False, low=-6, high=6)
    check(lambda m, x: m.nn.functional.gelu(x, approximate=approximate), [(5, 6)], device=device, dtype=dtype,
          grad=False, transpose=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_silu_fused_without_grad(device, dtype):
    check(lambda m, x: m.nn.functional.silu(x), [(3, 4000)], device=device, dtype=dtype, grad=False, low=-20, high=20)
    check(lambda m, x: m.nn.functional.silu(x), [(5, 6)], device=device, dtype=dtype, grad=False, transpose=True)


def test_unary_non_contiguous(device):
    check(lambda m, x: x.exp() * 2, [(4, 5)], device=device, transpose=True)


BINARY = {
    "add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b, "maximum": lambda m, a, b: m.maximum(a, b),
    "minimum": lambda m, a, b: m.minimum(a, b), "pow": lambda m, a, b: a.abs().pow(b),
    "where": lambda m, a, b: m.where(a > b, a, b), "lerp": lambda m, a, b: a.lerp(b, 0.3),
}
SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (5, 2)), ((0, 4), (1, 4)), ((), (2, 3))]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_broadcast(device, name, shapes):
    lo = 0.5 if name == "div" else -2
    check(BINARY[name], list(shapes), device=device, low=lo, high=2, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_binary_low_precision(device, dtype):
    check(lambda m, a, b: a * b + a / b, [(5, 3), (3,)], device=device, dtype=dtype, low=0.5, high=2)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(device, op):
    a = make((4, 5), "int64", -2, 2)
    b = make((5,), "int64", -2, 2)
    check(lambda m, x, y: getattr(x, op)(y), None, device=device, inputs=[a, b], dtypes=["int64", "int64"])
    check(lambda m, x, y: getattr(x, op)(y), None, device=device, inputs=[a.astype(np.float32), b.astype(np.float32)],
          grad=False)


def test_logical(device):
    a, b = make((3, 4), "bool"), make((4,), "bool")
    for f in (lambda m, x, y: x & y, lambda m, x, y: x | y, lambda m, x, y: x ^ y, lambda m, x, y: ~x,
              lambda m, x, y: m.logical_and(x, y), lambda m, x, y: m.logical_not(x)):
        check(f, None, device=device, inputs=[a, b], dtypes=["bool", "bool"])


def test_scalar_ops_and_promotion(device):
    fns = [lambda m, x: 2 - x, lambda m, x: 3 / (x + 5), lambda m, x: x * 2.5 + 1, lambda m, x: 2 ** x,
           lambda m, x: (x > 0.5).float() * x, lambda m, x: x.masked_fill(x > 0, -1.0)]
    for f in fns:
        check(f, [(3, 4)], device=device)
    ints = make((3, 4), "int64", -5, 5)
    for f in (lambda m, x: x * 2, lambda m, x: x + 1.5, lambda m, x: x / 2, lambda m, x: x // 3,
              lambda m, x: x % 3, lambda m, x: x.float().mean(), lambda m, x: -x, lambda m, x: x.abs(),
              lambda m, x: x.sum(), lambda m, x: x.to(m.float32) * x):
        check(f, None, device=device, inputs=[ints], dtypes=["int64"])
    # int tensor + float tensor promotes to float; float16 + float32 -> float32
    check(lambda m, a, b: a + b.to(m.float16), [(2, 3), (2, 3)], device=device)


def test_remainder_fmod(device):
    a, b = make((4, 5), low=-5, high=5), make((5,), low=0.5, high=2)
    check(lambda m, x, y: x % y, None, device=device, inputs=[a, b])
    check(lambda m, x, y: m.fmod(x, y), None, device=device, inputs=[a, b])


def test_cast(device):
    a = make((3, 4), low=-3, high=3)
    for dt in ("int64", "int32", "float16", "bfloat16", "bool", "uint8"):
        if dt == "uint8":
            a2 = np.abs(a)
        else:
            a2 = a
        check(lambda m, x: x.to(getattr(m, dt)), None, device=device, inputs=[a2], grad=False)
    # float32 -> float16 -> float32 rounds once, as torch does; the gradient takes the same casts: exact
    check(lambda m, x: x.to(m.float16).to(m.float32) * 3, [(3, 4)], device=device, atol=0, rtol=0)


def test_nan_inf(device):
    a = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], dtype=np.float32)
    for f in (lambda m, x: x.isnan(), lambda m, x: x.isinf(), lambda m, x: x.isfinite(),
              lambda m, x: m.nan_to_num(x, 0.0, 9.0, -9.0), lambda m, x: x.exp(), lambda m, x: x.sign(),
              lambda m, x: m.maximum(x, m.zeros_like(x))):
        check(f, None, device=device, inputs=[a], grad=False)
