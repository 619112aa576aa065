"""Deterministic mode: the page's float kernels (cpu_kernels/gemm.c, elementwise.c) built natively give the bits the
page's plain SIMD128 module gives in Pyodide (Node), and Whisper then gives the page's tokens token for token.

- kernels: matmul in every layout and batching the models use, GELU, SiLU, softmax exponentials, log_softmax (a
  decoder's logits: its exponentials the page's kernel) and attention,
  computed in Pyodide and natively (on 1 and 3 threads) on the same seeded inputs: bit-identical;
- Whisper tiny.en on three espeak-ng clips (one resampled from 44.1 kHz stereo): the page's transcription (the
  speech tool's options) against native deterministic mode: identical tokens, and the encoder output bit-identical
  (base in Chromium against native: e2e/test_web_whisper_base.py).
"""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.backends import cpu_matmul

from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401  (fixture)

KERNELS = r'''
import numpy as np
import ember
import ember.nn.functional as F
from ember.backends import cpu_matmul

def kernel_outputs(out_path):
    """Every float kernel on seeded inputs -> npz at out_path."""
    rng = np.random.default_rng(11)
    k = cpu_matmul.page_kernels()
    res = {}
    for i, (m, kk, n) in enumerate([(1, 384, 1536), (1, 64, 37), (7, 300, 45), (129, 257, 130), (3, 3000, 8),
                                    (1500, 384, 64), (2, 1, 3)]):
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        res[f"mm{i}"] = k.matmul(a, b)
        res[f"mmT{i}"] = k.matmul(a, np.ascontiguousarray(b.T).T)          # B column-major (a weight's transpose)
    a = rng.standard_normal((2, 6, 5, 64)).astype(np.float32)
    b = rng.standard_normal((2, 6, 64, 33)).astype(np.float32)
    res["batched"] = cpu_matmul.mm(a, b)
    res["broadcast"] = cpu_matmul.mm(a, b[:1, :1])
    x = (rng.standard_normal(300_007) * 4).astype(np.float32)  # (blocks enough to split between threads)
    res["gelu"], res["silu"] = k.gelu(x), k.silu(x)
    s = (rng.standard_normal((301, 1503)) * 6).astype(np.float32)
    res["exp_rowmax"] = k.exp_rowmax(s.copy())
    logits = (rng.standard_normal((2, 51864)) * 5).astype(np.float32)
    logits[:, 50257:50300] = -np.inf  # (suppressed tokens, as the decoder's filters leave them)
    res["log_softmax"] = ember.log_softmax(ember.from_numpy(logits), -1).numpy()
    q, kv = rng.standard_normal((1, 6, 3, 64)).astype(np.float32), rng.standard_normal((1, 6, 1500, 64)).astype(np.float32)
    res["attn"] = F.scaled_dot_product_attention(ember.tensor(q), ember.tensor(kv), ember.tensor(kv)).numpy()
    q = rng.standard_normal((1, 6, 400, 64)).astype(np.float32)
    k2 = rng.standard_normal((1, 6, 1500, 64)).astype(np.float32)
    res["attn_blocked"] = F.scaled_dot_product_attention(ember.tensor(q), ember.tensor(k2), ember.tensor(k2)).numpy()
    np.savez(out_path, **res)
'''

WHISPER = r'''
import numpy as np
import ember
from ember.backends import cpu_matmul
from ember.models.whisper.load import load_whisper
from ember.models.whisper.transcribe import features, load_input, transcribe

def whisper_outputs(model_dir, clips, out_dir):
    """The speech tool's transcription (timestamps, temperature fallback) of each clip, its mel and encoder output."""
    model, _, tok = load_whisper(model_dir)
    for name, path in clips.items():
        data = open(path, "rb").read()
        mel, _ = features(load_input(data), tok.config.dims.n_mels)
        with ember.no_grad():
            enc = model.encoder(ember.tensor(mel[None])).numpy()[0]
        page = transcribe(model, tok, data, timestamps=True)
        np.savez(f"{out_dir}/{name}.npz", mel=mel, enc=enc, text=np.asarray(page["text"]),
                 tokens=np.asarray([t for s in page["segments"] for t in s["tokens"]]))
'''


