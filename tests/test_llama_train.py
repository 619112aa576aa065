"""Llama training with ember's autograd: one step's gradients equal torch's for the same HF model, and a
tiny run learns a repetitive token stream."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.llama import names
from ember.models.llama.config import LlamaConfig
from ember.models.llama.model import Llama
from ember.models.llama.train import init_weights, lm_loss, train

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("gqa", [False, True])
def test_gradients_match_torch(gqa):
    torch.manual_seed(0)
    hc = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2 if gqa else 4,
                                  max_position_embeddings=32, rms_norm_eps=1e-5, tie_word_embeddings=gqa,
                                  attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(hc)
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    c = LlamaConfig.from_hf(hc.to_dict())
    m = Llama(c)
    m.load_state_dict(names.from_hf({k: ember.tensor(v.detach().numpy()) for k, v in hf.state_dict().items()}, c))
    ids = np.random.default_rng(0).integers(0, 61, (3, 11))
    out = hf(torch.tensor(ids[:, :-1]), labels=None).logits
    loss_t = torch.nn.functional.cross_entropy(out.reshape(-1, 61), torch.tensor(ids[:, 1:]).reshape(-1))
    loss_t.backward()
    loss_e = lm_loss(m, ember.tensor(ids[:, :-1]), ember.tensor(ids[:, 1:]))
    loss_e.backward()
    assert abs(loss_e.item() - loss_t.item()) < 1e-5
    grads = names.to_hf({k: p.grad for k, p in m.named_parameters()}, c)
    ref = {k: p.grad.numpy() for k, p in hf.named_parameters()}
    assert set(grads) == set(ref)
    for k, g in grads.items():
        scale = np.abs(ref[k]).max()
        np.testing.assert_allclose(g.numpy(), ref[k], atol=1e-5 * max(scale, 1e-3), rtol=0, err_msg=k)


def test_tiny_run_learns():
    c = LlamaConfig(vocab_size=16, dim=32, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, max_seq_len=32,
                    tie_embeddings=True)
    m = Llama(c)
    init_weights(m, seed=0)
    tokens = np.tile(np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int64), 64)    # period 8: fully predictable
    losses = train(m, tokens, steps=60, batch=8, seq=16, lr=1e-2, warmup=5, seed=0)
    assert losses[0] > 2.0                      # ~ln(16) at init
    assert np.mean(losses[-5:]) < 0.3, losses[-10:]


def test_train_llama_cli_writes_a_loadable_checkpoint(tmp_path):
    """`ember train-llama` on a small corpus: the checkpoint, config and tokenizer it writes load back."""
    pytest.importorskip("tokenizers")
    import json

    from ember.cli import main as cli_main
    from ember.models.llama.corpus import train_tokenizer
    from ember.models.llama.load import load_llama
    text = "The pass statement is a null operation. It is useful as a placeholder.\n" * 40
    (tmp_path / "corpus.txt").write_text(text)
    (tmp_path / "tokenizer.json").write_text(train_tokenizer(text, vocab_size=300))
    out = tmp_path / "out"
    rc = cli_main(["train-llama", "--data", str(tmp_path), "--out", str(out), "--dim", "32", "--layers", "1",
                   "--heads", "2", "--kv-heads", "1", "--hidden", "64", "--seq", "16", "--batch", "4", "--steps", "30",
                   "--lr", "1e-2", "--save-every", "0", "--log", str(tmp_path / "log.jsonl"), "--dtype", "float32"])
    assert rc == 0
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(log) == 30 and log[-1]["loss"] < log[0]["loss"] - 1.0
    model, tok = load_llama(str(out))
    assert model.config.n_kv_heads == 1 and tok.decode(tok.encode("The pass statement")) == "The pass statement"


def test_train_llama_on_webgpu_follows_cpu(tmp_path):
    """`ember train-llama --device webgpu`: the batches go to the model's device (Trainer), and the first
    steps' losses follow the cpu run's from the same seed (float32 on both; the GPU sums in another order)."""
    pytest.importorskip("tokenizers")
    import json

    from ember.cli import main as cli_main
    from ember.device import device_status
    from ember.models.llama.corpus import train_tokenizer
    from expected_skips import missing
    if not device_status("webgpu")[0]:
        missing(f"webgpu: {device_status('webgpu')[1]}")
    text = "Simple is better than complex. Flat is better than nested.\n" * 30
    (tmp_path / "corpus.txt").write_text(text)
    (tmp_path / "tokenizer.json").write_text(train_tokenizer(text, vocab_size=200))
    logs = {}
    for dev in ("cpu", "webgpu"):
        log = tmp_path / f"{dev}.jsonl"
        rc = cli_main(["train-llama", "--data", str(tmp_path), "--out", str(tmp_path / dev), "--dim", "32",
                       "--layers", "1", "--heads", "2", "--kv-heads", "1", "--hidden", "64", "--seq", "16",
                       "--batch", "4", "--steps", "6", "--lr", "1e-2", "--save-every", "0", "--log", str(log),
                       "--dtype", "float32", "--device", dev])
        assert rc == 0
        logs[dev] = [json.loads(line)["loss"] for line in log.read_text().splitlines()]
    np.testing.assert_allclose(logs["webgpu"], logs["cpu"], rtol=2e-3)
    from ember.models.llama.load import load_llama
    assert load_llama(str(tmp_path / "webgpu"))[0].config.dim == 32
