"""Models in float16 on WebGPU (f16 words, f16 compute with f32 accumulation where the adapter has shader-f16)
give the cpu's float16 greedy tokens: Llama 2 / Llama 3 and Gemma 3 (random weights), a random Whisper and,
with EMBER_WEBGPU_F16_TINY=1, the real tiny.en (CT2 float16 weights) on an espeak-ng clip (minutes on lavapipe:
its 30 s encoder pass, so off by default).

Tokens match because the logits do: each layer's f16 products and sums differ from numpy's f32 ones by a few
f16 roundings, below the gap between the best and the second token at almost every step. The tests assert that
gap story: the logits of the whole teacher-forced sequence agree within `LOGIT_TOL` (relative to the largest
logit), every position whose cpu margin exceeds twice the observed difference picks the same token, and the
greedy tokens are equal up to a near tie, if any (greedy_ties.py: random Llama 2 has a step with a 2.4e-4 margin
against a 4.9e-4 difference; the random Whisper one with 0.031 against 0.045; lavapipe breaks both as the cpu
does, another GPU need not)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import ember
from ember.device import device_status
from ember.models.common.generate import SamplingParams, generate

_OK, _WHY = device_status("webgpu")
if not _OK:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from greedy_ties import assert_greedy_agrees, max_diff, top2_margin  # noqa: E402
from test_gemma3 import pair  # noqa: E402,F401  (the random Gemma 3 fixture)
from test_llama import ember_from_hf, hf_model  # noqa: E402
from test_whisper_model import make_random_folder, speech_clip, tiny_en  # noqa: E402

LOGIT_TOL = 2e-2  # f16 logits of random models: a few f16 ulps (2^-11) of the layer outputs, 20 layers deep at most
GREEDY = SamplingParams(temperature=0)


def _check_logits(cpu_model, gpu_model, ids):
    """Teacher-forced logits on both devices: close, and the same argmax wherever the cpu's margin is clear;
    -> (cpu margins, differences) per position."""
    with ember.no_grad():
        c = cpu_model(ember.tensor([ids])).float().numpy()[0]
        g = gpu_model(ember.tensor([ids], device="webgpu")).float().numpy()[0]
    diff = np.abs(g - c).max()
    assert diff <= LOGIT_TOL * np.abs(c).max(), diff
    top2 = np.sort(c, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * diff
    assert (g.argmax(-1)[clear] == c.argmax(-1)[clear]).all()
    return [top2_margin(r) for r in c], [max_diff(a, b) for a, b in zip(c, g)]


def _same_greedy(cpu, gpu, prompt, n):
    """Greedy tokens on both devices: equal up to a near tie (greedy_ties.py), teacher-forced logits close."""
    want = list(generate(cpu, prompt, n, GREEDY))
    got = list(generate(gpu, prompt, n, GREEDY))
    margins, diffs = _check_logits(cpu, gpu, prompt + want)
    first = len(prompt) - 1  # the position whose logits pick the first generated token
    assert_greedy_agrees(got, want, margins[first:], diffs[first:])


@pytest.mark.parametrize("kind", ["llama2", "llama3"])
def test_llama_float16_greedy_tokens_equal_cpu(kind):
    hf = hf_model(kind)
    cpu = ember_from_hf(hf).to(ember.float16)
    gpu = ember_from_hf(hf).to(ember.float16).to("webgpu")
    _same_greedy(cpu, gpu, [3, 14, 15, 9, 26], 16)


def test_gemma3_float16_greedy_tokens_equal_cpu(pair):  # noqa: F811
    from ember.models.gemma3.config import Gemma3Config
    from ember.models.gemma3.load import from_hf_state_dict
    hf, _ = pair
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}

    def make():
        return from_hf_state_dict(sd, Gemma3Config.from_hf(hf.config.to_dict()), "random gemma3").to(ember.float16)
    cpu, gpu = make(), make().to("webgpu")
    _same_greedy(cpu, gpu, [5, 17, 2, 40, 33, 8], 12)   # past the sliding window (4)


def test_whisper_float16_tokens_equal_cpu(tmp_path, monkeypatch):
    from ember.models.whisper.decoding import WindowDecoder
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe, transcribe_features
    steps = []  # the filtered logits each greedy token is picked from, in decoding order
    filters = WindowDecoder.apply_filters

    def recorded(self, logits, generated):
        out = filters(self, logits, generated)
        steps.append(np.array(out[0], np.float64))
        return out
    monkeypatch.setattr(WindowDecoder, "apply_filters", recorded)

    if os.environ.get("EMBER_WEBGPU_F16_TINY") == "1":   # the real tiny.en (float16 CT2 weights) on speech
        folder = tiny_en()
        clip = speech_clip(tmp_path, "Please call Stella and ask her to bring these things with her from the store.",
                           "stella")
        greedy = dict(temperature=0.0, compression_ratio_threshold=None, logprob_threshold=None,
                      no_speech_threshold=None)

        def run(device):
            model, _, tok = load_whisper(folder, device=device, dtype=ember.float16)
            r = transcribe(model, tok, clip, **greedy)
            if device == "cpu":
                assert "stella" in r["text"].lower()
            return [t for s in r["segments"] for t in s["tokens"]]
    else:
        folder = make_random_folder(tmp_path, max_length=20, seed=3)
        mel = np.random.default_rng(7).standard_normal((80, 600)).astype(np.float32)   # 6 s: a short encoder pass

        def run(device):
            model, _, tok = load_whisper(folder, device=device, dtype=ember.float16)
            return transcribe_features(model, tok, mel)["segments"][0]["tokens"]
    got, want = {}, {}
    for device, out in (("cpu", want), ("webgpu", got)):
        steps.clear()
        out["tokens"], out["steps"] = run(device), list(steps)
    margins = [top2_margin(c) for c in want["steps"]]
    diffs = [max_diff(c, g) for c, g in zip(want["steps"], got["steps"])]
    last = assert_greedy_agrees(got["tokens"], want["tokens"], margins, diffs)
    top = max(np.abs(c[np.isfinite(c)]).max() for c in want["steps"])
    same = diffs[:last] or [0.0]  # the steps decoded on one prefix: their logits agree closely
    assert max(same) <= LOGIT_TOL * top, (max(same), top)
