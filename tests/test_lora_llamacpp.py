"""LoRA adapters as llama.cpp GGUF adapter files (models/common/lora_gguf.py) against llama.cpp itself
(llama-cpp-python's lora_path=): on a tiny random Llama GGUF (float32, convert_hf_to_gguf's layout: q/k rows
interleaved), ember's exported adapter moves llama.cpp's logits by the delta it moves ember's, and greedy tokens
agree; the file reads back into ember with the same weights."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.common.lora_gguf import load_gguf_adapter, save_gguf_adapter
from ember.models.llama.gguf import GGUF as LLAMA_GGUF
from ember.models.llama.load import load_llama
from ember.train import lora

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

from gguf_reference import tiny_llama  # noqa: E402
from test_llama_gguf import _tokenizer, _write  # noqa: E402
from test_llama_llamacpp import GGML_TYPE_F32, _greedy_llamacpp  # noqa: E402

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tok = _tokenizer()
    hf = tiny_llama(tok.get_vocab_size())
    path = tmp_path_factory.mktemp("lora-llamacpp") / "tiny-f32.gguf"
    _write(path, hf, tok, "f32")
    return path


def _llamacpp(path, adapter=None):
    kw = {"lora_path": str(adapter)} if adapter else {}
    return llama_cpp.Llama(str(path), n_ctx=64, n_threads=1, logits_all=True, verbose=False, seed=0,
                           type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, **kw)


def test_gguf_adapter_moves_llamacpp_as_ember(base, tmp_path):
    model, _ = load_llama(str(base))
    lora.add_adapters(model, lora.LoraConfig(r=4, lora_alpha=6, target_modules=ALL), seed=0)
    rng = np.random.default_rng(1)
    with ember.no_grad():
        for p in lora.lora_parameters(model):
            p.copy_(rng.normal(0, 0.15, p.shape).astype(np.float32))
    adapter = tmp_path / "adapter.gguf"
    save_gguf_adapter(model, adapter, LLAMA_GGUF)
    prompt = [0, 5, 17, 33, 8, 21, 40, 2, 9]
    with ember.no_grad():
        ours = model(ember.tensor(np.array([prompt]))).logits.numpy()[0]
        lora.unload(model)
        ours_base = model(ember.tensor(np.array([prompt]))).logits.numpy()[0]
    plain, adapted = _llamacpp(base), _llamacpp(base, adapter)
    plain.eval(prompt)
    adapted.eval(prompt)
    theirs_base = np.array(plain.scores[:len(prompt)])
    theirs = np.array(adapted.scores[:len(prompt)])
    delta = ours - ours_base
    assert np.abs(delta).max() > 0.5                      # the adapter moves the logits well above the tolerance
    np.testing.assert_allclose(theirs_base, ours_base, atol=1e-3, rtol=0)
    np.testing.assert_allclose(theirs - theirs_base, delta, atol=2e-3, rtol=0)
    print(f"\nllama.cpp vs ember: adapter delta up to {np.abs(delta).max():.3f}, differs by "
          f"{np.abs((theirs - theirs_base) - delta).max():.2e}")
    # greedy continuation with the adapter: llama.cpp's tokens are ember's
    load_gguf_adapter(model, adapter, LLAMA_GGUF)          # and the file reads back
    from ember.models.common.generate import SamplingParams, generate
    ref = _greedy_llamacpp(adapted, prompt, 16)
    got = list(generate(model, prompt, 16, SamplingParams(temperature=0)))
    assert got == ref[:len(got)] and len(got) >= 8, (got, ref)


def test_gguf_adapter_refusals(base, tmp_path):
    model, _ = load_llama(str(base))
    with pytest.raises(lora.AdapterError, match="no LoRA adapters"):
        save_gguf_adapter(model, tmp_path / "none.gguf", LLAMA_GGUF)
    with pytest.raises(lora.AdapterError, match="not a LoRA adapter"):
        load_gguf_adapter(model, base, LLAMA_GGUF)       # a model file, not an adapter
    wide = tmp_path / "wide.gguf"
    from ember.io import gguf
    gguf.save({f"blk.{i}.attn_q.weight.lora_{ab}": np.zeros((4, 32) if ab == "a" else (64, 4), np.float32)
               for i in range(2) for ab in "ab"}, wide,  # in=32: the model's q_proj takes 64
              metadata={"general.architecture": "llama", "general.type": "adapter", "adapter.type": "lora",
                        "adapter.lora.alpha": np.float32(4)})
    with pytest.raises(lora.AdapterError, match="shape"):
        load_gguf_adapter(model, wide, LLAMA_GGUF)
    assert not lora.lora_layers(model)


def test_finetune_writes_a_gguf_adapter_llamacpp_loads(base, tmp_path, capsys):
    """`ember finetune` on a GGUF model writes adapter.gguf beside PEFT's files; llama.cpp with it continues a
    prompt greedily as `ember generate --adapter adapter.gguf` does."""
    import json

    from ember.cli import main as cli_main
    (tmp_path / "data.txt").write_text("the quick brown fox jumps over the lazy dog. " * 6)
    out = tmp_path / "adapter"
    assert cli_main(["finetune", "--model", str(base), "--data", str(tmp_path / "data.txt"), "--out", str(out),
                     "--rank", "4", "--steps", "3", "--lr", "1e-2", "--block", "16"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["adapter.gguf", "adapter_config.json", "adapter_model.safetensors"]
    capsys.readouterr()
    assert cli_main(["generate", "the quick brown", "--model", str(base), "--adapter", str(out / "adapter.gguf"),
                     "-n", "12", "--activations", "float32", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ref = _greedy_llamacpp(_llamacpp(base, out / "adapter.gguf"), got["prompt_tokens"], 12)
    assert got["tokens"] == ref[:len(got["tokens"])] and len(got["tokens"]) >= 6, (got["tokens"], ref)
