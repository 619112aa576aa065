"""ONNX recurrent operators on ember Tensors: RNN, GRU, LSTM (every direction, layout, activation,
clip, sequence_lens, peepholes, linear_before_reset, input_forget).

The input projection of every time step is one matmul up front; the loop over time does the
recurrent matmul and the gates. sequence_lens (read on the host: it sets the loop's shape) freezes a
batch row's state after its last step and zeroes its later outputs; the reverse direction walks each
row's own valid prefix backwards.
"""
from __future__ import annotations

import numpy as np

from .. import ops_elementwise as E
from .. import ops_indexing as I
from .. import ops_movement as M
from ..linalg import matmul
from ..nn.recurrent import lstm_sequence, sequence_states
from .registry import op
from .values import host


def _activation(name, alpha, beta):
    n = name.lower()
    table = {
        "relu": E.relu, "tanh": E.tanh, "sigmoid": E.sigmoid,
        "affine": lambda x: x * alpha + beta,
        "leakyrelu": lambda x: E.where(x >= 0, x, x * alpha),
        "thresholdedrelu": lambda x: E.where(x > alpha, x, x * 0.0),
        "scaledtanh": lambda x: E.tanh(x * beta) * alpha,
        "hardsigmoid": lambda x: E.clamp(x * alpha + beta, 0.0, 1.0),
        "elu": lambda x: E.where(x >= 0, x, (E.exp(x) - 1.0) * alpha),
        "softsign": lambda x: x / (E.abs(x) + 1.0),
        "softplus": lambda x: E.log1p(E.exp(x)),
    }
    if n not in table:
        raise ValueError(f"ember: unsupported recurrent activation {name!r}")
    return table[n]


_ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0, "hardsigmoid": 0.2, "elu": 1.0}
_BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}


def _activations(at, defaults, n_dirs):
    names = at.strings("activations", defaults * n_dirs)
    alphas, betas = at.floats("activation_alpha", []), at.floats("activation_beta", [])
    fns, ai, bi = [], 0, 0
    for name in names:
        n = name.lower()
        a = b = None
        if n in _ALPHA:
            a = alphas[ai] if ai < len(alphas) else _ALPHA[n]
            ai += 1 if ai < len(alphas) else 0
        if n in _BETA:
            b = betas[bi] if bi < len(betas) else _BETA[n]
            bi += 1 if bi < len(betas) else 0
        fns.append(_activation(name, a, b))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(n_dirs)]


def _settings(at, kind, r_hidden):
    """(hidden, direction, n_dirs, activations, clip, plain) of a recurrent node, read once per node: plain is an
    LSTM of the default activations without clip or input_forget (the lstm_cell kernel's)."""
    got = at.memo.get(("rnn", r_hidden))
    if got is None:
        hidden = at.i("hidden_size", r_hidden)
        direction = at.s("direction", "forward")
        n_dirs = 2 if direction == "bidirectional" else 1
        defaults = {"rnn": ["Tanh"], "gru": ["Sigmoid", "Tanh"], "lstm": ["Sigmoid", "Tanh", "Tanh"]}[kind]
        clip = at.f("clip")
        names = [a.lower() for a in at.strings("activations", defaults * n_dirs)]
        plain = kind == "lstm" and clip is None and not at.i("input_forget", 0) and \
            names == ["sigmoid", "tanh", "tanh"] * n_dirs
        if len(at.memo) >= 16:  # (R fed at ever new sizes: recomputed, never grown)
            at.memo.clear()
        got = at.memo[("rnn", r_hidden)] = (hidden, direction, n_dirs, _activations(at, defaults, n_dirs), clip, plain)
    return got


def _reverse_index(lens, seq, batch):
    """idx[t, b]: the step a reverse pass reads at time t (each row reversed within its length)."""
    t = np.arange(seq)[:, None]
    return np.where(t < lens[None, :], lens[None, :] - 1 - t, t)


