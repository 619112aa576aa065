"""MoE GGUF files written here by gguf-py the way llama.cpp's convert_hf_to_gguf.py lays them out (Mixtral as
`llama` with experts and interleaved-pair q/k rows; `qwen2moe` with a shared expert; `qwen3moe` with q/k norms;
stacked expert tensors) load through load_text_model and match transformers: F32 files within 1e-4 relative;
Q8_0 files (experts, shared expert and attention kept quantized: QExperts, QLinear) against transformers running the file's dequantized weights."""
from __future__ import annotations

import numpy as np
import pytest

from ember.models.common.generate import SamplingParams, generate
from ember.models.common.moe_gguf import QExperts
from ember.models.text import load_text_model
from gguf_reference import add_bpe_vocab, add_dims, bpe_tokenizer, finish, llamacpp_permute

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

TEXT = "The for statement is used to iterate over the elements of a sequence. " * 4


def _config(kind, vocab):
    t = transformers
    small = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=64, attn_implementation="eager")
    if kind == "mixtral":
        return t.MixtralConfig(**small, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2)
    if kind == "qwen2moe":
        return t.Qwen2MoeConfig(**small, intermediate_size=64, num_experts=16, num_experts_per_tok=8,
                                moe_intermediate_size=32, shared_expert_intermediate_size=64, norm_topk_prob=False)
    return t.Qwen3MoeConfig(**small, head_dim=8, intermediate_size=64, num_experts=16, num_experts_per_tok=8,
                            moe_intermediate_size=32, norm_topk_prob=True)


LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
         "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp",
         "mlp.shared_expert_gate": "ffn_gate_inp_shexp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
         "mlp.shared_expert.up_proj": "ffn_up_shexp", "mlp.shared_expert.down_proj": "ffn_down_shexp"}


# what a quantized file stores as Q8_0 (the router, norms and embeddings stay float32)
QUANTIZED = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
             "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"}


def _gguf_tensors(hf, kind):
    """{GGUF name: float32 array} from transformers' (stacked-expert) state_dict."""
    c, out = hf.config, {}
    for k, v in hf.state_dict().items():
        a = v.detach().numpy().astype(np.float32)
        top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
               "lm_head.weight": "output.weight"}
        if k in top:
            out[top[k]] = a
            continue
        _, _, i, *rest = k.split(".")
        base, leaf = ".".join(rest[:-1]), rest[-1]
        if base == "mlp.experts":
            if leaf == "gate_up_proj":
                F = a.shape[1] // 2
                out[f"blk.{i}.ffn_gate_exps.weight"], out[f"blk.{i}.ffn_up_exps.weight"] = a[:, :F], a[:, F:]
            else:
                out[f"blk.{i}.ffn_down_exps.weight"] = a
            continue
        if kind == "mixtral" and base in ("self_attn.q_proj", "self_attn.k_proj") and leaf == "weight":
            a = llamacpp_permute(a, c.num_attention_heads if base.endswith("q_proj") else c.num_key_value_heads)
        out[f"blk.{i}.{LAYER[base]}.{leaf}"] = a
    return out


def _write(path, hf, kind, tok, quant):
    """A GGUF file of hf; quant: Q8_0 experts and attention matrices."""
    c = hf.config
    arch = "llama" if kind == "mixtral" else kind
    w = gguf.GGUFWriter(str(path), arch)
    add_dims(w, c)
    if kind == "qwen3moe":
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_expert_count(c.num_local_experts if kind == "mixtral" else c.num_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    if kind != "mixtral":
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    if kind == "qwen2moe":
        w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    add_bpe_vocab(w, tok)
    Q8 = gguf.GGMLQuantizationType.Q8_0
    for n, a in _gguf_tensors(hf, kind).items():
        if quant and n.endswith(".weight") and n.split(".")[-2] in QUANTIZED:
            w.add_tensor(n, gguf.quants.quantize(a, Q8), raw_dtype=Q8)
        else:
            w.add_tensor(n, a)
    finish(w)


def _quantized_in_place(hf):
    """Replace the matrices the file quantizes by their Q8_0 round trip: the reference runs what the file holds
    (Q8_0 blocks run along rows, so splitting gate_up and permuting q/k rows commute with it)."""
    Q8 = gguf.GGMLQuantizationType.Q8_0
    with torch.no_grad():
        for k, v in hf.state_dict().items():
            if "mlp.experts" in k or (k.endswith("_proj.weight") and ("self_attn" in k or "shared_expert" in k)):
                a = v.numpy().astype(np.float32)
                v.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(a, Q8), Q8).reshape(a.shape)))


@pytest.mark.parametrize("kind,quant", [("mixtral", False), ("qwen2moe", False), ("qwen3moe", False),
                                        ("mixtral", True), ("qwen2moe", True),
                                        ("qwen3moe", True)])
def test_moe_gguf_matches_transformers(tmp_path, kind, quant, device):
    tok = bpe_tokenizer(TEXT)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(_config(kind, tok.get_vocab_size())).eval()
    if quant:
        _quantized_in_place(hf)
    _write(tmp_path / f"{kind}.gguf", hf, kind, tok, quant)
    model, etok = load_text_model(str(tmp_path / f"{kind}.gguf"), device=device)
    assert isinstance(model.model.layers[0].mlp.experts, QExperts) == quant
    ids = np.array([etok.encode("The for statement is used to iterate")])
    with torch.no_grad():
        want = hf(torch.tensor(ids)).logits.numpy()
    got = model(input_ids=ids).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    with torch.no_grad():
        ref = hf.generate(torch.tensor(ids), max_new_tokens=8, do_sample=False, min_new_tokens=8,
                          pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert list(generate(model, ids[0].tolist(), 8, SamplingParams(temperature=0))) == ref
