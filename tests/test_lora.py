"""LoRA (ember.train.lora) against peft on tiny random Llamas built in the test: adapters peft saves load into
ember and give peft's logits; ember's saved adapters load into peft and give ember's; training the adapters with
AdamW matches torch + peft step for step (loss and weights, float32); merge/unmerge; quantized base layers;
bad configs and adapters raise AdapterError."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.models.llama.config import LlamaConfig
from ember.models.llama.names import from_hf_state_dict
from ember.train import lora

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VOCAB = 61


def hf_llama(seed=0, tie=False):
    torch.manual_seed(seed)
    hc = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                  tie_word_embeddings=tie, attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(hc)
    with torch.no_grad():  # unit norms hide norm bugs
        for n, p in hf.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    return hf


def ember_llama(hf, device="cpu"):
    c = LlamaConfig.from_hf(hf.config.to_dict())
    return from_hf_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in hf.state_dict().items()}, c).to(device)


def peft_model(hf, targets=ALL, r=4, alpha=8, rslora=False, randomize_b=True, seed=1):
    torch.manual_seed(seed)
    pm = peft.get_peft_model(hf, peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0,
                                                 use_rslora=rslora, task_type="CAUSAL_LM"))
    if randomize_b:  # peft starts B at zero; a non-zero B makes the adapters show in the logits
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.1)
    return pm


def random_adapters(model, seed, std):
    """Every adapter weight of `model` drawn from N(0, std) by one seeded generator, in lora_parameters' order (a
    non-zero B makes the adapters show in the logits)."""
    rng = np.random.default_rng(seed)
    with ember.no_grad():
        for p in lora.lora_parameters(model):
            p.copy_(rng.normal(0, std, p.shape).astype(np.float32))
    return model


def logits(m, ids, device="cpu"):
    with ember.no_grad():
        out = m(ember.tensor(ids, device=device))
    return getattr(out, "logits", out).numpy()


def ids_batch(seed=0, shape=(3, 11)):
    return np.random.default_rng(seed).integers(0, VOCAB, shape)


@pytest.mark.parametrize("targets,rslora", [(ALL, False), (["q_proj", "v_proj", "up_proj"], True)])
def test_peft_adapter_loads_and_gives_peft_logits(tmp_path, device, targets, rslora):
    hf = hf_llama()
    m = ember_llama(hf, device)  # before peft wraps hf's layers in place
    pm = peft_model(hf, targets, rslora=rslora)
    pm.save_pretrained(tmp_path)
    lora.load_adapter(m, tmp_path)
    ids = ids_batch()
    with torch.no_grad():
        ref = pm(torch.tensor(ids)).logits.numpy()
        base = pm.get_base_model()
        with pm.disable_adapter():
            ref_base = base(torch.tensor(ids)).logits.numpy()
    assert np.abs(ref - ref_base).max() > 1e-2  # the adapter changes the logits
    np.testing.assert_allclose(logits(m, ids, device), ref, atol=2e-5, rtol=0)
    assert len(lora.lora_parameters(m)) == 2 * len(targets) * 2
    assert all(p.requires_grad == any(p is q for q in lora.lora_parameters(m)) for p in m.parameters())


def test_ember_adapter_loads_into_peft(tmp_path):
    hf = hf_llama(seed=3)
    m = lora.add_adapters(ember_llama(hf), lora.LoraConfig(r=4, lora_alpha=16, target_modules=["k_proj", "o_proj",
                                                                                                 "down_proj"]), seed=0)
    random_adapters(m, 5, 0.2)
    lora.save_adapter(m, tmp_path, base_model_name_or_path="tiny-llama")
    cfg = json.loads((tmp_path / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 16
    pm = peft.PeftModel.from_pretrained(hf, str(tmp_path))
    loaded = {k.replace(".default", ""): v for k, v in pm.state_dict().items() if "lora_" in k}
    mine = {k: p.numpy() for k, p in lora.adapter_tensors(m).items()}
    assert set(loaded) == set(mine)
    for k, v in mine.items():
        np.testing.assert_array_equal(loaded[k].numpy(), v, err_msg=k)
    ids = ids_batch(1)
    with torch.no_grad():
        ref = pm(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(logits(m, ids), ref, atol=2e-5, rtol=0)


def test_training_matches_torch_peft_step_for_step(tmp_path, device):
    """20 AdamW steps on the same batches from the same adapter init (peft's, saved and loaded into ember): the
    loss at every step within 1e-4 relative, every adapter weight within 1e-4 after them."""
    hf = hf_llama(seed=2)
    m = ember_llama(hf, device)
    pm = peft_model(hf, ALL, randomize_b=False, seed=4)
    pm.save_pretrained(tmp_path)
    lora.load_adapter(m, tmp_path)
    batches = [ids_batch(10 + i % 2, (2, 13)) for i in range(20)]  # two batches in turn: learnable
    lr, wd = 5e-3, 0.01
    opt_t = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=lr, weight_decay=wd)
    opt_e = ember.optim.AdamW(lora.lora_parameters(m), lr=lr, weight_decay=wd)
    pm.train()
    m.train()
    losses_t, losses_e = [], []
    for ids in batches:
        out = pm(torch.tensor(ids[:, :-1])).logits
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), torch.tensor(ids[:, 1:]).reshape(-1))
        opt_t.zero_grad()
        loss.backward()
        opt_t.step()
        losses_t.append(loss.item())
        x, y = ember.tensor(ids[:, :-1], device=device), ember.tensor(ids[:, 1:], device=device)
        out = m(x)
        out = getattr(out, "logits", out)
        loss_e = ember.nn.functional.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))
        opt_e.zero_grad()
        loss_e.backward()
        opt_e.step()
        losses_e.append(loss_e.item())
    np.testing.assert_allclose(losses_e, losses_t, rtol=1e-4, atol=0)
    assert losses_t[-1] < losses_t[0] - 0.05  # the adapters learned something
    ref = {k.replace(".default", ""): v.detach().numpy() for k, v in pm.state_dict().items() if "lora_" in k}
    mine = {k: p.numpy() for k, p in lora.adapter_tensors(m).items()}
    assert set(ref) == set(mine)
    for k, v in mine.items():
        np.testing.assert_allclose(v, ref[k], atol=1e-4, rtol=0, err_msg=k)


def test_merge_unmerge_and_unload(device):
    hf = hf_llama(seed=5, tie=True)
    m = lora.add_adapters(ember_llama(hf, device), lora.LoraConfig(r=2, lora_alpha=4, target_modules=ALL), seed=1)
    with ember.no_grad():
        for p in lora.lora_parameters(m):
            p.copy_(np.random.default_rng(p.numel()).normal(0, 0.2, p.shape).astype(np.float32))
    ids = ids_batch(2)
    base_w = m.model.layers[1].mlp.gate_up_proj.base_layer.weight.numpy().copy()
    adapted = logits(m, ids, device)
    lora.merge(m)
    merged_w = m.model.layers[1].mlp.gate_up_proj.base_layer.weight.numpy()
    assert np.abs(merged_w - base_w).max() > 1e-3
    np.testing.assert_allclose(logits(m, ids, device), adapted, atol=2e-5, rtol=0)
    lora.unmerge(m)
    np.testing.assert_allclose(m.model.layers[1].mlp.gate_up_proj.base_layer.weight.numpy(), base_w, atol=1e-6)
    np.testing.assert_allclose(logits(m, ids, device), adapted, atol=2e-5, rtol=0)
    with torch.no_grad():
        ref_base = hf(torch.tensor(ids)).logits.numpy()
    lora.merge_and_unload(m)
    assert not lora.lora_layers(m)
    np.testing.assert_allclose(logits(m, ids, device), adapted, atol=2e-5, rtol=0)
    m2 = lora.add_adapters(ember_llama(hf, device), lora.LoraConfig(target_modules=["q_proj"]))
    np.testing.assert_allclose(logits(m2, ids, device), ref_base, atol=2e-5, rtol=0)  # B = 0: the base model
    lora.unload(m2)
    assert not lora.lora_layers(m2) and all(p.requires_grad is False for p in m2.parameters())


def test_quantized_base_matches_peft_on_dequantized_weights(tmp_path):
    """QLoRA: the base projections stay Q8_0 QLinear layers; peft on the same dequantized weights gives the same
    logits and the same adapter gradients."""
    hf = hf_llama(seed=6)
    m = ember_llama(hf)
    ember.quantize(m.model, "q8_0")
    assert type(m.model.layers[0].self_attn.qkv_proj).__name__ == "QLinear"
    sd = {}  # the quantized weights, dequantized, in HF names
    from ember.models.llama.names import to_hf
    deq = {}
    for name, mod in m.named_modules():
        if type(mod).__name__ == "QLinear":
            deq[f"{name}.weight"] = ember.tensor(mod.weight.dequantize().numpy())
    sd = {k: torch.tensor(v.numpy()) for k, v in to_hf(deq, m.config).items()}
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if n in sd:
                p.copy_(sd[n])
    pm = peft_model(hf, ALL)
    pm.save_pretrained(tmp_path)
    lora.load_adapter(m, tmp_path)
    assert type(m.model.layers[0].self_attn.qkv_proj.base_layer).__name__ == "QLinear"
    ids = ids_batch(3)
    out = pm(torch.tensor(ids[:, :-1])).logits
    torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), torch.tensor(ids[:, 1:]).reshape(-1)).backward()
    o = m(ember.tensor(ids[:, :-1]))
    o = getattr(o, "logits", o)
    np.testing.assert_allclose(o.detach().numpy(), out.detach().numpy(), atol=2e-5, rtol=0)
    ember.nn.functional.cross_entropy(o.reshape(-1, VOCAB), ember.tensor(ids[:, 1:]).reshape(-1)).backward()
    ref = {k.replace(".default", ""): p.grad.numpy() for k, p in pm.named_parameters() if p.requires_grad}
    for k, p in lora.adapter_tensors(m).items():
        scale = max(np.abs(ref[k]).max(), 1e-3)
        np.testing.assert_allclose(p.grad.numpy(), ref[k], atol=1e-5 * scale, rtol=0, err_msg=k)
    before = m.model.layers[0].self_attn.qkv_proj.base_layer.weight
    lora.merge(m)  # re-quantized in its type; unmerge restores the original blocks
    assert m.model.layers[0].self_attn.qkv_proj.base_layer.weight is not before
    lora.unmerge(m)
    assert m.model.layers[0].self_attn.qkv_proj.base_layer.weight is before


@pytest.mark.parametrize("field,value", [("r", 0), ("r", 10 ** 6), ("r", 2.5), ("lora_alpha", float("nan")),
                                         ("lora_dropout", 1.0), ("target_modules", []), ("target_modules", "(")])
def test_bad_config_raises(field, value):
    with pytest.raises(lora.AdapterError, match=field if field != "r" else "rank"):
        lora.LoraConfig(**{field: value})


def test_bad_adapters_raise(tmp_path):
    hf = hf_llama()
    with pytest.raises(lora.AdapterError, match="match no linear layer"):
        lora.add_adapters(ember_llama(hf), lora.LoraConfig(target_modules=["nothing_here"]))
    with pytest.raises(lora.AdapterError, match="exceeds the layer"):
        lora.add_adapters(ember_llama(hf), lora.LoraConfig(r=40, target_modules=["q_proj"]))
    # an adapter trained for a wider model: shapes do not fit
    wide = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32))
    peft_model(wide, ["q_proj"]).save_pretrained(tmp_path / "wide")
    with pytest.raises(lora.AdapterError, match="has shape"):
        lora.load_adapter(ember_llama(hf), tmp_path / "wide")
    # one more layer than the model has: unexpected tensors
    deep = hf_llama()
    deep = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**hf.config.to_dict(), "num_hidden_layers": 3}))
    peft_model(deep, ["q_proj"]).save_pretrained(tmp_path / "deep")
    with pytest.raises(lora.AdapterError, match="unexpected"):
        lora.load_adapter(ember_llama(hf), tmp_path / "deep")
    for name, text in [("notjson", "{"), ("list", "[1]"), ("prefix", json.dumps({"peft_type": "PREFIX_TUNING"})),
                       ("dora", json.dumps({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"],
                                            "use_dora": True})),
                       ("rank", json.dumps({"peft_type": "LORA", "r": -1, "target_modules": ["q_proj"]})),
                       ("big", " " * (2 << 20))]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(text)
        with pytest.raises(lora.AdapterError, match="adapter_config.json"):
            lora.load_adapter(ember_llama(hf), tmp_path / name)
    with pytest.raises(lora.AdapterError, match="cannot read"):
        lora.load_adapter(ember_llama(hf), tmp_path / "absent")


def test_cached_decode_after_adding_adapters_uses_them():
    """A decode step builds the fused decoder's plan from the plain projections; once adapters wrap them the next
    cached step must run them (the plan is rebuilt or refused), giving the full forward's last logits."""
    hf = hf_llama(seed=7)
    m = ember_llama(hf).eval()
    ids = ids_batch(4, (1, 9))
    with ember.no_grad():
        cache = m.new_cache()
        m(ember.tensor(ids[:, :7]), cache)
        m(ember.tensor(ids[:, 7:8]), cache)                                    # one-token step: the plan is built
    lora.add_adapters(m, lora.LoraConfig(r=2, lora_alpha=4, target_modules=ALL), seed=0)
    with ember.no_grad():
        for p in lora.lora_parameters(m):
            p.copy_(np.random.default_rng(p.numel()).normal(0, 0.3, p.shape).astype(np.float32))
        cache = m.new_cache()
        m(ember.tensor(ids[:, :8]), cache)
        step = m(ember.tensor(ids[:, 8:9]), cache)
    step = getattr(step, "logits", step).numpy()[:, -1]
    full = logits(m, ids)[:, -1]
    plain = logits(lora.unload(ember_llama(hf)), ids)[:, -1]
    assert np.abs(full - plain).max() > 1e-2
    np.testing.assert_allclose(step, full, atol=1e-4, rtol=0)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k"])
def test_quantized_linear_input_gradient_matches_torch(device, qtype):
    """QLinear's dx = dy @ W by slabs of W's rows (the qlinear op's backward; a small slab here so there are several)
    equals torch's through the dequantized weight."""
    from ember import qtensor
    from ember.quant import QLinear, QTensor
    rng = np.random.default_rng(9)
    w = QTensor.quantize(rng.normal(0, 0.1, (72, 256)).astype(np.float32), qtype)
    layer = QLinear(w)
    x = rng.normal(0, 1, (2, 3, 256)).astype(np.float32)
    g = rng.normal(0, 1, (2, 3, 72)).astype(np.float32)
    xe = ember.tensor(x, device=device, requires_grad=True)
    slab = qtensor.GRAD_SLAB_BYTES
    qtensor.GRAD_SLAB_BYTES = 16 * 4 * 256  # 16 rows a slab: 5 slabs, the last short
    try:
        y = layer(xe)
        (y * ember.tensor(g, device=device)).sum().backward()
    finally:
        qtensor.GRAD_SLAB_BYTES = slab
    xt = torch.tensor(x, requires_grad=True)
    yt = xt @ torch.tensor(w.dequantize().numpy()).T
    (yt * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), atol=1e-4, rtol=1e-4)
