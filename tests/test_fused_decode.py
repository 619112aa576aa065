"""The fused decode step (cpu_kernels/decode.c through the CPU backend's decoder_plan, models/common/fused_decode.py)
against the composed path it replaces, the same model's layers run op by op: random-weight Gemma 3 (sandwich
norms, q/k norms, GeGLU, sliding and global layers with their own rope bases, a window shorter than the sequence
so the ring wraps) and Llama-shaped (pre-norm, SwiGLU, grouped-query) models, float32 and quantized weights.

Float32 weights: the two paths differ by float32 rounding only (decode.c sums in 8 fixed lanes, numpy pairwise):
logits within 1e-5 of their range. Weights with llama.cpp's 8-bit activations: a rounding difference can move an
activation across an 8-bit level, by a level (1/254 of its block's largest), so the bound is the effect of a
few such moves: 2e-2 of the range, while an error in the kernel (a wrong block, scale or cache row) is far above.
The page runs the same C: its decode steps equal native's bit for bit (test_fused_decode_in_pyodide)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
from ember.backends import cpu_decode, cpu_matmul
from ember.models.common import fused_decode as FD
from ember.models.gemma3.config import GLOBAL, SLIDING, Gemma3Config
from ember.models.gemma3.model import Gemma3
from ember.quant import quantize, set_activations
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401

if cpu_decode.kernels() is None:  # no C compiler: the composed path serves, nothing to compare
    pytest.skip(f"no compiled CPU kernels here ({cpu_matmul.native_kernels_status()})", allow_module_level=True)

GEMMA = dict(vocab_size=101, dim=64, hidden_dim=96, n_layers=5, n_heads=4, n_kv_heads=2, head_dim=32,
             max_seq_len=64, sliding_window=4, layer_types=[SLIDING, SLIDING, GLOBAL, SLIDING, GLOBAL],
             query_pre_attn_scalar=24.0)
BUILD = '''
import numpy as np
import ember
from ember.models.gemma3.config import Gemma3Config
from ember.models.gemma3.model import Gemma3

def random_gemma(config, seed):
    """Gemma 3 with seeded random weights (the same on every platform: numpy's PCG64 and float32 casts)."""
    model = Gemma3(Gemma3Config(**config))
    rng = np.random.default_rng(seed)
    model.model.embed_tokens.load_table(rng.standard_normal((config["vocab_size"], config["dim"])).astype(np.float32))
    for name, p in model.named_parameters():
        scale = 0.3 if "norm" in name else 1.0 / np.sqrt(p.shape[-1])
        p._data[...] = (1.0 if "norm" in name else 0.0) + scale * rng.standard_normal(p.shape).astype(np.float32)
    return model.eval().requires_grad_(False)
'''
exec(BUILD)


def _llama(dim=64, hidden=128, layers=3, heads=4, kv_heads=2):
    """A Llama-shaped CausalLM from the zoo's toolkit: pre-norm blocks, SwiGLU, grouped-query attention."""
    from ember import nn
    from ember.models.common.attention import Attention
    from ember.models.common.decoder import CausalLM, DecoderBlock
    from ember.models.common.mlp import GatedMLP
    from ember.models.common.positions import RotaryEmbedding, rope_inv_freq

    class Tiny(CausalLM):
        tie_embeddings = True

        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.embed_tokens = nn.Embedding(97, dim)
            self.model.layers = nn.ModuleList([DecoderBlock(Attention(dim, heads, kv_heads), GatedMLP(dim, hidden),
                                                            nn.RMSNorm(dim, eps=1e-5), nn.RMSNorm(dim, eps=1e-5))
                                               for _ in range(layers)])
            self.model.norm = nn.RMSNorm(dim, eps=1e-5)
            self.setup(n_layers=layers, n_heads=heads, n_kv_heads=kv_heads, head_dim=dim // heads, max_seq_len=64,
                       rope=RotaryEmbedding(dim // heads, rope_inv_freq(dim // heads, 10000.0)[0]))

        def embed(self, tokens, positions):
            return self.model.embed_tokens(tokens)

    model = Tiny()
    rng = np.random.default_rng(3)
    for name, p in model.named_parameters():
        p._data[...] = (1.0 + 0.3 * rng.standard_normal(p.shape) if "norm" in name else
                        rng.standard_normal(p.shape) / np.sqrt(p.shape[-1])).astype(np.float32)
    return model.eval().requires_grad_(False)


def _decode(model, ids, steps, fused: bool):
    """Logits (1 + steps, vocab): the prompt's last, then each greedy step's; the decode steps fused or not."""
    class Off:
        def plan(self):
            return None
    model.__dict__["_fused_decoder"] = FD.FusedDecoder(model) if fused else Off()
    cache = model.new_cache(64)
    with ember.no_grad():
        out = [model(ember.tensor([ids]), cache).numpy()[0, -1]]
        for _ in range(steps):
            out.append(model(ember.tensor([[int(out[-1].argmax())]]), cache).numpy()[0, -1])
    if fused:
        assert model._fused_decoder._plan is not None, "the fused path did not run"
    return np.stack(out)


def _gap(a, b):
    return float((np.abs(a - b).max(1) / (b.max(1) - b.min(1))).max())


def random_llama_weights(model, seed):
    """Seeded weights for a random Llama: norms near 1, projections scaled by their fan-in; float nn.Linear weights
    stored input-major (the CPU backend's layout). Returns the model."""
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        p._data[...] = (1.0 + 0.3 * rng.standard_normal(p.shape) if "norm" in name else
                        rng.standard_normal(p.shape) / np.sqrt(p.shape[-1])).astype(np.float32)
    for m in model.modules():
        if type(m) is ember.nn.Linear:
            ember.nn.relayout_linear_weight(m.weight)
    return model


def _llama_fused(layers=3, dim=128, hidden=384):
    """models/llama's Llama: q, k, v stacked in one projection and gate, up in another (rows the plan splits),
    float32 weights stored input-major above 16k elements (the CPU backend's layout)."""
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    model = Llama(LlamaConfig(vocab_size=97, dim=dim, hidden_dim=hidden, n_layers=layers, n_heads=4, n_kv_heads=2,
                              max_seq_len=64))
    return random_llama_weights(model, seed=7).eval().requires_grad_(False)


@pytest.mark.parametrize("kind", ["gemma3", "llama", "llama-stacked"])
def test_fused_float32_equals_composed(kind):
    model = {"gemma3": lambda: random_gemma(GEMMA, 0), "llama": _llama, "llama-stacked": _llama_fused}[kind]()
    for ids in ([5], [7, 1, 30, 2, 9, 44]):  # one token: every step fused; six: a composed prompt, then fused steps
        fused, composed = _decode(model, ids, 12, True), _decode(model, ids, 12, False)  # 12 steps: the ring wraps
        assert _gap(fused, composed) < 1e-5, (kind, ids, _gap(fused, composed))


def test_float32_threads_give_the_same_bits():
    """decode.c splits a float32 matvec past its threshold between threads by blocks of 64 outputs, each output
    summed in input order whichever thread computes it: the same bits at any thread count, and the composed
    path's values within rounding."""
    nk = cpu_matmul.native_kernels()
    if nk is None:
        pytest.skip("the native kernels run the threads")
    model = _llama_fused(2, dim=288, hidden=1000)  # 288 x 1000 past the threads' threshold
    before = nk.threads
    try:
        nk.set_threads(1)
        one = _decode(model, [3, 9], 6, True)
        for n in (2, 3):
            nk.set_threads(n)
            assert np.array_equal(_decode(model, [3, 9], 6, True), one), n
    finally:
        nk.set_threads(before)
    assert _gap(one, _decode(model, [3, 9], 6, False)) < 1e-5


def _weight_types(model):
    """The decode plan's weight types (decode.c's W_TYPE of q, k, v, o, gate, up, down in every layer)."""
    plan = model._fused_decoder._plan
    first = len(cpu_decode._NORMS)  # the weights' records follow the norms' fields
    types = plan._layers[:, first:cpu_decode.L_ROPE].reshape(len(plan._layers), 7, 5)[:, :, 1]
    return set(types.reshape(-1).tolist())


def test_blocked_weights_give_the_input_major_bits(monkeypatch):
    """A plan re-lays its input-major float32 weights in blocks of 16 outputs (the last block zero-padded: 1000 and
    the 96-row k, v are not multiples of 64) where EMBER_BLOCKED_WEIGHT_BYTES allows: the same sums in the same
    order as the input-major weights, so the same bits, on one thread or several."""
    nk = cpu_matmul.native_kernels()
    if nk is None:
        pytest.skip("the native kernels run decode plans")
    model = _llama_fused(2, dim=288, hidden=1000)
    before = nk.threads
    try:
        for n in (1, 2):
            nk.set_threads(n)
            monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", "0")
            plain = _decode(model, [3, 9], 6, True)
            assert _weight_types(model) == {-1}
            monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))  # (whatever other copies hold)
            assert np.array_equal(_decode(model, [3, 9], 6, True), plain), n
            assert _weight_types(model) == {-2}
    finally:
        nk.set_threads(before)


def test_a_prompts_blocked_copies_move_into_the_plan(monkeypatch):
    """Products of a prompt read a weight's blocked copy from its second one on (gemm_native.c); the decode plan
    then moves those copies into its one array rather than making second ones (the stacked q, k, v and gate, up
    copied whole, the plan reading slices of them), and its steps give the bits of a plan built without them."""
    nk = cpu_matmul.native_kernels()
    if nk is None or not nk.sgemm_width:
        pytest.skip("the native GEMM reads blocked copies")
    gc.collect()  # (copies of earlier tests' weights freed now, not while this one counts)
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))  # (whatever other copies hold)
    prompt = list(range(3, 27))  # 24 tokens: products of the kernel's size
    fresh = _decode(_llama_fused(2, dim=288, hidden=1024), prompt, 5, True)
    gc.collect()  # (that model's plan and copies freed)
    live = cpu_matmul._blocked_bytes[0]
    model = _llama_fused(2, dim=288, hidden=1024)
    _decode(model, prompt, 0, False)
    _decode(model, prompt, 0, False)  # (the second prompt's products make the copies)
    matrices = [m.weight._data.T for m in model.modules() if type(m) is ember.nn.Linear and m.out_features != 97]
    copies = [cpu_matmul.derived(a, "blocked") for a in matrices]
    assert all(c is not None for c in copies) and len(copies) == 2 * 4  # (q, k, v stacked; o; gate, up; down)
    made = cpu_matmul._blocked_bytes[0] - live
    assert made == sum(c.nbytes for c in copies)
    del copies
    got = _decode(model, prompt, 5, True)
    # the fresh model's first prompt read gate / up (rows 4 KiB apart) through BLAS, this one's blocked copies
    # through gemm_native.c: the same bits where BLAS's sums are gemm_native's (OpenBLAS's AVX-512 kernel), within
    # a rounding a multiply-add elsewhere (its AVX2 kernel sums k in another order)
    a = np.random.default_rng(1).standard_normal((24, 288)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((1024, 288)).astype(np.float32).T  # (a view, as a Linear's)
    same = np.array_equal(np.matmul(a, b), nk.sgemm(a, np.ascontiguousarray(b), None, None, 0))
    if same:
        assert np.array_equal(got, fresh)
    else:
        np.testing.assert_allclose(got, fresh, rtol=1e-4, atol=1e-4)
    assert _weight_types(model) == {-2}
    assert cpu_matmul._blocked_bytes[0] - live == made  # moved, not copied again
    moved = [cpu_matmul.derived(a, "blocked") for a in matrices]
    assert all(c is not None and c.base is moved[0].base for c in moved)  # one array


def test_the_blocked_layout():
    wt = np.random.default_rng(0).standard_normal((24, 37)).astype(np.float32)  # (inputs, outputs)
    wb = cpu_decode.blocked(wt[:, 2:])  # rows of a wider weight (a slice, as q of a stacked q, k, v)
    assert wb.shape == (3, 24, 16)
    for o in range(35):
        assert np.array_equal(wb[o // 16, :, o % 16], wt[:, 2 + o])
    assert not wb[2, :, 3:].any()  # rows past the last: zero


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q5_1"])
def test_fused_q8_activations_follow_composed(qtype):
    model = random_gemma(GEMMA, 1)
    quantize(model, qtype)  # every projection (dims 64, 96, 128: whole blocks of 32)
    assert set_activations(model, "q8") == 7 * GEMMA["n_layers"]
    fused, composed = _decode(model, [3], 12, True), _decode(model, [3], 12, False)
    assert _gap(fused, composed) < 2e-2, (qtype, _gap(fused, composed))


def test_k_types_and_float_rows_in_one_model():
    """Q4_K / Q6_K (256-element blocks, so a 256-wide model) beside float32 projections a plan mixes."""
    config = dict(GEMMA, dim=256, hidden_dim=512, head_dim=64)
    model = random_gemma(config, 2)
    quantize(model, "q4_k", include=lambda name, m: "mlp" in name)
    quantize(model, "q6_k", include=lambda name, m: "o_proj" in name)
    set_activations(model, "q8")
    fused, composed = _decode(model, [3], 6, True), _decode(model, [3], 6, False)
    assert _gap(fused, composed) < 2e-2, _gap(fused, composed)


def test_one_job_of_weights_with_mixed_activations():
    """decode.c runs q, k and v (gate and up) as one job of their rows: q8_0 and K-type activations side by side in
    it, float32 rows among them, and a gate-up pair of a quantized and a float32 weight (its activation applied
    after the job): the composed path's values within rounding, the same bits on 1, 2 and 3 threads."""
    config = dict(GEMMA, dim=256, hidden_dim=512, head_dim=64)
    model = random_gemma(config, 5)
    quantize(model, "q8_0", include=lambda name, m: name.endswith(("q_proj", "down_proj")))
    quantize(model, "q6_k", include=lambda name, m: name.endswith(("v_proj", "gate_proj")))
    set_activations(model, "q8")
    composed = _decode(model, [3], 6, False)
    nk = cpu_matmul.native_kernels()
    before = None if nk is None else nk.threads
    try:
        runs = []
        for n in (1, 2, 3) if nk is not None else (None,):
            if nk is not None:
                nk.set_threads(n)
            runs.append(_decode(model, [3], 6, True))
            assert np.array_equal(runs[-1], runs[0]), n
    finally:
        if nk is not None:
            nk.set_threads(before)
    assert _gap(runs[0], composed) < 2e-2, _gap(runs[0], composed)


def test_the_plan_follows_the_weights():
    model = random_gemma(GEMMA, 4)
    quantize(model, "q8_0")
    set_activations(model, "q8")
    before = _decode(model, [3], 2, True)
    decoder = model._fused_decoder
    w = model.model.layers[1].mlp.down_proj.weight
    w.data[:] = np.roll(w.data, 1, axis=0)  # the same array, new values: the plan reads them as they are
    assert decoder.plan() is decoder._plan
    set_activations(model, "float32")  # float32 activations: no plan, the composed path
    assert decoder.plan() is None
    set_activations(model, "q8")
    old = decoder.plan()
    model.model.layers[0].input_layernorm.weight = ember.nn.Parameter(ember.ones(GEMMA["dim"]))  # a new array
    new = decoder.plan()
    assert old is not None and new is not None and new is not old
    after = _decode(model, [3], 2, True)
    assert not np.array_equal(before, after)
    assert _gap(after, _decode(model, [3], 2, False)) < 2e-2


def test_what_the_plan_does_not_cover_runs_composed():
    model = _llama()
    model.model.layers[1].self_attn.q_proj.bias = ember.nn.Parameter(ember.zeros(64))  # a bias: not in decode.c
    assert FD.model_spec(model, []) is None
    _decode(model, [2], 2, False)  # (runs)
    fd = FD.FusedDecoder(model)
    assert fd.plan() is None


def test_fused_decode_in_pyodide(pyodide_session):
    """The page's decode steps (the wasm build of decode.c and q8dot.c) give native's hidden states bit for bit:
    a seeded random model quantized to Q5_0 / Q8_0 alike on both sides, a one-token prompt (so every step is
    fused), the final norm's output compared (the float head's matmul is BLAS natively, wasm GEMM in the page)."""
    code = BUILD + f'''
from ember.models.common import fused_decode as FD
from ember.quant import quantize, set_activations
model = random_gemma({GEMMA!r}, 5)
quantize(model, "q5_0", include=lambda name, m: "mlp" in name)
quantize(model, "q8_0")
set_activations(model, "q8")
model.head = lambda x: x
cache = model.new_cache(64)
states, t = [], 3
with ember.no_grad():
    for _ in range(8):
        h = model(ember.tensor([[t]]), cache).numpy().reshape(-1)
        states.append(h.tobytes().hex())
        t = int(np.abs(h).argmax()) % {GEMMA["vocab_size"]}
result = {{"states": states, "fused": model._fused_decoder._plan is not None}}
'''
    got = pyodide_session.run(code, timeout=300)["result"]
    ns = {}
    exec(code.replace("result = {", "_result = {"), ns)
    assert got["fused"] and ns["_result"]["fused"]
    assert got["states"] == ns["_result"]["states"]
