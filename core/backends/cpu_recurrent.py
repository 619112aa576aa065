"""The CPU backend's recurrent-cell kernels (kernel-registry entries lstm_cell and gru_cell): one time step of an
LSTM or GRU. Where compiled kernels run here (natively, or the page's wasm module) cpu_kernels/recurrent.c takes
float32 steps: the product h W_hh^T and the gate nonlinearities in one pass over W_hh, no gate buffer; elsewhere
(no compiler, deterministic mode, other dtypes) numpy with the nonlinearities applied in place on one gate buffer.
The kernel reads W_hh input-major, from a copy in blocks of 32 units made once per weight (blocked()).
The composed references are ember.nn.recurrent's lstm_cell_composed / gru_cell_composed."""
from __future__ import annotations

import ctypes

import numpy as np

from . import cpu_matmul
from .cpu_float_kernels import ParamBlock, _addr

_F32 = np.dtype(np.float32)


class _Cells:
    """recurrent.c's entry points in one loaded library (native or the page's side module)."""

    def __init__(self, lib, native: bool):
        self._fns = {(4, False): lib.ember_lstm_cell, (3, False): lib.ember_gru_cell,
                     (4, True): lib.ember_lstm_sequence, (3, True): lib.ember_gru_sequence}
        self._plans = {}  # (operands' shapes, strides, dtypes ...) -> _plan's
        if native:
            for f in self._fns.values():
                f.argtypes, f.restype = [ctypes.c_void_p], ctypes.c_int

    def call(self, xg, h, c, w, b, gates, reverse=None):
        """run() where the kernel takes these operands (_takes), else None. A call of the shapes, strides and dtypes
        of an earlier one that needed no copy (a streaming model's every step) reuses that call's parameter block
        and the weights' addresses, checked once."""
        key = (xg.shape, xg.strides, xg.dtype, h.shape, h.strides, h.dtype, w.shape, w.strides, w.dtype, gates,
               reverse, None if c is None else (c.shape, c.strides, c.dtype),
               None if b is None else (b.shape, b.strides, b.dtype))
        plan = self._plans.get(key)
        if plan is None:
            if not _takes(xg, h, c, w, b, gates):
                return None
            args = _c_args(xg, h, c, w, b)
            if any(a is not o for a, o in zip(args, (xg, h, c, w, b))):  # (copies: no plan for these strides)
                return self.run(*args, h.shape[1], reverse)
            if len(self._plans) >= 32:
                self._plans.clear()
            plan = self._plans[key] = self._plan(xg, h, c, h.shape[1], gates, reverse)
        out_shape, block, fn = plan
        out = np.empty(out_shape, _F32)
        params, at = block.take(w, b)
        params[0], params[1], params[5] = _addr(xg), _addr(h), _addr(out)
        if c is not None:
            params[2] = _addr(c)
        if out.size and fn(at) != 0:
            raise ValueError(f"ember: recurrent.c refused {out_shape} steps, hidden {h.shape[1]}")
        return out

    def _plan(self, xg, h, c, hid, gates, reverse):
        """(out's shape, its ParamBlock, the entry point)."""
        n, seq = h.shape[0], reverse is not None
        steps = xg.shape[0] if seq else 1
        width = 2 * hid if c is not None else hid
        xg_rows = xg[0] if seq else xg
        params = np.array([0, 0, 0, 0, 0, 0, n, hid, _stride(xg_rows), _stride(h), 0 if c is None else _stride(c),
                           width, steps, xg.strides[0] // 4 if seq else 0, n * width, int(bool(reverse))], np.intp)
        fn = self._fns[gates, seq]
        return (steps, n, width) if seq else (n, width), ParamBlock(params, 3, lambda w: blocked(w, gates)), fn

    def run(self, xg, h, c, w, b, hid, reverse=None):
        """One step (reverse None: xg (N, G H) -> out (N, 2H) h' | c' for an LSTM, c given, or (N, H) h' for a
        GRU), or a sequence (xg (L, N, G H) -> out (L, N, 2H or H), every step's state, run from the last step
        with reverse=True). Float32 operands, rows of unit column stride, w and b C-contiguous."""
        n, seq = h.shape[0], reverse is not None
        steps = xg.shape[0] if seq else 1
        width = 2 * hid if c is not None else hid
        out = np.empty((steps, n, width) if seq else (n, width), _F32)
        if steps == 0:
            return out
        xg_rows = xg[0] if seq else xg
        gates = 4 if c is not None else 3
        wt = blocked(w, gates)
        params = np.array([_addr(xg), _addr(h), 0 if c is None else _addr(c), _addr(wt), 0 if b is None else _addr(b),
                           _addr(out), n, hid, _stride(xg_rows), _stride(h), 0 if c is None else _stride(c), width,
                           steps, xg.strides[0] // 4 if seq else 0, n * width, int(bool(reverse))], np.intp)
        fn = self._fns[gates, seq]
        if out.size and fn(_addr(params)) != 0:
            raise ValueError(f"ember: recurrent.c refused {steps} step(s) of {n} rows, hidden {hid}")
        return out


_WB = 32  # hidden units of a block of W_hh's copy (recurrent.c's WB)


def _padded(hid: int) -> int:
    return -(-hid // _WB) * _WB


def _blocks(w: np.ndarray, gates: int) -> np.ndarray:
    hid = w.shape[1]
    wp = np.zeros((gates, _padded(hid), hid), _F32)                        # (gates, Hp, H): zero units past H
    wp[:, :hid] = w.reshape(gates, hid, hid)
    return np.ascontiguousarray(wp.reshape(gates, -1, _WB, hid).transpose(1, 3, 0, 2))  # (Hp / 32, H, gates, 32)


def blocked(w: np.ndarray, gates: int) -> np.ndarray:
    """W_hh (gates H, H) as recurrent.c reads it: blocks of 32 hidden units, each (H, gates, 32), row k the block's
    columns k of every gate (one sequential stream a block). One copy per weight, kept while it lives
    (cpu_matmul.derived_copy: backend arrays are never written in place)."""
    return cpu_matmul.derived_copy(w, f"recurrent{gates}", lambda a: _blocks(a, gates), needed=True)


def _stride(a) -> int:
    return a.strides[0] // 4 if a.shape[0] > 1 else a.shape[1]


def _rows(a):
    """a (float32) with unit column stride and whole-float, nonnegative other strides, copied where it has not."""
    if a.strides[-1] == 4 and all(s % 4 == 0 and s >= 0 for s in a.strides):
        return a
    return np.ascontiguousarray(a)


_loaded: list = []


def cells() -> _Cells | None:
    """The compiled step kernels, or None where none run here, or in deterministic mode (where the page's
    answers come from its GEMM source alone, cpu_float_kernels)."""
    if cpu_matmul.deterministic():
        return None
    if not _loaded:
        k = cpu_matmul.wasm_kernels() if cpu_matmul.NO_BLAS else cpu_matmul.native_kernels()
        _loaded.append(None if k is None else _Cells(k.lib, native=not cpu_matmul.NO_BLAS))
    return _loaded[0]


def describe(be=None):
    return "cpu_kernels/recurrent.c (fused step) | numpy" if cells() is not None else "numpy, gates in place"


def _takes(xg, h, c, w_hh, b_hh, gates):
    """Float32 operands of one step's (or a sequence's) shapes (the kernel reads them by these sizes)."""
    n, hid = h.shape
    return all(a is None or a.dtype is _F32 for a in (xg, h, c, w_hh, b_hh)) and xg.shape[-2:] == (n, gates * hid) \
        and w_hh.shape == (gates * hid, hid) and (c is None or c.shape == (n, hid)) \
        and (b_hh is None or b_hh.shape == (gates * hid,))


def _c_args(xg, h, c, w_hh, b_hh):
    return (_rows(xg), _rows(h), None if c is None else _rows(c), w_hh,  # (w_hh: read through blocked())
            None if b_hh is None else np.ascontiguousarray(b_hh))


# ============================================================================ the kernels

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
    H = c.shape[-1]
    k = cells()
    out = k.call(xg, h, c, w_hh, b_hh, 4) if k is not None else None
    if out is not None:
        return out
    g = h @ w_hh.T                                                         # (N, 4H), fresh: written in place
    g += xg
    if b_hh is not None:
        g += b_hh
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
    H = h.shape[-1]
    k = cells()
    out = k.call(xg, h, None, w_hh, b_hh, 3) if k is not None else None
    if out is not None:
        return out
    gh = h @ w_hh.T                                                        # (N, 3H)
    if b_hh is not None:
        gh += b_hh
    rz = _sigmoid_(xg[:, :2 * H] + gh[:, :2 * H])                          # r | z
    n = gh[:, 2 * H:] * rz[:, :H]
    n += xg[:, 2 * H:]
    np.tanh(n, out=n)
    out = h - n
    out *= rz[:, H:]
    out += n                                                               # n + z (h - n)
    return out


# ============================================================================ a sequence: the time loop in C

def lstm_sequence(be, xg, h, c, w_hh, b_hh, reverse=False):
    """xg (L, N, 4H) input gates of every step, h0, c0 (N, H) -> (L, N, 2H): h_t | c_t of every step t, run from
    step L - 1 down with reverse (its final state is then step 0's)."""
    H = c.shape[-1]
    k = cells()
    done = k.call(xg, h, c, w_hh, b_hh, 4, reverse=bool(reverse)) if k is not None else None
    if done is not None:
        return done
    out = np.empty(xg.shape[:2] + (2 * H,), xg.dtype)
    for t in (range(xg.shape[0] - 1, -1, -1) if reverse else range(xg.shape[0])):
        out[t] = lstm_cell(be, xg[t], h, c, w_hh, b_hh)
        h, c = out[t, :, :H], out[t, :, H:]
    return out


def gru_sequence(be, xg, h, w_hh, b_hh, reverse=False):
    """xg (L, N, 3H), h0 (N, H) -> (L, N, H): h_t of every step t (from step L - 1 down with reverse)."""
    H = h.shape[-1]
    k = cells()
    done = k.call(xg, h, None, w_hh, b_hh, 3, reverse=bool(reverse)) if k is not None else None
    if done is not None:
        return done
    out = np.empty(xg.shape[:2] + (H,), xg.dtype)
    for t in (range(xg.shape[0] - 1, -1, -1) if reverse else range(xg.shape[0])):
        h = out[t] = gru_cell(be, xg[t], h, w_hh, b_hh)
    return out
