"""Loading holds one full-size copy of a weight at a time: a float16 checkpoint's linear weights are cast and
re-stored in their backend's layout in one pass, and the float16 twin the half-precision products read is
checked a chunk at a time. Peaks measured with tracemalloc (numpy reports its buffers to it)."""
import tracemalloc

import numpy as np
import pytest

import ember
from ember import nn
from ember.backends import cpu_matmul

OUT, IN = 2048, 1024  # 8 MiB in float32


def _peak(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _half_state(rng):
    return {"weight": rng.standard_normal((OUT, IN)).astype(np.float16),
            "bias": rng.standard_normal(OUT).astype(np.float16)}


def test_half_checkpoint_into_float32_linear_one_copy():
    rng = np.random.default_rng(0)
    state = {k: ember.tensor(v) for k, v in _half_state(rng).items()}
    lin = nn.Linear(IN, OUT)  # its initial weight is held before the measurement starts
    _, peak = _peak(lambda: lin.load_state_dict(state))
    f32 = OUT * IN * 4
    assert peak < 1.25 * f32, f"loading held {peak / f32:.2f}x the weight's float32 size"
    w = lin.weight._data
    np.testing.assert_array_equal(w, state["weight"].numpy().astype(np.float32))
    assert lin.weight.dtype is ember.float32 and lin.bias.dtype is ember.float32
    # the layout the backend reads fastest, as a float32 checkpoint's weight gets it
    ref = nn.Linear(IN, OUT)
    ref.load_state_dict({k: v.numpy().astype(np.float32) for k, v in state.items()})
    assert w.strides == ref.weight._data.strides
    x = ember.tensor(rng.standard_normal((3, IN)).astype(np.float32))
    np.testing.assert_array_equal(lin(x).numpy(), ref(x).numpy())


def test_missing_linear_weight_is_still_restored():
    lin = nn.Linear(IN, OUT)
    before = lin.weight.numpy().copy()
    lin.load_state_dict({"bias": np.zeros(OUT, np.float32)}, strict=False)
    ref = nn.Linear(IN, OUT)
    ref.load_state_dict({"weight": before, "bias": np.zeros(OUT, np.float32)})
    np.testing.assert_array_equal(lin.weight.numpy(), before)
    assert lin.weight._data.strides == ref.weight._data.strides


@pytest.mark.parametrize("transposed", [False, True])
def test_half_copy_checks_in_chunks(transposed):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((OUT, IN)).astype(np.float16).astype(np.float32)
    b = np.ascontiguousarray(w.T).T if transposed else w  # a re-stored weight's view, or a plain matrix
    h, peak = _peak(lambda: cpu_matmul._exact_halves(b))
    assert h is not None and h.dtype == np.float16 and h.strides == (b.strides[0] // 2, b.strides[1] // 2)
    np.testing.assert_array_equal(h.astype(np.float32), b)
    assert peak < 1.25 * b.nbytes / 2, f"the check held {peak / (b.nbytes / 2):.2f}x the half copy's size"
    late = w.copy()
    late[-1, -1] = np.float32(1 + 2 ** -20)  # not a half, in the last chunk
    assert cpu_matmul._exact_halves(np.ascontiguousarray(late.T).T if transposed else late) is None
    nan = w.copy()
    nan[OUT // 2, 3] = np.nan
    assert cpu_matmul._exact_halves(nan) is None



@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000])
def test_half_copy_natively_matches_numpys_round_trip(n):
    # matvec_f16.c's one-pass check and copy against numpy's cast there and back: special halves (subnormal, the
    # largest, infinities, signed zeros) in the vector part and the tail, and a value that is not a half anywhere
    from ember.backends.cpu_native_kernels import load
    kern, why = load()
    assert kern is not None, why
    rng = np.random.default_rng(n)
    special = np.array([2.0 ** -24, -(2.0 ** -24) * 3, 65504.0, -65504.0, np.inf, -np.inf, 0.0, -0.0,
                        2.0 ** -14, 1.0 - 2.0 ** -11], np.float32)
    w = rng.standard_normal(n).astype(np.float16).astype(np.float32)
    w[rng.integers(0, n, min(n, len(special)))] = special[:min(n, len(special))]
    h = kern.f16_exact_copy(w)
    assert h is not None
    np.testing.assert_array_equal(h.view(np.uint16), w.astype(np.float16).view(np.uint16))
    for at in {0, n // 2, n - 1}:
        for bad in (np.float32(1 + 2 ** -20), np.float32(65520.0), np.float32(np.nan), np.float32(2.0 ** -25)):
            v = w.copy()
            v[at] = bad
            with np.errstate(over="ignore"):  # (65520 rounds to inf)
                assert np.array_equal(v.astype(np.float16).astype(np.float32), v) is False
            assert kern.f16_exact_copy(v) is None, (at, bad)

def test_bfloat16_checkpoint_into_float32_linear_one_copy():
    rng = np.random.default_rng(2)
    w32 = rng.standard_normal((OUT, IN)).astype(np.float32)
    state = {"weight": ember.tensor(w32).to(ember.bfloat16), "bias": ember.tensor(np.zeros(OUT, np.float32))}
    lin = nn.Linear(IN, OUT)
    _, peak = _peak(lambda: lin.load_state_dict(state))
    assert peak < 1.25 * OUT * IN * 4, f"loading held {peak / (OUT * IN * 4):.2f}x the weight's float32 size"
    np.testing.assert_array_equal(lin.weight.numpy(), state["weight"].to(ember.float32).numpy())


def test_tied_embedding_is_stored_for_the_head_from_a_bfloat16_checkpoint():
    # the tied table a model names in _linear_weights is stored as a Linear weight is, cast on the way
    from ember.models.llama import Llama, LlamaConfig
    cfg = LlamaConfig(vocab_size=512, dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32,
                      tie_embeddings=True)
    ember.manual_seed(0)
    ref = Llama(cfg).eval()
    half = {k: v.to(ember.bfloat16) for k, v in ref.state_dict().items()}
    ref.load_state_dict({k: v.to(ember.float32) for k, v in half.items()})
    got = Llama(cfg).eval()
    got.load_state_dict(half)
    table = got.output_embedding()
    assert table.dtype is ember.float32
    assert table._data.strides == ref.output_embedding()._data.strides == (4, 4 * 512)  # input-major, as lm heads
    ids = ember.tensor([[1, 7, 300, 42]])
    with ember.no_grad():
        np.testing.assert_array_equal(got(ids).logits.numpy(), ref(ids).logits.numpy())
