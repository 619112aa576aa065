"""nn.RNN / LSTM / GRU and their cells against torch: torch's weights loaded strictly, outputs, final states
and gradients (inputs, initial states, every parameter) over several sequence lengths, both directions, two
layers, batch_first, with and without initial states, padded batches (`lengths=` against torch's
pack_padded_sequence), on every device; an LSTM language model trained 20 steps on torch's loss curve."""
import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import ember
import ember.nn as nn
import ember.nn.functional as F
from nn_parity import compare, load_torch

IN, HID, N = 3, 5, 2
KINDS = {
    "rnn_tanh": ("RNN", {}),
    "rnn_relu": ("RNN", dict(nonlinearity="relu")),
    "lstm": ("LSTM", {}),
    "lstm_proj": ("LSTM", dict(proj_size=2)),
    "gru": ("GRU", {}),
}


def _make(kind, **kw):
    cls, extra = KINDS[kind]
    torch.manual_seed(0)
    tm = getattr(torch.nn, cls)(IN, HID, **extra, **kw)
    return tm, getattr(nn, cls)(IN, HID, **extra, **kw)


def _states(rng, kind, layers, dirs, n, unbatched=False):
    out = KINDS[kind][1].get("proj_size") or HID
    shape = lambda s: (layers * dirs, s) if unbatched else (layers * dirs, n, s)  # noqa: E731
    h = rng.standard_normal(shape(out)).astype(np.float32)
    c = rng.standard_normal(shape(HID)).astype(np.float32) if kind.startswith("lstm") else None
    return h, c


def _call(kind):
    def call(m, x, h, c, *rest):
        hx = None if h is None else ((h, c) if kind.startswith("lstm") else h)
        return m(x, hx)
    return call


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("initial", [False, True])
def test_recurrent_matches_torch(device, kind, bidirectional, initial):
    dirs = 2 if bidirectional else 1
    kw = dict(num_layers=2, bidirectional=bidirectional, batch_first=initial)
    tm, em = _make(kind, **kw)
    load_torch(em, tm, device)
    for L in (1, 6):
        rng = np.random.default_rng(L)
        x = rng.standard_normal((N, L, IN) if initial else (L, N, IN)).astype(np.float32)
        h, c = _states(rng, kind, 2, dirs, N) if initial else (None, None)
        tm.zero_grad()
        em.zero_grad()
        compare(em, tm, [x, h, c], device, _call(kind))


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm_proj", "gru"])
def test_recurrent_unbatched(device, kind):
    tm, em = _make(kind, bidirectional=True)
    load_torch(em, tm, device)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, IN)).astype(np.float32)
    h, c = _states(rng, kind, 1, 2, N, unbatched=True)
    compare(em, tm, [x, h, c], device, _call(kind))


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "lstm_proj", "gru"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_padded_lengths_match_packed_torch(device, kind, batch_first):
    """lengths= against torch's pack_padded_sequence / pad_packed_sequence (unsorted lengths)."""
    tm, em = _make(kind, num_layers=2, bidirectional=True, batch_first=batch_first)
    load_torch(em, tm, device)
    rng = np.random.default_rng(5)
    L, lengths = 6, [4, 6, 1]
    x = rng.standard_normal((3, L, IN) if batch_first else (L, 3, IN)).astype(np.float32)
    h, c = _states(rng, kind, 2, 2, 3)
    lstm = kind.startswith("lstm")

    def call(m, x, h, c):
        hx = (h, c) if lstm else h
        if isinstance(m, torch.nn.Module):
            packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False)
            y, state = m(packed, hx)
            return pad_packed_sequence(y, batch_first=batch_first, total_length=L)[0], state
        return m(x, hx, lengths=lengths)
    compare(em, tm, [x, h, c], device, call)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("initial", [False, True])
def test_cells_match_torch(device, kind, batched, initial):
    torch.manual_seed(0)
    tm = getattr(torch.nn, kind)(IN, HID)
    em = load_torch(getattr(nn, kind)(IN, HID), tm, device)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, IN) if batched else (IN,)).astype(np.float32)
    sh = (N, HID) if batched else (HID,)
    h = rng.standard_normal(sh).astype(np.float32) if initial else None
    c = rng.standard_normal(sh).astype(np.float32) if initial else None

    def call(m, x, h, c):
        if kind == "LSTMCell":
            return m(x, None if h is None else (h, c))
        return m(x, h)
    compare(em, tm, [x, h, c], device, call)


