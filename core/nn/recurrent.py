"""torch.nn's recurrent layers: RNN, LSTM (with proj_size), GRU and their cells, with torch's parameter names
(weight_ih_l0, weight_hh_l0_reverse, ...), gate order (LSTM i f g o, GRU r z n) and shapes, so torch checkpoints
load strictly. Sequences of different lengths in one padded batch take `lengths=` (what pack_padded_sequence
gives torch): outputs past a sequence's end are zero, and its final state is the one at its last step (the
reverse direction starts there)."""
from __future__ import annotations

import math

from .. import autograd as A
from . import functional as F
from . import init
from .errors import LayerError
from .module import Module, Parameter
from ..ops_movement import cat, stack
from ..tensor import empty, tensor, zeros

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ------------------------------------------------------------------ one time step (shared by layers and cells)

def rnn_step(xg, h, w_hh, b_hh, relu=False):
    """xg = x W_ih^T + b_ih (N, H); h (N, H) -> h'."""
    a = xg + F.linear(h, w_hh, b_hh)
    return F.relu(a) if relu else F.tanh(a)


def lstm_step(xg, h, c, w_hh, b_hh, w_hr=None, _composed=False):
    """xg (N, 4H) input gates, h (N, P or H), c (N, H) -> (h', c'); gates i, f, g, o as torch. Without a
    projection the device's lstm_cell kernel (ember.kernels) runs it when no gradient is recorded."""
    if w_hr is None and not _composed and _fits(xg, h, c, w_hh, b_hh):
        k = A.fused_kernel("lstm_cell", xg, h, c, w_hh, b_hh)
        if k is not None:
            out = xg._new(k(xg._data, h._data, c._data, w_hh._data, None if b_hh is None else b_hh._data))
            H = c.shape[-1]
            return out.narrow(-1, 0, H), out.narrow(-1, H, H)
    i, f, g, o = (xg + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    h = F.sigmoid(o) * F.tanh(c)
    return (h if w_hr is None else F.linear(h, w_hr)), c


def lstm_cell_composed(xg, h, c, w_hh, b_hh):
    """The lstm_cell kernel's reference: h' | c' along the last dim."""
    h, c = lstm_step(xg, h, c, w_hh, b_hh, _composed=True)
    return cat([h, c], -1)


def _fits(*ts):
    """All 2-D (biases 1-D), one dtype and device, contiguous-friendly: what the cell kernels take."""
    first = ts[0]
    if first.ndim != 2:
        return False
    dtype, dev = first.dtype, first.device
    for t in ts:
        if t is not None and (t.dtype is not dtype or t.device is not dev or t.ndim not in (1, 2)):
            return False
    return True


def gru_step(xg, h, w_hh, b_hh, _composed=False):
    """xg (N, 3H), h (N, H) -> h'; gates r, z, n as torch (r scales the hidden part of n, bias included); the
    device's gru_cell kernel (ember.kernels) runs it when no gradient is recorded."""
    if not _composed and _fits(xg, h, w_hh, b_hh):
        k = A.fused_kernel("gru_cell", xg, h, w_hh, b_hh)
        if k is not None:
            return xg._new(k(xg._data, h._data, w_hh._data, None if b_hh is None else b_hh._data))
    xr, xz, xn = xg.chunk(3, -1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r, z = F.sigmoid(xr + hr), F.sigmoid(xz + hz)
    n = F.tanh(xn + r * hn)
    return n + z * (h - n)


def gru_cell_composed(xg, h, w_hh, b_hh):
    """The gru_cell kernel's reference."""
    return gru_step(xg, h, w_hh, b_hh, _composed=True)


def lstm_sequence_composed(xg, h, c, w_hh, b_hh, reverse=False):
    """The lstm_sequence kernel's reference: xg (L, N, 4H) -> h_t | c_t of every step (L, N, 2H)."""
    L = xg.shape[0]
    out = [None] * L
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        h, c = lstm_step(xg[t], h, c, w_hh, b_hh, _composed=True)
        out[t] = cat([h, c], -1)
    return stack(out, 0)


def gru_sequence_composed(xg, h, w_hh, b_hh, reverse=False):
    """The gru_sequence kernel's reference: xg (L, N, 3H) -> h_t of every step (L, N, H)."""
    L = xg.shape[0]
    out = [None] * L
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        h = out[t] = gru_step(xg[t], h, w_hh, b_hh, _composed=True)
    return stack(out, 0)


def sequence_states(lstm, xg, h, c, w_hh, b_hh, reverse=False):
    """One direction's steps in one call of the device's lstm_sequence / gru_sequence kernel (no gradient
    recorded): every step's state, (L, N, 2H) h_t | c_t of an LSTM or (L, N, H) h_t of a GRU, or None where it has
    none (the caller steps)."""
    if xg.ndim != 3 or xg.shape[0] == 0 or not _fits(h, c, w_hh, b_hh) or xg.dtype is not h.dtype \
            or xg.device is not h.device:
        return None
    if lstm:
        k = A.fused_kernel("lstm_sequence", xg, h, c, w_hh, b_hh)
        return None if k is None else A.prim_fused(k, xg, h._data, c._data, w_hh._data,
                                                   None if b_hh is None else b_hh._data, reverse)
    k = A.fused_kernel("gru_sequence", xg, h, w_hh, b_hh)
    return None if k is None else A.prim_fused(k, xg, h._data, w_hh._data, None if b_hh is None else b_hh._data,
                                               reverse)


def _sequence(lstm, xg, h, c, w_hh, b_hh, reverse):
    """sequence_states as (outputs (L, N, H), h_n, c_n), or None."""
    out = sequence_states(lstm, xg, h, c, w_hh, b_hh, reverse)
    if out is None:
        return None
    H = w_hh.shape[1]
    last = 0 if reverse else xg.shape[0] - 1
    ys = out.narrow(-1, 0, H) if lstm else out
    return ys, ys[last], out[last].narrow(-1, H, H) if lstm else None


def lstm_sequence(xg, h, c, w_hh, b_hh, reverse=False):
    """xg (L, N, 4H) input gates of every step, h, c (N, H) -> (outputs (L, N, H), h_n, c_n) of one LSTM
    direction: the device's lstm_sequence kernel where it has one and no gradient is recorded, else a step at a
    time (lstm_step)."""
    done = _sequence(True, xg, h, c, w_hh, b_hh, reverse)
    if done is not None:
        return done
    L = xg.shape[0]
    ys = [None] * L
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        h, c = lstm_step(xg[t], h, c, w_hh, b_hh)
        ys[t] = h
    return stack(ys, 0), h, c


# ------------------------------------------------------------------ multi-layer, bidirectional layers

def _steps(t):
    """t (L, ...) as L slices, taken from chunks of about sqrt(L) steps: a slice's gradient is padded to the
    size of what it was cut from, so cutting L steps from the whole sequence costs L^2 in the backward pass,
    from chunks about L^1.5."""
    L = t.shape[0]
    c = max(1, math.isqrt(L))
    out = []
    for s in range(0, L, c):
        out += t.narrow(0, s, min(c, L - s)).unbind(0)
    return out


class RNNBase(Module):
    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        self.mode = mode                                                   # RNN_TANH, RNN_RELU, LSTM or GRU
        name = type(self).__name__
        for arg, v, lo in (("input_size", input_size, 1), ("hidden_size", hidden_size, 1),
                           ("num_layers", num_layers, 1), ("proj_size", proj_size, 0)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise LayerError(name, arg, f"must be an integer >= {lo}, got {v!r}")
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise LayerError(name, "dropout", f"must be a number in [0, 1], got {dropout!r}")
        if proj_size and self.mode != "LSTM":
            raise LayerError(name, "proj_size", "is only supported by LSTM")
        if proj_size >= hidden_size:
            raise LayerError(name, "proj_size", f"{proj_size} must be smaller than hidden_size {hidden_size}")
        self.input_size, self.hidden_size, self.num_layers, self.bias = input_size, hidden_size, num_layers, bias
        self.batch_first, self.dropout, self.bidirectional, self.proj_size = batch_first, float(dropout), bidirectional, proj_size
        dirs = 2 if bidirectional else 1
        gate, out = _GATES[self.mode] * hidden_size, proj_size or hidden_size
        kw = dict(device=device, dtype=dtype)
        self._names = []                                                   # per (layer, direction): 4 or 5 names
        for layer in range(num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                n_in = input_size if layer == 0 else out * dirs
                shapes = [("weight_ih" + sfx, (gate, n_in)), ("weight_hh" + sfx, (gate, out))]
                if bias:
                    shapes += [("bias_ih" + sfx, (gate,)), ("bias_hh" + sfx, (gate,))]
                if proj_size:
                    shapes += [("weight_hr" + sfx, (proj_size, hidden_size))]
                for n, s in shapes:
                    setattr(self, n, Parameter(empty(*s, **kw)))
                self._names.append(sfx)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _weights(self, sfx):
        g = lambda n: getattr(self, n + sfx, None)  # noqa: E731
        return g("weight_ih"), g("weight_hh"), g("bias_ih"), g("bias_hh"), g("weight_hr")

    def _check_state(self, what, h, shape):
        if h is not None and tuple(h.shape) != shape:
            raise LayerError(type(self).__name__, what, f"has shape {tuple(h.shape)}, expected {shape}")

    def forward(self, input, hx=None, lengths=None):
        """input (L, N, input_size) ((N, L, input_size) with batch_first, or unbatched (L, input_size)); hx the
        initial state (num_layers * directions, N, hidden) -- for LSTM a pair (h0, c0), h0's last size proj_size
        when set; lengths (N,) the valid steps per sequence. Returns (output, h_n) or, for LSTM, (output, (h_n, c_n))."""
        name = type(self).__name__
        if input.ndim not in (2, 3):
            raise LayerError(name, "input", f"must be 2-D (unbatched) or 3-D, got shape {tuple(input.shape)}")
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)                                          # (L, N, input_size)
        L, N, n_in = x.shape
        if n_in != self.input_size:
            raise LayerError(name, "input", f"last size {n_in} != input_size {self.input_size}")
        dirs = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        lstm = self.mode == "LSTM"
        h0 = c0 = None
        if hx is not None:
            if lstm:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise LayerError(name, "hx", "must be a pair (h_0, c_0)")
                h0, c0 = hx
            else:
                h0 = hx
            if not batched:
                h0 = h0.unsqueeze(1)
                c0 = None if c0 is None else c0.unsqueeze(1)
            self._check_state("hx" if not lstm else "h_0", h0, (self.num_layers * dirs, N, out_size))
            if lstm:
                self._check_state("c_0", c0, (self.num_layers * dirs, N, self.hidden_size))
        mask = None
        if lengths is not None:
            lens = lengths if hasattr(lengths, "numpy") else tensor(list(lengths))
            lens = lens.to(x.device).reshape(-1)
            if tuple(lens.shape) != (N,):
                raise LayerError(name, "lengths", f"must hold one length per sequence ({N}), got {tuple(lens.shape)}")
            lo, hi = int(lens.min().item()), int(lens.max().item())
            if lo < 1 or hi > L:
                raise LayerError(name, "lengths", f"must lie in [1, {L}] (the padded length), got {lo}..{hi}")
            from ..tensor import arange
            mask = (arange(L, device=x.device).reshape(L, 1) < lens.reshape(1, N)).to(x.dtype).unsqueeze(-1)  # (L, N, 1)
        zero = lambda n: zeros(N, n, dtype=x.dtype, device=x.device)  # noqa: E731
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                h = h0[k] if h0 is not None else zero(out_size)
                c = (c0[k] if c0 is not None else zero(self.hidden_size)) if lstm else None
                y, h, c = self._direction(x, h, c, self._weights(self._names[k]), d == 1, mask)
                outs.append(y)
                hs.append(h)
                cs.append(c)
            x = outs[0] if dirs == 1 else cat(outs, -1)                    # (L, N, dirs * out_size)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        h_n = stack(hs, 0)                                                 # (num_layers * dirs, N, out_size)
        c_n = stack(cs, 0) if lstm else None
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        if not batched:
            x, h_n = x.squeeze(1), h_n.squeeze(1)
            c_n = None if c_n is None else c_n.squeeze(1)
        return (x, (h_n, c_n)) if lstm else (x, h_n)

    def _direction(self, x, h, c, weights, reverse, mask):
        """One direction of one layer over the whole sequence: (outputs (L, N, out), h_n, c_n)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        proj = F.linear(x, w_ih, b_ih)                                     # (L, N, gates): one matmul for all steps
        if mask is None and w_hr is None and self.mode in ("LSTM", "GRU"):
            done = _sequence(self.mode == "LSTM", proj, h, c, w_hh, b_hh, reverse)
            if done is not None:
                return done
        xg = _steps(proj)                                                  # L x (N, gates)
        ms = None if mask is None else mask.unbind(0)
        ys = [None] * len(xg)
        for t in (range(len(xg) - 1, -1, -1) if reverse else range(len(xg))):
            if self.mode == "LSTM":
                h2, c2 = lstm_step(xg[t], h, c, w_hh, b_hh, w_hr)
            elif self.mode == "GRU":
                h2, c2 = gru_step(xg[t], h, w_hh, b_hh), None
            else:
                h2, c2 = rnn_step(xg[t], h, w_hh, b_hh, self.mode == "RNN_RELU"), None
            if ms is not None:  # past a sequence's end: output zero, state held
                m = ms[t]                                                  # (N, 1)
                ys[t] = h2 * m
                h = h + (h2 - h) * m
                c = None if c2 is None else c + (c2 - c) * m
            else:
                ys[t], h, c = h2, h2, c2
        return stack(ys, 0), h, c

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.batch_first:
            s += ", batch_first=True"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        return s


class RNN(RNNBase):
    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise LayerError("RNN", "nonlinearity", f"must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)


class GRU(RNNBase):
    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


# ------------------------------------------------------------------ cells

class RNNCellBase(Module):
    gates = 1

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        for arg, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LayerError(type(self).__name__, arg, f"must be an integer >= 1, got {v!r}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        kw = dict(device=device, dtype=dtype)
        self.weight_ih = Parameter(empty(self.gates * hidden_size, input_size, **kw))
        self.weight_hh = Parameter(empty(self.gates * hidden_size, hidden_size, **kw))
        self.bias_ih = Parameter(empty(self.gates * hidden_size, **kw)) if bias else None
        self.bias_hh = Parameter(empty(self.gates * hidden_size, **kw)) if bias else None
        bound = 1.0 / math.sqrt(hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _prepare(self, input, states):
        """(input as (N, input_size), states as (N, hidden) each, zeros where None, batched flag)."""
        name = type(self).__name__
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise LayerError(name, "input", f"must be (N, {self.input_size}) or ({self.input_size},), "
                             f"got {tuple(input.shape)}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        out = []
        for what, s in states:
            if s is None:
                s = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            elif not batched:
                s = s.unsqueeze(0)
            if tuple(s.shape) != (x.shape[0], self.hidden_size):
                raise LayerError(name, what, f"has shape {tuple(s.shape)}, expected {(x.shape[0], self.hidden_size)}")
            out.append(s)
        return x, out, batched


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise LayerError("RNNCell", "nonlinearity", f"must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, [("hx", hx)])
        h = rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                     self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    gates = 4

    def forward(self, input, hx=None):
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise LayerError("LSTMCell", "hx", "must be a pair (h_0, c_0)")
        h0, c0 = hx if hx is not None else (None, None)
        x, (h, c), batched = self._prepare(input, [("h_0", h0), ("c_0", c0)])
        h, c = lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    gates = 3

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, [("hx", hx)])
        h = gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