def _recurrent(ctx, ins, at, kind):
    x, w, r = ins[:3]
    b = ins[3] if len(ins) > 3 else None
    seq_lens = ins[4] if len(ins) > 4 else None
    h0 = ins[5] if len(ins) > 5 else None
    c0 = ins[6] if len(ins) > 6 and kind == "lstm" else None
    peep = ins[7] if len(ins) > 7 and kind == "lstm" else None
    layout = at.i("layout", 0)
    if layout:  # (batch, seq, input) -> (seq, batch, input)
        x = M.permute(x, 1, 0, 2)
        h0 = M.permute(h0, 1, 0, 2) if h0 is not None else None
        c0 = M.permute(c0, 1, 0, 2) if c0 is not None else None
    seq, batch = x.shape[0], x.shape[1]
    gates = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    hidden, direction, n_dirs, acts, clip, plain = _settings(at, kind, r.shape[-1])
    lens = host(seq_lens).astype(np.int64).reshape(-1) if seq_lens is not None else None
    if lens is not None and (lens >= seq).all():
        lens = None  # every row runs the whole sequence: no masking needed
    zeros = x.new_zeros((batch, hidden)) if h0 is None or c0 is None or lens is not None else None
    plain_lstm = plain and lens is None and peep is None

    if plain_lstm and n_dirs == 1 and not layout and h0 is not None and c0 is not None:
        # a streaming model's one-step call (Silero VAD): the states straight from the kernel's (L, N, 2H) output;
        # what this takes is kept for the next run handed the same W, R and B (_lstm)
        w_in, w_hh, bias = _lstm_weights(at, 0, w, r, b, hidden)
        one = (w, r, b, w_in, w_hh, bias, hidden, direction == "reverse")
        got = _one_direction(one, x, h0, c0)
        if got is not None:
            at.memo["one"] = one
            return got
    ys, hs, cs = [], [], []
    for d in range(n_dirs):
        reverse = direction == "reverse" or d == 1
        if plain_lstm:  # in torch's gate order: the device's lstm_sequence / lstm_cell kernel
            y, h, c = _lstm_cells(at, d, x, w, r, b, h0[d] if h0 is not None else zeros,
                                  c0[d] if c0 is not None else zeros, hidden, reverse)
            ys.append(y)
            hs.append(h)
            cs.append(c)
            continue
        wd, rd = w[d], r[d]
        xs = x
        if reverse:
            if lens is None:
                xs = M.flip(x, 0)
            else:
                idx = ctx.const(_reverse_index(lens, seq, batch).reshape(seq, batch, 1))
                xs = I.gather(x, 0, M.expand(idx, seq, batch, x.shape[2]))
        proj = matmul(xs, M.transpose(wd, 0, 1))  # (seq, batch, gates*hidden)
        rb = None
        if b is not None:
            wb, rb = M.narrow(b[d], 0, 0, gates * hidden), M.narrow(b[d], 0, gates * hidden, gates * hidden)
            proj = proj + wb if kind == "gru" else proj + wb + rb
        h = h0[d] if h0 is not None else zeros
        c = c0[d] if c0 is not None else zeros
        f, g = acts[d][0], acts[d][1] if len(acts[d]) > 1 else None
        rt = M.transpose(rd, 0, 1)
        out = []
        for t in range(seq):
            xt = proj[t]
            if kind == "rnn":
                pre = xt + matmul(h, rt)
                h_new = f(E.clamp(pre, -clip, clip) if clip is not None else pre)
            elif kind == "gru":
                h_new = _gru_step(xt, h, rd, rb, hidden, f, g, clip, at.i("linear_before_reset", 0))
            else:
                h_new, c_new = _lstm_step(xt, h, c, rt, peep[d] if peep is not None else None, hidden,
                                          f, g, acts[d][2], clip, at.i("input_forget", 0))
            if lens is not None:
                live = ctx.const((t < lens).reshape(batch, 1))
                h_new = E.where(live, h_new, h)
                if kind == "lstm":
                    c_new = E.where(live, c_new, c)
                out.append(E.where(live, h_new, zeros))
            else:
                out.append(h_new)
            h = h_new
            if kind == "lstm":
                c = c_new
        y = M.stack(out, 0)  # (seq, batch, hidden)
        if reverse:
            if lens is None:
                y = M.flip(y, 0)
            else:
                idx = ctx.const(_reverse_index(lens, seq, batch).reshape(seq, batch, 1))
                y = I.gather(y, 0, M.expand(idx, seq, batch, hidden))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    if n_dirs == 1:  # views, not copies (a streaming model's one-step call pays for every op)
        y, y_h, y_c = M.unsqueeze(ys[0], 1), M.unsqueeze(hs[0], 0), M.unsqueeze(cs[0], 0)
    else:
        y = M.stack(ys, 1)                    # (seq, dirs, batch, hidden)
        y_h, y_c = M.stack(hs, 0), M.stack(cs, 0)  # (dirs, batch, hidden)
    if layout:
        y = M.permute(y, 2, 0, 1, 3)
        y_h, y_c = M.permute(y_h, 1, 0, 2), M.permute(y_c, 1, 0, 2)
    return [y, y_h, y_c] if kind == "lstm" else [y, y_h]


# ONNX's LSTM gates are i o f c, torch's (the lstm_cell kernel's) i f g o: torch's k-th gate is ONNX's _TORCH_GATES[k]
_TORCH_GATES = (0, 2, 3, 1)


def _torch_gates(t, hidden):
    return M.cat([M.narrow(t, 0, k * hidden, hidden) for k in _TORCH_GATES], 0)


def _lstm_weights(at, d, w, r, b, hidden):
    """(W (input, 4H), R (4H, H), bias (4H,) or None) of direction d in torch's gate order, kept per node while it is
    handed the same W, R and B tensors (constants: every run)."""
    key = ("lstm", d)
    memo = at.memo.get(key)
    if memo is None or memo[0] is not w or memo[1] is not r or memo[2] is not b:
        bias = None
        if b is not None:  # (8H,): Wb | Rb, both added to the input projection
            bias = _torch_gates(M.narrow(b[d], 0, 0, 4 * hidden) + M.narrow(b[d], 0, 4 * hidden, 4 * hidden), hidden)
        # (input, 4H) laid out as such: a transposed view would take the backend's strided row-vector path,
        # ~10x a plain product for Silero VAD's one-step call
        memo = at.memo[key] = (w, r, b, M.transpose(_torch_gates(w[d], hidden), 0, 1).contiguous(),
                               _torch_gates(r[d], hidden), bias)                        # (4H, H), (4H,)
    return memo[3:]


