"""The lstm_cell / gru_cell kernels (ember.kernels: cpu_kernels/recurrent.c with numpy where no compiled kernels
run, webgpu/recurrent.wgsl) against their composed references and torch's cell arithmetic, over batch sizes and
hidden sizes that exercise recurrent.c's tiles (hidden sizes off the 32-unit blocks, batch rows past a 16-row
block, a step large enough to split between threads), with and without b_hh, with h a strided view (as the LSTM
layer's previous output); the lstm_sequence / gru_sequence kernels (the time loop in recurrent.c) against theirs
in both directions; and LSTM / GRU layers without gradients (a sequence kernel, or a cell kernel each step)
against torch."""
import numpy as np
import pytest
import torch

import ember
import ember.nn as nn
from ember import kernels as K
from ember.backends import cpu_matmul, cpu_recurrent
from ember.nn.recurrent import gru_cell_composed, gru_sequence_composed, lstm_cell_composed, lstm_sequence_composed

SHAPES = [(1, 1), (3, 5), (5, 37), (33, 24), (16, 256)]  # (batch rows, hidden)


def _operands(kind, n, hid, bias, seed):
    rng = np.random.default_rng(seed)
    gates = 4 if kind == "lstm" else 3
    f = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    h_wide = f(n, 2 * hid)  # h is the left half: a row stride of 2H, as narrow(out, -1, 0, H) gives
    return dict(xg=f(n, gates * hid), h=h_wide[:, :hid], c=f(n, hid) if kind == "lstm" else None,
                w=f(gates * hid, hid, scale=hid ** -0.5), b=f(gates * hid) if bias else None)


def _torch_step(kind, o):
    """torch's cell arithmetic in float64 on the same gate pre-activations."""
    t = lambda a: None if a is None else torch.tensor(a, dtype=torch.float64)  # noqa: E731
    xg, h, c, w, b = t(o["xg"]), t(o["h"]), t(o["c"]), t(o["w"]), t(o["b"])
    hw = h @ w.T + (b if b is not None else 0)
    if kind == "lstm":
        i, f, g, out = (xg + hw).chunk(4, -1)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.cat([torch.sigmoid(out) * torch.tanh(c2), c2], -1).numpy()
    xr, xz, xn = xg.chunk(3, -1)
    hr, hz, hn = hw.chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (n + z * (h - n)).numpy()


def _kernel_step(kind, o, device):
    """The device's kernel (through the registry, as the tensor layer calls it) and the composed reference."""
    dev = ember.device(device)
    k = K.bound(kind + "_cell", dev.backend)
    assert k is not None, f"no {kind}_cell kernel on {device}"
    T = lambda a: None if a is None else ember.tensor(a, device=device)  # noqa: E731
    xg, h, c, w, b = T(o["xg"]), T(o["h"]), T(o["c"]), T(o["w"]), T(o["b"])
    h = ember.tensor(np.ascontiguousarray(o["h"]), device=device) if device != "cpu" else \
        xg._new(o["h"])  # (cpu: the strided view itself reaches the kernel)
    if kind == "lstm":
        got = xg._new(k(xg._data, h._data, c._data, w._data, None if b is None else b._data))
        ref = lstm_cell_composed(xg, h, c, w, b)
    else:
        got = xg._new(k(xg._data, h._data, w._data, None if b is None else b._data))
        ref = gru_cell_composed(xg, h, w, b)
    return got.numpy(), ref.numpy()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n,hid", SHAPES)
def test_cell_kernel_matches_composed_and_torch(device, kind, bias, n, hid):
    o = _operands(kind, n, hid, bias, seed=n * 1000 + hid)
    got, ref = _kernel_step(kind, o, device)
    want = _torch_step(kind, o)
    assert got.shape == want.shape
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cpu_numpy_fallback_matches_torch(kind, monkeypatch):
    """Where no compiled kernels run (no C compiler, deterministic mode) the cpu kernel is numpy's."""
    o = _operands(kind, 5, 37, True, seed=5)
    monkeypatch.setattr(cpu_recurrent, "_loaded", [None])
    assert cpu_recurrent.cells() is None
    got, _ = _kernel_step(kind, o, "cpu")
    np.testing.assert_allclose(got, _torch_step(kind, o), rtol=1e-5, atol=2e-5)


def test_cpu_cells_are_compiled_where_native_kernels_run():
    """The C step is what runs wherever the native kernels do (else the fused path would be numpy silently)."""
    if cpu_matmul.native_kernels() is None:
        assert cpu_recurrent.cells() is None
    else:
        assert cpu_recurrent.cells() is not None
        assert "recurrent.c" in K.get("lstm_cell").kernels["cpu"].describe()


