"""Llama from GGUF files written with gguf-py (llama.cpp's convert_hf_to_gguf layout: q/k rows permuted to
the interleaved rotary layout, tokenizer in tokenizer.ggml.*): F32 matches transformers to float32 state
tolerance, Q8_0 within a stated bound, and the embedded BPE vocabulary tokenizes like the original."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.llama.load import load_llama
from ember.quant import QLinear, set_activations
from gguf_reference import add_bpe_vocab, add_dims, bpe_tokenizer, finish, llamacpp_permute, tiny_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ("The for statement is used to iterate over the elements of a sequence. "
        "The while statement is used for repeated execution as long as an expression is true. ") * 4


def _tokenizer():
    return bpe_tokenizer(TEXT)


def _write(path, hf, tok, qtype, f16=()):
    """qtype for every matrix except the HF layer names in f16 (stored float16, as mixed llama.cpp files do)."""
    c = hf.config
    w = gguf.GGUFWriter(str(path), "llama")
    add_dims(w, c)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(10000.0)
    add_bpe_vocab(w, tok)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for k, v in hf.state_dict().items():
        a = v.detach().numpy().astype(np.float32)
        if k == "model.embed_tokens.weight":
            n = "token_embd.weight"
        elif k == "model.norm.weight":
            n = "output_norm.weight"
        elif k == "lm_head.weight":
            n = "output.weight"
        else:
            _, _, i, *rest = k.split(".")
            base = ".".join(rest[:-1])
            n = f"blk.{i}.{names[base]}.weight"
            if base == "self_attn.q_proj":
                a = llamacpp_permute(a, c.num_attention_heads)
            elif base == "self_attn.k_proj":
                a = llamacpp_permute(a, c.num_key_value_heads)
        if any(k.endswith(f"{b}.weight") for b in f16):
            w.add_tensor(n, a.astype(np.float16))
        elif qtype == "q8_0" and a.ndim == 2:
            w.add_tensor(n, gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(n, a)
    finish(w)


@pytest.mark.parametrize("qtype,f16,tol", [("f32", (), 2e-5), ("q8_0", (), 2e-2),
                                           ("q8_0", ("v_proj", "up_proj"), 2e-2)])
def test_gguf_llama_matches_transformers(tmp_path, qtype, f16, tol):
    tok = _tokenizer()
    hf = tiny_llama(tok.get_vocab_size(), attn_implementation="eager")
    path = tmp_path / f"tiny-{qtype}.gguf"
    _write(path, hf, tok, qtype, f16)
    model, etok = load_llama(str(path))
    set_activations(model, "float32")  # transformers' arithmetic: float32 activations times the dequantized weights
    qkv = model.model.layers[0].self_attn.qkv_proj
    # quantized matrices stay quantized; a fused projection with a float part falls back to float32
    assert isinstance(qkv, QLinear) == (qtype == "q8_0" and not f16)
    assert isinstance(model.model.layers[1].mlp.down_proj, QLinear) == (qtype == "q8_0")
    assert isinstance(model.lm_head, QLinear) == (qtype == "q8_0")
    assert model.config.n_kv_heads == 2 and not model.config.tie_embeddings
    text = "The for statement is used for repeated execution"
    ids = etok.encode(text, bos=True)
    assert ids == [0] + tok.encode(text).ids
    assert etok.decode(ids) == text
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()
    with ember.no_grad():
        got = model(ember.tensor([ids])).numpy()
    err = np.abs(got - ref).max()
    assert err < tol * max(1.0, np.abs(ref).max()), (qtype, err, np.abs(ref).max())
    if qtype == "q8_0":
        assert err > 1e-6  # the weights really went through Q8_0
