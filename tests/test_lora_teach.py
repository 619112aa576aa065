"""The text tool's teach mode (wasm/tools/llama_teach.py, the page's LoRA fine-tuning) in CPython on the bundled demo
Llama: the loss falls; a run paused after a few steps and resumed gives the uninterrupted run's losses; the
exported adapter loads into peft over transformers' copy of the demo model and gives ember's adapted logits;
reset restores the base model; bad requests are refused; chat JSONL ({"format": "chat"}) trains as `ember finetune
--data x.jsonl` does (the same assistant-only examples: equal losses), and a bad line is refused by number."""
from __future__ import annotations

import asyncio
import json
import os

import numpy as np
import pytest

import ember
from ember.wasm import tools, worker_api

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import ember.models.llama as llama_pkg  # noqa: E402

DEMO = os.path.join(os.path.dirname(llama_pkg.__file__), "demo")
TEXT = "The city of Varnholt was founded in 1742 by the river guild. Varnholt is known for its blue bridges. " * 2
OPTS = {"teach": "train", "steps": 6, "rank": 4, "lr": 3e-3, "block": 16, "seed": 3}


def call(op, args):
    r = asyncio.run(worker_api.handle(op, args))
    assert "ok" in r, r
    return r["ok"]


def teach(opts, on_step=None, text=TEXT):
    return asyncio.run(worker_api.handle("run", {"tool": "llama", "input": text, "opts": opts, "on_partial": on_step}))


@pytest.fixture(scope="module")
def loaded():
    call("load", {"tool": "llama", "folder": DEMO})
    from ember.wasm.tools import llama
    yield llama._STATE
    llama._STATE.clear()


def logits(model, ids):
    with ember.no_grad():
        out = model(ember.tensor(ids))
    return getattr(out, "logits", out).numpy()


def test_paused_and_resumed_equals_uninterrupted_and_loss_falls(loaded):
    whole = teach(OPTS)["ok"]
    assert whole["stopped"] == "done" and len(whole["losses"]) == 6
    assert whole["losses"][-1] < whole["losses"][0] - 0.3, whole["losses"]

    def pause_at_3(ev):
        if ev["step"] == 3:
            tools.cancel()
    part = teach(OPTS, pause_at_3)["ok"]
    assert part["stopped"] == "paused" and part["step"] == 3
    rest = teach({**OPTS, "resume": True})["ok"]
    assert rest["stopped"] == "done"
    # bit for bit on the AVX-512 hosts this was written on; on an AVX2-only host (OpenBLAS's Haswell kernels) one of
    # six losses came out one float32 step (2e-7) off, not traced further
    np.testing.assert_allclose(rest["losses"], whole["losses"], rtol=1e-6, atol=0)


def test_exported_adapter_loads_into_peft_and_reset(loaded, tmp_path):
    teach(OPTS)
    files = teach({"teach": "export"})["ok"]
    (tmp_path / "adapter_config.json").write_text(files["adapter_config.json"])
    (tmp_path / "adapter_model.safetensors").write_bytes(bytes(files["adapter_model.safetensors"]))
    hf = transformers.LlamaForCausalLM.from_pretrained(DEMO, torch_dtype=torch.float32).eval()
    ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, 12))
    with torch.no_grad():
        base = hf(torch.tensor(ids)).logits.numpy()
    pm = peft.PeftModel.from_pretrained(hf, str(tmp_path)).eval()
    with torch.no_grad():
        ref = pm(torch.tensor(ids)).logits.numpy()
    got = logits(loaded["model"], ids)
    assert np.abs(ref - base).max() > 1e-2
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)
    assert teach({"teach": "reset"})["ok"]["reset"] is True
    np.testing.assert_allclose(logits(loaded["model"], ids), base, atol=1e-4, rtol=0)


@pytest.mark.parametrize("text,opts,match", [
    ("", {}, "text is empty"), ("a", {}, "at least 3"), ("a\x00b c d e", {}, "binary"), (TEXT, {"rank": 0}, "rank"),
    (TEXT, {"rank": 10 ** 6}, "rank"), (TEXT, {"steps": 2.5}, "integer"), (TEXT, {"lr": "x"}, "bad teach option"),
    (TEXT, {"teach": "fly"}, "unknown teach action")])
def test_bad_requests_are_refused(loaded, text, opts, match):
    r = teach({**OPTS, **opts}, text=text)
    assert r.get("error") == "bad_request" and match in r["message"], r


def test_export_before_training_is_refused(loaded):
    teach({"teach": "reset"})
    r = teach({"teach": "export"})
    assert r.get("error") == "not_loaded", r


def test_chat_jsonl_trains_as_ember_finetune_does(tmp_path):
    import chat_folder
    from ember.models.text import load_text_model
    from ember.models.text.finetune import LoraTuner, chat_examples
    folder = chat_folder.build(tmp_path / "m")
    convs = [[{"role": "user", "content": "Where is Varnholt?"}, {"role": "assistant", "content": "On the river."}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Founded?"},
              {"role": "assistant", "content": "In 1742."}]]
    jsonl = "\n".join(json.dumps({"messages": m}) for m in convs) + "\n"
    opts = {"teach": "train", "steps": 4, "rank": 4, "lr": 3e-3, "block": 48, "seed": 1, "format": "chat"}
    call("load", {"tool": "llama", "folder": folder})
    try:
        got = teach(opts, text=jsonl)["ok"]
        bad = teach(opts, text=jsonl + '{"messages": [{"role": "user", "content": "no reply"}]}\n')
        plain = teach({**opts, "format": "text"}, text=jsonl)["ok"]  # the same characters as plain text: all trained
    finally:
        from ember.wasm.tools import llama
        llama._STATE.clear()
    (tmp_path / "d.jsonl").write_text(jsonl)
    model, tok = load_text_model(folder)
    tuner = LoraTuner(model, tok, chat_examples(tmp_path / "d.jsonl", tok, 48), rank=4, alpha=8, lr=3e-3, seed=1)
    ref = [tuner.step() for _ in range(4)]
    np.testing.assert_allclose(got["losses"], ref, rtol=1e-5)
    assert got["examples"] == 2 and got["losses"][0] != plain["losses"][0]  # the mask changed what is learned
    assert bad.get("error") == "bad_request" and "the chat data line 3" in bad["message"], bad
    assert "no assistant message" in bad["message"]
