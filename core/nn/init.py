"""Weight initialisation as torch.nn.init (in place: the parameter's data is replaced)."""
from __future__ import annotations

import contextlib
import math

import numpy as np

from ..tensor import default_generator, tensor


_SKIPPED = [0]  # > 0 inside skipped(): random initialisers leave parameters as allocated


@contextlib.contextmanager
def skipped():
    """Modules built inside keep their parameters as allocated instead of drawing random values: for a model whose
    every weight is loaded right after (a 135M-parameter model's draws cost seconds)."""
    _SKIPPED[0] += 1
    try:
        yield
    finally:
        _SKIPPED[0] -= 1


def _set(t, a):
    t._data = tensor(a, dtype=t.dtype, device=t.device)._data
    return t


def _fan(t):
    if t.ndim < 2:
        raise ValueError(f"ember: fan in/out needs at least 2 dims, got shape {t.shape}")
    rf = math.prod(t.shape[2:])
    return t.shape[1] * rf, t.shape[0] * rf


def _gain(nonlinearity, a=None):
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1 + (0.01 if a is None else a) ** 2))
    raise ValueError(f"ember: unknown nonlinearity {nonlinearity!r}")


calculate_gain = _gain


def uniform_(t, a=0.0, b=1.0):
    if _SKIPPED[0]:
        return t
    return _set(t, default_generator().uniform(a, b, t.shape).astype(np.float32))


def normal_(t, mean=0.0, std=1.0):
    if _SKIPPED[0]:
        return t
    return _set(t, default_generator().normal(mean, std, t.shape).astype(np.float32))


def constant_(t, v):
    return t.fill_(v)


def zeros_(t):
    return t.fill_(0)


def ones_(t):
    return t.fill_(1)


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan = _fan(t)[0 if mode == "fan_in" else 1]
    bound = _gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    fan = _fan(t)[0 if mode == "fan_in" else 1]
    return normal_(t, 0.0, _gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0)


def xavier_uniform_(t, gain=1.0):
    fi, fo = _fan(t)
    b = gain * math.sqrt(6.0 / (fi + fo))
    return uniform_(t, -b, b)


def xavier_normal_(t, gain=1.0):
    fi, fo = _fan(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fi + fo)))


def trunc_normal_(t, mean=0.0, std=1.0, a=-2.0, b=2.0):
    v = default_generator().normal(mean, std, t.shape)
    bad = (v < a) | (v > b)
    while bad.any():  # resample out-of-range values (finite: each draw lands in range with p > 0)
        v[bad] = default_generator().normal(mean, std, int(bad.sum()))
        bad = (v < a) | (v > b)
    return _set(t, v.astype(np.float32))
