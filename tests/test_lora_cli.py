"""`ember finetune` on the bundled demo Llama: writes a PEFT-layout adapter whose losses fall, which peft loads over
transformers' copy of the model with the logits ember gives after load_adapter; bad data and ranks are refused."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ember
import ember.models.llama as llama_pkg
from ember.cli import main as cli_main
from ember.train import lora

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

DEMO = os.path.join(os.path.dirname(llama_pkg.__file__), "demo")
TEXT = "The city of Varnholt was founded in 1742 by the river guild. Varnholt is known for its blue bridges. " * 3


def test_finetune_writes_an_adapter_peft_loads(tmp_path, capsys):
    (tmp_path / "data.txt").write_text(TEXT)
    out = tmp_path / "adapter"
    rc = cli_main(["finetune", "--model", DEMO, "--data", str(tmp_path / "data.txt"), "--out", str(out),
                   "--rank", "4", "--steps", "6", "--lr", "3e-3", "--block", "16", "--seed", "1"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 6 and summary["last_loss"] < summary["first_loss"] - 0.3, summary
    from ember.models.text import load_text_model
    model, _ = load_text_model(DEMO, activations="float32")
    lora.load_adapter(model, out)
    hf = transformers.LlamaForCausalLM.from_pretrained(DEMO, torch_dtype=torch.float32).eval()
    pm = peft.PeftModel.from_pretrained(hf, str(out)).eval()
    ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, 10))
    with torch.no_grad():
        ref = pm(torch.tensor(ids)).logits.numpy()
        with pm.disable_adapter():
            base = pm(torch.tensor(ids)).logits.numpy()
    with ember.no_grad():
        got = model(ember.tensor(ids))
    assert np.abs(ref - base).max() > 1e-2
    np.testing.assert_allclose(getattr(got, "logits", got).numpy(), ref, atol=1e-4, rtol=0)
    # `ember generate --adapter` continues greedily as peft + transformers do
    prompt = "The city of Varnholt was"
    rc = cli_main(["generate", prompt, "--model", DEMO, "--adapter", str(out), "-n", "10", "--activations", "float32",
                   "--json"])
    assert rc == 0
    gen = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with torch.no_grad():
        want = pm.generate(input_ids=torch.tensor([gen["prompt_tokens"]]), max_new_tokens=10, do_sample=False)
    assert gen["tokens"] == want[0, len(gen["prompt_tokens"]):].tolist()[:len(gen["tokens"])], gen["text"]


@pytest.mark.parametrize("data,args,match", [(b"\x00\x01binary\x00" * 20, [], "binary"),
                                             (b"\xff\xfe\xfa not utf-8", [], "not UTF-8"),
                                             (b"", [], "empty"), (TEXT.encode(), ["--rank", "1000000"], "rank")])
def test_finetune_refuses_bad_input(tmp_path, capsys, data, args, match):
    (tmp_path / "data.txt").write_bytes(data)
    rc = cli_main(["finetune", "--model", DEMO, "--data", str(tmp_path / "data.txt"), "--out", str(tmp_path / "a"),
                   "--steps", "1", *args])
    assert rc == 1 and match in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
