"""The CPU backend's recurrent-cell kernels (kernel-registry entries lstm_cell and gru_cell): one time step of an
LSTM or GRU in numpy with the gate nonlinearities applied in place on one gate buffer, instead of a dozen
Tensor ops per step (the composed references are ember.nn.recurrent's lstm_cell_composed / gru_cell_composed)."""
from __future__ import annotations

import numpy as np


def _sigmoid_(a):
    """a <- 1 / (1 + exp(-a)), in place (exp overflowing to inf is 1 / inf = 0: the right limit, no warning)."""
    np.negative(a, out=a)
    with np.errstate(over="ignore"):
        np.exp(a, out=a)
    a += 1
    np.reciprocal(a, out=a)
    return a


def lstm_cell(be, xg, h, c, w_hh, b_hh):
    """xg (N, 4H) input gates, h (N, H), c (N, H), w_hh (4H, H), b_hh (4H,) or None -> (N, 2H): h' | c'."""
    g = h @ w_hh.T                                                         # (N, 4H), fresh: written in place
    g += xg
    if b_hh is not None:
        g += b_hh
    H = c.shape[-1]
    _sigmoid_(g[:, :2 * H])                                                # i, f
    np.tanh(g[:, 2 * H:3 * H], out=g[:, 2 * H:3 * H])                      # g
    _sigmoid_(g[:, 3 * H:])                                                # o
    out = np.empty((g.shape[0], 2 * H), g.dtype)
    c2 = out[:, H:]
    np.multiply(g[:, H:2 * H], c, out=c2)
    c2 += g[:, :H] * g[:, 2 * H:3 * H]
    np.tanh(c2, out=out[:, :H])
    out[:, :H] *= g[:, 3 * H:]
    return out


def gru_cell(be, xg, h, w_hh, b_hh):
    """xg (N, 3H), h (N, H), w_hh (3H, H), b_hh (3H,) or None -> h' (N, H)."""
    gh = h @ w_hh.T                                                        # (N, 3H)
    if b_hh is not None:
        gh += b_hh
    H = h.shape[-1]
    rz = _sigmoid_(xg[:, :2 * H] + gh[:, :2 * H])                          # r | z
    n = gh[:, 2 * H:] * rz[:, :H]
    n += xg[:, 2 * H:]
    np.tanh(n, out=n)
    out = h - n
    out *= rz[:, H:]
    out += n                                                               # n + z (h - n)
    return out