def test_bad_arguments():
    with pytest.raises(nn.LayerError, match="proj_size"):
        nn.recurrent.RNNBase("GRU", 3, 4, proj_size=2)
    with pytest.raises(nn.LayerError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(nn.LayerError, match="hidden_size"):
        nn.LSTM(3, 0)
    with pytest.raises(nn.LayerError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="gelu")
    m = nn.LSTM(3, 4, num_layers=2)
    x = ember.zeros(5, 2, 3)
    with pytest.raises(nn.LayerError, match="h_0"):
        m(x, (ember.zeros(1, 2, 4), ember.zeros(2, 2, 4)))
    with pytest.raises(nn.LayerError, match="c_0"):
        m(x, (ember.zeros(2, 2, 4), ember.zeros(2, 2, 5)))
    with pytest.raises(nn.LayerError, match="input"):
        m(ember.zeros(5, 2, 4))
    with pytest.raises(nn.LayerError, match="lengths"):
        m(x, lengths=[6, 2])
    with pytest.raises(nn.LayerError, match="hx"):
        nn.GRUCell(3, 4)(ember.zeros(2, 3), ember.zeros(3, 4))


def test_lstm_language_model_trains_like_torch(device):
    """Embedding -> 2-layer LSTM -> Linear over a 12-token vocabulary: same init, data and order, 20 SGD steps
    with momentum; losses within 1e-4."""
    V, E, Hd = 12, 8, 16

    class LM:
        def __init__(self, lib):
            self.emb, self.rnn, self.head = lib.nn.Embedding(V, E), lib.nn.LSTM(E, Hd, 2, batch_first=True), \
                lib.nn.Linear(Hd, V)
            self.mods = [self.emb, self.rnn, self.head]

        def __call__(self, ids):
            return self.head(self.rnn(self.emb(ids))[0])
    torch.manual_seed(4)
    tm, em = LM(torch), LM(ember)
    for a, b in zip(em.mods, tm.mods):
        load_torch(a, b, device)
    start = np.random.default_rng(4).integers(0, V, (20, 4, 1))
    data = (start + np.arange(9)) % V                                      # learnable: the next token is +1
    params = lambda m: [p for mod in m.mods for p in mod.parameters()]  # noqa: E731
    topt = torch.optim.SGD(params(tm), lr=0.3, momentum=0.9)
    eopt = ember.optim.SGD(params(em), lr=0.3, momentum=0.9)
    tl, el = [], []
    for batch in data:
        x, y = batch[:, :-1], batch[:, 1:]
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(torch.tensor(x)).reshape(-1, V), torch.tensor(y).reshape(-1))
        loss.backward()
        topt.step()
        tl.append(loss.item())
        eopt.zero_grad()
        loss = F.cross_entropy(em(ember.tensor(x, device=device)).reshape(-1, V),
                               ember.tensor(y, device=device).reshape(-1))
        loss.backward()
        eopt.step()
        el.append(loss.item())
    np.testing.assert_allclose(el, tl, atol=1e-4)
    assert tl[-1] < tl[0]


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("padded", [False, True])
def test_recurrent_inference_matches_torch(device, kind, padded):
    """Without gradients the device's lstm_cell / gru_cell kernel runs each step (ember.kernels) where it has
    one: the same outputs and states as torch."""
    tm, em = _make(kind, num_layers=2, bidirectional=True)
    load_torch(em, tm, device)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 3, IN)).astype(np.float32)
    h, c = _states(rng, kind, 2, 2, 3)
    lengths = [6, 2, 4]

    def call(m, x, h, c):
        hx = (h, c) if kind == "lstm" else h
        if not padded:
            return m(x, hx)
        if isinstance(m, torch.nn.Module):
            y, st = m(pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False), hx)
            return pad_packed_sequence(y, total_length=6)[0], st
        return m(x, hx, lengths=lengths)
    with torch.no_grad(), ember.no_grad():
        compare(em, tm, [x, h, c], device, call, grads=False)
