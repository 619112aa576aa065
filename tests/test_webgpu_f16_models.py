"""Models in float16 on WebGPU (f16 words, f16 compute with f32 accumulation where the adapter has shader-f16)
give the cpu's float16 greedy tokens: Llama 2 / Llama 3 and Gemma 3 (random weights), a random Whisper and,
with EMBER_WEBGPU_F16_TINY=1, the real tiny.en (CT2 float16 weights) on an espeak-ng clip (minutes on lavapipe:
its 30 s encoder pass, so off by default).

Tokens match because the logits do: each layer's f16 products and sums differ from numpy's f32 ones by a few
f16 roundings, far below the gap between the best and the second token. The tests assert that gap story
too: the logits of the whole teacher-forced sequence agree within `LOGIT_TOL` (relative to the largest logit),
and every position whose cpu margin exceeds twice the observed difference picks the same token."""
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

from test_gemma3 import pair  # noqa: E402,F401  (the random Gemma 3 fixture)
from test_llama import ember_from_hf, hf_model  # noqa: E402
from test_whisper_model import make_random_folder, speech_clip, tiny_en  # noqa: E402

LOGIT_TOL = 2e-2  # f16 logits of random models: a few f16 ulps (2^-11) of the layer outputs, 20 layers deep at most
GREEDY = SamplingParams(temperature=0)


def _check_logits(cpu_model, gpu_model, ids):
    """Teacher-forced logits on both devices: close, and the same argmax wherever the cpu's margin is clear."""
    with ember.no_grad():
        c = cpu_model(ember.tensor([ids])).float().numpy()[0]
        g = gpu_model(ember.tensor([ids], device="webgpu")).float().numpy()[0]
    diff = np.abs(g - c).max()
    assert diff <= LOGIT_TOL * np.abs(c).max(), diff
    top2 = np.sort(c, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * diff
    assert (g.argmax(-1)[clear] == c.argmax(-1)[clear]).all()


@pytest.mark.parametrize("kind", ["llama2", "llama3"])
def test_llama_float16_greedy_tokens_equal_cpu(kind):
    hf = hf_model(kind)
    cpu = ember_from_hf(hf).to(ember.float16)
    gpu = ember_from_hf(hf).to(ember.float16).to("webgpu")
    prompt = [3, 14, 15, 9, 26]
    want = list(generate(cpu, prompt, 16, GREEDY))
    got = list(generate(gpu, prompt, 16, GREEDY))
    assert got == want
    _check_logits(cpu, gpu, prompt + want)


def test_gemma3_float16_greedy_tokens_equal_cpu(pair):  # noqa: F811
    from ember.models.gemma3.config import Gemma3Config
    from ember.models.gemma3.load import from_hf_state_dict
    hf, _ = pair
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}

    def make():
        return from_hf_state_dict(sd, Gemma3Config.from_hf(hf.config.to_dict()), "random gemma3").to(ember.float16)
    cpu, gpu = make(), make().to("webgpu")
    prompt = [5, 17, 2, 40, 33, 8]   # past the sliding window (4)
    want = list(generate(cpu, prompt, 12, GREEDY))
    got = list(generate(gpu, prompt, 12, GREEDY))
    assert got == want
    _check_logits(cpu, gpu, prompt + want)


def test_whisper_float16_tokens_equal_cpu(tmp_path):
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe, transcribe_features
    if os.environ.get("EMBER_WEBGPU_F16_TINY") == "1":   # the real tiny.en (float16 CT2 weights) on speech
        folder = tiny_en()
        clip = speech_clip(tmp_path, "Please call Stella and ask her to bring these things with her from the store.",
                           "stella")
        greedy = dict(temperature=0.0, compression_ratio_threshold=None, logprob_threshold=None,
                      no_speech_threshold=None)

        def run(device):
            model, _, tok = load_whisper(folder, device=device, dtype=ember.float16)
            r = transcribe(model, tok, clip, **greedy)
            return [t for s in r["segments"] for t in s["tokens"]], r["text"]
        want, text = run("cpu")
        assert "stella" in text.lower()
        assert run("webgpu")[0] == want
        return
    folder = make_random_folder(tmp_path, max_length=20, seed=3)
    mel = np.random.default_rng(7).standard_normal((80, 600)).astype(np.float32)   # 6 s: a short encoder pass
    tokens = {}
    for device in ("cpu", "webgpu"):
        model, _, tok = load_whisper(folder, device=device, dtype=ember.float16)
        tokens[device] = transcribe_features(model, tok, mel)["segments"][0]["tokens"]
    assert tokens["webgpu"] == tokens["cpu"]
