"""ONNX's optimizer operators (domain ai.onnx.preview.training): Adagrad, Adam, Momentum, each over one or
several (X, G, state) groups in one node, on ember Tensors. R (learning rate) and T (step) are scalars."""
from __future__ import annotations

from .. import ops_elementwise as E
from .registry import op
from .values import host

DOMAIN = "ai.onnx.preview.training"


def _groups(ins, n_state):
    """Inputs R, T, X1..Xn, G1..Gn, S1_1..S1_n, ... -> (r, t, [(x, g, s...)...])."""
    r, t, rest = ins[0], float(host(ins[1]).reshape(-1)[0]), ins[2:]
    n = len(rest) // (2 + n_state)
    return r, t, [tuple(rest[k * n + i] for k in range(2 + n_state)) for i in range(n)]


def _flat(outs):
    """Per-group output tuples -> ONNX's order: every X first, then every first state, ..."""
    return [o[k] for k in range(len(outs[0])) for o in outs]


@op("Adagrad", since=1, domain=DOMAIN)
def _adagrad(ctx, ins, at):
    r, t, groups = _groups(ins, 1)
    decay, eps, norm = at.f("decay_factor", 0.0), at.f("epsilon", 0.0), at.f("norm_coefficient", 0.0)
    rate = r / (1 + t * decay)
    outs = []
    for x, g, h in groups:
        gr = x * norm + g
        h_new = h + gr * gr
        outs.append((x - rate * gr / (E.sqrt(h_new) + eps), h_new))
    return _flat(outs)


@op("Adam", since=1, domain=DOMAIN)
def _adam(ctx, ins, at):
    r, t, groups = _groups(ins, 2)
    alpha, beta, eps = at.f("alpha", 0.9), at.f("beta", 0.999), at.f("epsilon", 0.0)
    norm, post = at.f("norm_coefficient", 0.0), at.f("norm_coefficient_post", 0.0)
    rate = r * ((1 - beta ** t) ** 0.5 / (1 - alpha ** t)) if t > 0 else r
    outs = []
    for x, g, v, h in groups:
        gr = x * norm + g
        v_new = v * alpha + gr * (1 - alpha)
        h_new = h * beta + gr * gr * (1 - beta)
        x_new = x - rate * (v_new / (E.sqrt(h_new) + eps))
        outs.append((x_new * (1 - post), v_new, h_new))
    return _flat(outs)


@op("Momentum", since=1, domain=DOMAIN)
def _momentum(ctx, ins, at):
    r, t, groups = _groups(ins, 1)
    alpha, beta, norm = at.f("alpha"), at.f("beta"), at.f("norm_coefficient")
    nesterov = at.s("mode", "standard") == "nesterov"
    b = beta if t > 0 else 1.0
    outs = []
    for x, g, v in groups:
        gr = x * norm + g
        v_new = v * alpha + gr * b
        outs.append((x - r * (gr + v_new * alpha) if nesterov else x - r * v_new, v_new))
    return _flat(outs)
