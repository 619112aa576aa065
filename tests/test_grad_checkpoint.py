"""Gradient checkpointing (ember.nn.checkpoint; CausalLM.gradient_checkpointing recomputes each decoder block in
backward): on tiny random Llamas built with transformers, the loss and every adapter gradient with checkpointing
equal those without (1e-6 relative; with LoRA dropout too: the recompute draws the same mask), and both equal
torch + peft's on the same weights; full-parameter training (embeddings and all) likewise against transformers;
LoraTuner with checkpointing trains step for step as without."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.nn import checkpoint
from ember.nn import functional as F
from ember.train import lora
from test_lora import ALL, VOCAB, ember_llama, hf_llama, ids_batch, peft_model

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def loss_and_grads(m, ids, device, params):
    m.train()
    x, y = ember.tensor(ids[:, :-1], device=device), ember.tensor(ids[:, 1:], device=device)
    out = m(x)
    logits = getattr(out, "logits", out)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    for p in params:
        p.grad = None
    loss.backward()
    return loss.item(), [p.grad.numpy() for p in params]


def assert_same(a, b, rtol=1e-6):
    assert abs(a[0] - b[0]) <= rtol * abs(b[0]), (a[0], b[0])
    for g1, g2 in zip(a[1], b[1]):
        scale = np.abs(g2).max()
        assert scale > 0 and np.abs(g1 - g2).max() <= rtol * scale, (np.abs(g1 - g2).max(), scale)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_lora_gradients_with_checkpointing_equal_without(tmp_path, device, dropout):
    hf = hf_llama(seed=7)
    m = ember_llama(hf, device)
    pm = peft_model(hf, ALL, seed=2)  # B random: A's gradients are not zero
    pm.save_pretrained(tmp_path)
    lora.load_adapter(m, tmp_path)
    for _, layer in lora.lora_layers(m):
        layer.dropout = dropout
    named = lora.adapter_tensors(m)  # {peft name: parameter}
    params = list(named.values())
    ids = ids_batch(3, (2, 17))
    ember.manual_seed(11)
    plain = loss_and_grads(m, ids, device, params)
    m.gradient_checkpointing = True
    ember.manual_seed(11)
    ckpt = loss_and_grads(m, ids, device, params)
    assert_same(ckpt, plain)
    if dropout:
        return
    pm.train()
    out = pm(torch.tensor(ids[:, :-1])).logits
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), torch.tensor(ids[:, 1:]).reshape(-1))
    loss.backward()
    ref = {k.replace(".default", ""): p.grad.numpy() for k, p in pm.named_parameters() if p.requires_grad}
    assert abs(ckpt[0] - loss.item()) <= 1e-5 * loss.item()
    for k, g in zip(named, ckpt[1]):
        np.testing.assert_allclose(g, ref[k], atol=1e-5 * np.abs(ref[k]).max(), rtol=0, err_msg=k)


def test_full_training_gradients_with_checkpointing(device):
    """Every parameter trains (the embedding too, so the blocks' inputs need gradients): equal with and without,
    and equal to transformers' gradients."""
    hf = hf_llama(seed=8, tie=True)
    m = ember_llama(hf, device)
    names = [n for n, _ in m.named_parameters()]
    params = [p for _, p in m.named_parameters()]
    ids = ids_batch(4, (2, 15))
    plain = loss_and_grads(m, ids, device, params)
    m.gradient_checkpointing = True
    ckpt = loss_and_grads(m, ids, device, params)
    assert_same(ckpt, plain)
    hf.train()
    out = hf(torch.tensor(ids[:, :-1])).logits
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), torch.tensor(ids[:, 1:]).reshape(-1))
    loss.backward()
    ref = {n: p.grad.numpy() for n, p in hf.named_parameters()}
    assert abs(ckpt[0] - loss.item()) <= 1e-5 * loss.item()
    emb = names.index("model.embed_tokens.weight") if "model.embed_tokens.weight" in names else None
    assert emb is not None and np.abs(ckpt[1][emb] - ref["model.embed_tokens.weight"]).max() <= \
        1e-4 * np.abs(ref["model.embed_tokens.weight"]).max()


def test_checkpoint_function():
    """Outside training it is the plain call; a module returning no Tensor is refused; gradients reach both the
    input and the module's parameters."""
    lin = ember.nn.Linear(4, 3)
    x = ember.randn(2, 4, requires_grad=True)
    with ember.no_grad():
        assert checkpoint(lin, x)._ctx is None
    y = checkpoint(lin, x)
    (y * y).sum().backward()
    gx, gw = x.grad.numpy(), lin.weight.grad.numpy()
    x2 = x.detach().requires_grad_()
    lin.weight.grad = None
    (lin(x2) * lin(x2)).sum().backward()
    np.testing.assert_allclose(gx, x2.grad.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gw, lin.weight.grad.numpy(), rtol=1e-6, atol=1e-7)

    class Pair(ember.nn.Module):
        def forward(self, x):
            return x, x
    with pytest.raises(TypeError, match="returns one Tensor"):
        checkpoint(Pair(), x)


def test_tuner_with_checkpointing_trains_as_without():
    from ember.models.text.finetune import LoraTuner
    hf = hf_llama(seed=9)

    class Tok:
        chat_template = None

        def encode(self, text, bos=True, special=False):
            return [1] * bos + [ord(c) % VOCAB for c in text]
    text = "the quick brown fox jumps over the lazy dog " * 4
    runs = []
    for ck in (False, True):
        t = LoraTuner(ember_llama(hf), Tok(), text, rank=2, lr=1e-2, block=24, seed=0, checkpointing=ck)
        runs.append([t.step() for _ in range(4)])
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-6, atol=0)
    assert runs[0][-1] < runs[0][0]