def test_cpu_cells_give_the_same_bits_on_any_thread_count():
    """recurrent.c splits hidden units between threads; each output is computed alike in any split."""
    native = cpu_matmul.native_kernels()
    if native is None:  # (numpy's step then: nothing split)
        assert cpu_recurrent.cells() is None
        return
    o = _operands("lstm", 16, 512, True, seed=9)
    before = native.threads
    try:
        native.set_threads(1)
        one = cpu_recurrent.lstm_cell(None, o["xg"], o["h"], o["c"], o["w"], o["b"])
        native.set_threads(4)
        four = cpu_recurrent.lstm_cell(None, o["xg"], o["h"], o["c"], o["w"], o["b"])
    finally:
        native.set_threads(before)
    np.testing.assert_array_equal(one, four)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{tag: recurrent.c's entry points} of the native, AVX2, SSSE3 and plain-C builds."""
    from native_builds import build_variants
    return {tag: (cpu_recurrent._Cells(nk.lib, native=True), nk)
            for tag, nk in build_variants(tmp_path_factory).items()}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("n,hid", [(1, 128), (3, 37), (33, 24)])
def test_every_build_gives_the_bits_of_its_fusing(builds, kind, n, hid):
    """Each output is one lane's chain of multiply-adds over k in order, whatever the vector width (AVX-512's 16
    lanes, AVX2's 8, SSSE3's 4 x 2) and register tile: builds that fuse the multiply-add (native, AVX2) agree bit
    for bit, as do those that multiply then add (SSSE3, plain C); all are torch's step within float32 rounding."""
    o = _operands(kind, n, hid, True, seed=n + hid)
    want = _torch_step(kind, o)
    got = {}
    for tag, (cells, nk) in builds.items():
        nk.set_threads(1)
        got[tag] = cells.run(o["xg"], np.ascontiguousarray(o["h"]), o["c"], o["w"], o["b"], hid)
        np.testing.assert_allclose(got[tag], want, rtol=1e-5, atol=1e-5, err_msg=tag)
    assert np.array_equal(got["ssse3"], got["scalar"])
    if "avx2" in got:
        assert np.array_equal(got["native"], got["avx2"])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("steps,n,hid", [(1, 3, 5), (7, 5, 37), (4, 16, 128)])
def test_sequence_kernel_matches_composed(kind, reverse, bias, steps, n, hid, monkeypatch):
    """The time loop in C (and numpy's loop where no compiled kernels run) against the composed steps."""
    o = _operands(kind, n, hid, bias, seed=steps * 100 + hid)
    rng = np.random.default_rng(hid)
    xg = rng.standard_normal((steps,) + o["xg"].shape).astype(np.float32)
    k = K.bound(kind + "_sequence", ember.device("cpu").backend)
    states = (o["h"], o["c"]) if kind == "lstm" else (o["h"],)
    T = lambda a: None if a is None else ember.tensor(a)  # noqa: E731
    composed = lstm_sequence_composed if kind == "lstm" else gru_sequence_composed
    want = composed(T(xg), *map(T, states), T(o["w"]), T(o["b"]), reverse=reverse).numpy()
    got = k(xg, *states, o["w"], o["b"], reverse=reverse)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    monkeypatch.setattr(cpu_recurrent, "_loaded", [None])
    np.testing.assert_allclose(k(xg, *states, o["w"], o["b"], reverse=reverse), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("sequence_kernel", [True, False])
def test_layer_without_grad_matches_torch(device, kind, sequence_kernel):
    """A 2-layer bidirectional layer under no_grad (a sequence kernel where the device has one, else a cell kernel
    each step) against torch's."""
    if sequence_kernel:
        _layer_matches_torch(device, kind)
    else:
        with K.disabled("lstm_sequence", "gru_sequence"):
            _layer_matches_torch(device, kind)


def _layer_matches_torch(device, kind):
    torch.manual_seed(3)
    tm = getattr(torch.nn, kind)(12, 20, num_layers=2, bidirectional=True, batch_first=True)
    em = getattr(nn, kind)(12, 20, num_layers=2, bidirectional=True, batch_first=True).to(device)
    em.load_state_dict({k: ember.tensor(v.detach().numpy(), device=device) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((3, 9, 12)).astype(np.float32)
    with torch.no_grad(), ember.no_grad():
        ty, tst = tm(torch.tensor(x))
        ey, est = em(ember.tensor(x, device=device))
    np.testing.assert_allclose(ey.numpy(), ty.numpy(), rtol=1e-4, atol=1e-5)
    for e, t in zip(est if kind == "LSTM" else (est,), tst if kind == "LSTM" else (tst,)):
        np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-4, atol=1e-5)