def _session(mounts, pyodide_dist):  # noqa: F811
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    return PyodideSession(dist=pyodide_dist, mounts=mounts)


@pytest.fixture
def deterministic():
    was = cpu_matmul.set_deterministic(True)
    yield
    cpu_matmul.set_deterministic(was)


def test_page_kernels_built_natively_give_the_page_bits(tmp_path, pyodide_dist, deterministic):  # noqa: F811
    with _session({"/out": tmp_path}, pyodide_dist) as s:
        path = s.run(KERNELS + '''
cpu_matmul.set_deterministic(True)
kernel_outputs("/out/page.npz")
result = cpu_matmul.matmul_path()
''', timeout=300)["result"]
    assert path == "deterministic: wasm-simd128"  # the plain module: relaxed SIMD's fused multiply-add is not used
    ns = {}
    exec(KERNELS, ns)
    k = cpu_matmul.page_kernels()
    was = k.threads
    try:
        for threads in (1, 3):  # natively the kernels split their jobs between threads: the same bits on any count
            assert k.set_threads(threads) == threads
            ns["kernel_outputs"](str(tmp_path / f"native{threads}.npz"))
    finally:
        k.set_threads(was)
    page = np.load(tmp_path / "page.npz")
    for threads in (1, 3):
        native = np.load(tmp_path / f"native{threads}.npz")
        assert sorted(page.files) == sorted(native.files)
        for name in page.files:
            np.testing.assert_array_equal(page[name], native[name], err_msg=f"{name} on {threads} threads")
    assert cpu_matmul.matmul_path().startswith("deterministic: page kernels built natively")


def test_deterministic_mode_is_close_to_blas():
    """The mode changes the summation order, not the results beyond float32 rounding."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((50, 384)).astype(np.float32), rng.standard_normal((384, 70)).astype(np.float32)
    x = (rng.standard_normal(999) * 3).astype(np.float32)
    want_mm, want_gelu = cpu_matmul.mm(a, b), F.gelu(ember.tensor(x)).numpy()
    was = cpu_matmul.set_deterministic(True)
    try:
        got_mm, got_gelu = cpu_matmul.mm(a, b), F.gelu(ember.tensor(x)).numpy()
    finally:
        cpu_matmul.set_deterministic(was)
    np.testing.assert_allclose(got_mm, want_mm, atol=2e-5 * np.abs(want_mm).max())
    np.testing.assert_allclose(got_gelu, want_gelu, atol=1e-6)


def test_deterministic_log_softmax_is_torchs_within_rounding():
    """log_softmax's exponentials in the page's kernel (deterministic mode): torch's log_softmax within float32
    rounding, suppressed (-inf) entries -inf; a row with an infinite maximum keeps numpy's arithmetic."""
    import torch
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 51864)) * 8).astype(np.float32)
    x[:, 100:200] = -np.inf
    want = torch.log_softmax(torch.tensor(x), -1).numpy()
    was = cpu_matmul.set_deterministic(True)
    try:
        got = ember.log_softmax(ember.from_numpy(x), -1).numpy()
        with np.errstate(invalid="ignore"):  # (inf - inf)
            inf_row = ember.log_softmax(ember.tensor(np.array([[1.0, np.inf, 2.0]], np.float32)), -1).numpy()
    finally:
        cpu_matmul.set_deterministic(was)
    assert np.all(got[:, 100:200] == -np.inf)
    np.testing.assert_allclose(got[:, 200:], want[:, 200:], rtol=1e-6, atol=2e-6)
    np.testing.assert_array_equal(inf_row, torch.log_softmax(torch.tensor([[1.0, np.inf, 2.0]]), -1).numpy())