def _lstm(ctx, ins, at):
    """LSTM: a node that ran as one plain direction with these W, R and B (_recurrent's first path) goes straight
    there while its sequence_lens and peepholes stay omitted."""
    one = at.memo.get("one")
    if one is not None and 7 <= len(ins) <= 8 and ins[1] is one[0] and ins[2] is one[1] and ins[3] is one[2] and \
            ins[4] is None and ins[5] is not None and ins[6] is not None and (len(ins) == 7 or ins[7] is None):
        got = _one_direction(one, ins[0], ins[5], ins[6])
        if got is not None:
            return got
    return _recurrent(ctx, ins, at, "lstm")


def _one_direction(one, x, h0, c0):
    """[Y, Y_h, Y_c] of a plain one-direction LSTM from the device's lstm_sequence kernel's (seq, batch, 2H)
    h_t | c_t, or None where it has none. one: (W, R, B, W in torch's gate order (input, 4H), R so (4H, H), bias
    (4H,) or None, hidden, reverse)."""
    w_in, w_hh, bias, hidden, reverse = one[3:]
    out = sequence_states(True, matmul(x, w_in), h0[0], c0[0], w_hh, bias, reverse)
    if out is None:
        return None
    last = out if x.shape[0] == 1 else M.narrow(out, 0, 0 if reverse else x.shape[0] - 1, 1)  # (1, N, 2H)
    return [M.unsqueeze(M.narrow(out, 2, 0, hidden), 1), M.narrow(last, 2, 0, hidden),
            M.narrow(last, 2, hidden, hidden)]


def _lstm_cells(at, d, x, w, r, b, h, c, hidden, reverse):
    """Direction d of a plain LSTM (default activations; no clip, peepholes, input_forget or sequence_lens)
    through nn.recurrent's lstm_sequence (the device's lstm_sequence or lstm_cell kernel where it has one). x
    (seq, batch, input), read from its last step with reverse. Returns (y (seq, batch, H), h, c)."""
    w_in, w_hh, bias = _lstm_weights(at, d, w, r, b, hidden)
    # (seq, batch, 4H); the bias added in the kernel's gate sums (xg + (h W_hh^T + b)): one op less a step, which
    # is most of a streaming model's one-step call
    return lstm_sequence(matmul(x, w_in), h, c, w_hh, bias, reverse=reverse)


def _clip(v, clip):
    return E.clamp(v, -clip, clip) if clip is not None else v


def _gru_step(xt, h, rd, rb, hidden, f, g, clip, linear_before_reset):
    r_zr = M.narrow(rd, 0, 0, 2 * hidden)
    r_h = M.narrow(rd, 0, 2 * hidden, hidden)
    x_zr, x_h = M.narrow(xt, 1, 0, 2 * hidden), M.narrow(xt, 1, 2 * hidden, hidden)
    zr = x_zr + matmul(h, M.transpose(r_zr, 0, 1))
    if rb is not None:
        zr = zr + M.narrow(rb, 0, 0, 2 * hidden)
    rbh = M.narrow(rb, 0, 2 * hidden, hidden) if rb is not None else None
    zr = f(_clip(zr, clip))
    z, rg = M.narrow(zr, 1, 0, hidden), M.narrow(zr, 1, hidden, hidden)
    if linear_before_reset:
        hr = matmul(h, M.transpose(r_h, 0, 1))
        if rbh is not None:
            hr = hr + rbh
        pre = x_h + rg * hr
    else:
        pre = x_h + matmul(rg * h, M.transpose(r_h, 0, 1))
        if rbh is not None:
            pre = pre + rbh
    hh = g(_clip(pre, clip))
    return (1.0 - z) * hh + z * h


def _lstm_step(xt, h, c, rt, peep, hidden, f, g, hact, clip, input_forget):
    pre = xt + matmul(h, rt)
    i, o, fg, cc = (M.narrow(pre, 1, k * hidden, hidden) for k in range(4))
    if peep is not None:
        pi, po, pf = (M.narrow(peep, 0, k * hidden, hidden) for k in range(3))
        i, fg = i + pi * c, fg + pf * c
    i = f(_clip(i, clip))
    fg = 1.0 - i if input_forget else f(_clip(fg, clip))
    c_new = fg * c + i * g(_clip(cc, clip))
    if peep is not None:
        o = o + po * c_new
    o = f(_clip(o, clip))
    return o * hact(c_new), c_new


op("RNN", since=7)(lambda ctx, ins, at: _recurrent(ctx, ins, at, "rnn"))
op("GRU", since=7)(lambda ctx, ins, at: _recurrent(ctx, ins, at, "gru"))
op("LSTM", since=7)(_lstm)