def test_deterministic_softmax_is_torchs_within_rounding():
    """softmax's exponentials in the page's kernel (deterministic mode, and the page): torch's softmax within
    float32 rounding, suppressed (-inf) entries 0; a row with an infinite maximum keeps numpy's arithmetic."""
    import torch
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 262144)) * 8).astype(np.float32)
    x[:, 100:200] = -np.inf
    want = torch.softmax(torch.tensor(x), -1).numpy()
    was = cpu_matmul.set_deterministic(True)
    bins = (rng.standard_normal((2, 4, 16, 300)) * 3).astype(np.float32)  # along another axis: YOLO's DFL's
    try:
        got = ember.softmax(ember.from_numpy(x), -1).numpy()
        with np.errstate(invalid="ignore"):  # (inf - inf)
            inf_row = ember.softmax(ember.tensor(np.array([[1.0, np.inf, 2.0]], np.float32)), -1).numpy()
        got_bins = ember.softmax(ember.tensor(bins), 2).numpy()
        moved_bins = ember.softmax(ember.tensor(np.ascontiguousarray(bins.transpose(0, 1, 3, 2))), -1).numpy()
    finally:
        cpu_matmul.set_deterministic(was)
    # (the kernel's exponentials either way: within a rounding of the sums of the axis moved last)
    np.testing.assert_allclose(got_bins, moved_bins.transpose(0, 1, 3, 2), rtol=1.2e-7, atol=0)
    np.testing.assert_allclose(got_bins, torch.softmax(torch.tensor(bins), 2).numpy(), rtol=5e-6, atol=1e-12)
    assert np.all(got[:, 100:200] == 0)
    # (x - max reaches -60 here, where float32's spacing is 3.8e-6: torch's AVX2 build lands up to 3.5e-6 away, its
    # AVX-512 build within 2e-6)
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=1e-12)
    want_inf = torch.softmax(torch.tensor([[1.0, np.inf, 2.0]]), -1).numpy()
    np.testing.assert_array_equal(np.isnan(inf_row), np.isnan(want_inf))


@pytest.mark.slow
def test_page_whisper_equals_native_deterministic(tmp_path_factory, pyodide_dist, deterministic):  # noqa: F811
    from test_whisper_model import tiny_en
    from test_whisper_pyodide import _clips
    root = tmp_path_factory.mktemp("whisper-det")
    clips = _clips(root)
    runs = {"tiny": (tiny_en(), clips)}
    ns = {}
    exec(WHISPER, ns)
    for model_name, (folder, which) in runs.items():
        (root / f"native-{model_name}").mkdir()
        ns["whisper_outputs"](str(folder), {k: str(v) for k, v in which.items()}, str(root / f"native-{model_name}"))
    with _session({"/tiny": runs["tiny"][0], "/clips": root, "/out": root}, pyodide_dist) as s:
        for model_name, (_, which) in runs.items():
            (root / f"page-{model_name}").mkdir()
            s.run(WHISPER + f'''
cpu_matmul.set_deterministic(True)
whisper_outputs("/{model_name}", {{k: "/clips/" + k + ".wav" for k in {list(which)!r}}}, "/out/page-{model_name}")
''', timeout=1500)
    for model_name, (_, which) in runs.items():
        for name in which:
            page = np.load(root / f"page-{model_name}" / f"{name}.npz")
            native = np.load(root / f"native-{model_name}" / f"{name}.npz")
            assert page["tokens"].tolist() == native["tokens"].tolist(), (model_name, name, str(page["text"]),
                                                                          str(native["text"]))
            assert str(page["text"]) == str(native["text"])
            np.testing.assert_array_equal(page["mel"], native["mel"], err_msg=f"{model_name} {name} mel")
            np.testing.assert_array_equal(page["enc"], native["enc"], err_msg=f"{model_name} {name} encoder")
