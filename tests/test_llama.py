"""Llama parity vs transformers' LlamaForCausalLM (tiny random configs built in the test): prompt logits,
every incremental decode step through the KV cache, greedy generation; llama2.c .bin round trip; bad input."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.common.generate import SamplingParams, generate
from ember.models.llama import names
from ember.models.llama.config import LlamaConfig
from ember.models.llama.llama2c import load_llama2c, write_llama2c
from ember.models.llama.names import LlamaWeightsError, from_hf_state_dict

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOL = 2e-5  # float32 state tolerance on logits of magnitude ~1

CONFIGS = {
    # Llama 2: multi-head attention, untied classifier
    "llama2": dict(vocab_size=101, hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, max_position_embeddings=48, rms_norm_eps=1e-5, tie_word_embeddings=False),
    # Llama 3 style: grouped-query attention, rope theta 500k with llama3 scaling, tied embeddings
    "llama3": dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                   num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-5, tie_word_embeddings=True,
                   rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
}


def hf_model(kind, seed=0, **override):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**{**CONFIGS[kind], **override}, attn_implementation="eager")
    m = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # unit-norm weights hide norm bugs: randomise them
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    return m


def ember_from_hf(hf, device="cpu"):
    c = LlamaConfig.from_hf(hf.config.to_dict())
    sd = {k: ember.tensor(v.detach().numpy()) for k, v in hf.state_dict().items()}
    return from_hf_state_dict(sd, c).to(device).eval()


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_logits_prompt_and_each_cached_step(kind, device):
    hf = hf_model(kind)
    m = ember_from_hf(hf, device)
    ids = torch.randint(0, hf.config.vocab_size, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits.numpy()                                       # (2, 14, vocab)
    with ember.no_grad():
        full = m(ember.tensor(ids.numpy(), device=device)).numpy()
        np.testing.assert_allclose(full, ref, atol=TOL, rtol=0)
        cache = m.new_cache()
        pre = m(ember.tensor(ids.numpy()[:, :9], device=device), cache).numpy()
        np.testing.assert_allclose(pre, ref[:, :9], atol=TOL, rtol=0)
        for t in range(9, 14):
            step = m(ember.tensor(ids.numpy()[:, t:t + 1], device=device), cache).numpy()
            np.testing.assert_allclose(step[:, 0], ref[:, t], atol=TOL, rtol=0, err_msg=f"decode step {t}")
    c = m.config
    assert cache.pos == 14
    assert cache.nbytes() == 2 * 14 * 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert cache.max_nbytes(batch=2) == 2 * 48 * 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_greedy_generation_matches_transformers(kind):
    hf = hf_model(kind, seed=3)
    m = ember_from_hf(hf)
    prompt = [1, 5, 17, 42, 8]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, eos_token_id=None,
                          pad_token_id=0)[0, len(prompt):].tolist()
    got = list(generate(m, prompt, 20, SamplingParams(temperature=0)))
    assert got == ref


def test_kv_cache_is_bounded_by_context():
    hf = hf_model("llama2")
    m = ember_from_hf(hf)
    cache = m.new_cache(max_len=6)
    with ember.no_grad():
        m(ember.tensor([[1, 2, 3, 4, 5]]), cache)
        m(ember.tensor([[6]]), cache)
        with pytest.raises(ValueError, match="KV cache full"):
            m(ember.tensor([[7]]), cache)
    gen = generate(m, [1, 2, 3], 100, SamplingParams(temperature=0))
    toks = list(gen)
    assert gen.stats.stopped == "context" and len(toks) == m.config.max_seq_len - 3 + 1


# ============================================================================ llama2.c

def _hf_to_llama2c_model(kind, tmp_path, **override):
    hf = hf_model(kind, seed=5, **override)
    c = LlamaConfig.from_hf(hf.config.to_dict())
    path = tmp_path / "model.bin"
    write_llama2c(path, c, {k: v.detach().numpy() for k, v in hf.state_dict().items()})
    return hf, c, path


def _export_py_legacy(hf, c, path):
    """llama2.c export.py legacy_export (version 0), written here from its source: HF q/k rows are first
    un-permuted to Meta's interleaved rotary layout (export.py load_hf_model's permute_reverse)."""
    import struct
    sd = {k: v.detach().float().numpy() for k, v in hf.state_dict().items()}

    def permute_reverse(w, n_heads, dim1, dim2):
        return w.reshape(n_heads, 2, dim1 // n_heads // 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)

    L = range(c.n_layers)
    kv = c.n_kv_heads * c.head_dim
    out = [sd["model.embed_tokens.weight"]]
    out += [sd[f"model.layers.{i}.input_layernorm.weight"] for i in L]
    out += [permute_reverse(sd[f"model.layers.{i}.self_attn.q_proj.weight"], c.n_heads, c.dim, c.dim) for i in L]
    out += [permute_reverse(sd[f"model.layers.{i}.self_attn.k_proj.weight"], c.n_kv_heads, kv, c.dim) for i in L]
    out += [sd[f"model.layers.{i}.self_attn.v_proj.weight"] for i in L]
    out += [sd[f"model.layers.{i}.self_attn.o_proj.weight"] for i in L]
    out += [sd[f"model.layers.{i}.post_attention_layernorm.weight"] for i in L]
    out += [sd[f"model.layers.{i}.mlp.gate_proj.weight"] for i in L]
    out += [sd[f"model.layers.{i}.mlp.down_proj.weight"] for i in L]
    out += [sd[f"model.layers.{i}.mlp.up_proj.weight"] for i in L]
    out += [sd["model.norm.weight"]]
    hd = c.head_dim
    # export.py's precompute_freqs_cis: 1 / (theta ** (arange.float() / dim)) in float32. The angles, cos and sin
    # are then taken in float64 and rounded once: torch's float32 cos/sin are not correctly rounded (about 1 in
    # 10 entries is 1 ulp off), so export.py's own bytes cannot be reproduced without torch's libm
    freqs = np.float32(1.0) / (np.float32(10000.0) ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float32) / np.float32(hd)))
    ang = np.outer(np.arange(c.max_seq_len), freqs)
    out += [np.cos(ang), np.sin(ang)]
    shared = c.tie_embeddings
    if not shared:
        out += [sd["lm_head.weight"]]
    with open(path, "wb") as f:
        f.write(struct.pack("iiiiiii", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                            c.vocab_size if shared else -c.vocab_size, c.max_seq_len))
        for w in out:
            f.write(np.ascontiguousarray(w, np.float32).tobytes())


@pytest.mark.parametrize("kind", ["llama2"])
def test_llama2c_bin_round_trip(kind, tmp_path):
    hf = hf_model(kind, seed=5)
    c = LlamaConfig.from_hf(hf.config.to_dict())
    path = tmp_path / "export_py.bin"
    _export_py_legacy(hf, c, path)
    mine = tmp_path / "ember.bin"
    write_llama2c(mine, c, {k: v.detach().numpy() for k, v in hf.state_dict().items()})
    assert mine.read_bytes() == path.read_bytes()  # header and every weight, byte for byte
    model, tok = load_llama2c(path)
    assert tok is None and model.config.tie_embeddings is False
    ids = torch.tensor([[3, 9, 27, 81, 4, 2]])
    with torch.no_grad():
        ref = hf(ids).logits.numpy()
    with ember.no_grad():
        got = model(ember.tensor(ids.numpy())).numpy()
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


def test_llama2c_truncated_names_tensor(tmp_path):
    _, c, path = _hf_to_llama2c_model("llama2", tmp_path)
    data = path.read_bytes()
    cut = 28 + 4 * (c.vocab_size * c.dim + c.n_layers * c.dim + 100)   # ends inside wq
    (tmp_path / "cut.bin").write_bytes(data[:cut])
    with pytest.raises(LlamaWeightsError, match=r"truncated: tensor 'wq'"):
        load_llama2c(tmp_path / "cut.bin")
    (tmp_path / "long.bin").write_bytes(data + b"\0" * 8)
    with pytest.raises(LlamaWeightsError, match="8 bytes after the last tensor"):
        load_llama2c(tmp_path / "long.bin")
    (tmp_path / "hdr.bin").write_bytes(data[:10])
    with pytest.raises(LlamaWeightsError, match="shorter than the llama2.c header"):
        load_llama2c(tmp_path / "hdr.bin")


def test_checkpoint_config_mismatch_names_tensor():
    hf = hf_model("llama2")
    c = LlamaConfig.from_hf({**hf.config.to_dict(), "intermediate_size": 120})
    sd = {k: ember.tensor(v.detach().numpy()) for k, v in hf.state_dict().items()}
    want = r"model.layers.0.mlp.gate_proj.weight: checkpoint \(112, 64\) vs config \(120, 64\)"
    with pytest.raises(LlamaWeightsError, match=want):
        from_hf_state_dict(sd, c)
    del sd["model.norm.weight"]
    with pytest.raises(LlamaWeightsError, match="missing.*model.norm.weight"):
        from_hf_state_dict(sd, LlamaConfig.from_hf(hf.config.to_dict()))


def test_hf_names_round_trip():
    hf = hf_model("llama3")
    c = LlamaConfig.from_hf(hf.config.to_dict())
    sd = {k: ember.tensor(v.detach().numpy()) for k, v in hf.state_dict().items()}
    back = names.to_hf(names.from_hf(sd, c), c)
    assert set(back) == set(sd) - {"lm_head.weight"}
    for k, v in back.items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())


def test_llama2c_bin_with_tokenizer_bin_via_load_llama(tmp_path):
    """load_llama(model.bin) picks up tokenizer.bin beside it (run.c's format: max_token_length, then per
    token a float32 score, an int32 length and the bytes)."""
    import struct

    from ember.models.llama.load import load_llama
    hf, c, path = _hf_to_llama2c_model("llama2", tmp_path, vocab_size=300)
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    words = [b" the", b" for", b" statement", b"The", b" is", b"st", b"at", b"em", b"ent", b" ", b"e", b"t",
             b"a", b"s", b"m", b"n", b"f", b"o", b"r", b"h", b"i", b"T"]
    pieces += words + [b"x%d" % i for i in range(c.vocab_size - len(pieces) - len(words))]
    pieces = pieces[:c.vocab_size]
    with open(tmp_path / "tokenizer.bin", "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for i, p in enumerate(pieces):
            f.write(struct.pack("<fi", -float(i), len(p)) + p)
    model, tok = load_llama(str(path))
    ids = tok.encode("The for statement", bos=True)
    assert ids[0] == 1 and tok.decode(ids) == "The for statement"
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()
    with ember.no_grad():
        np.testing.assert_allclose(model(ember.tensor([ids])).numpy(), ref, atol=TOL, rtol=0)


def test_device_and_dtype_follow_the_first_parameter_as_the_tree_changes():
    # the model keeps its first parameter between reads (read at every decoded token); a module put in front of it
    # (here the embedding, replaced by one in float64) or a cast in place must show
    m = ember_from_hf(hf_model("llama2"))
    assert m._dtype() == ember.float32 and str(m.device) == "cpu"
    emb = ember.nn.Embedding(101, 64)
    emb.weight = ember.nn.Parameter(ember.tensor(np.ones((101, 64)), dtype=ember.float64))
    m.model.embed_tokens = emb
    assert m._dtype() == ember.float64 is next(iter(m.parameters())).dtype
    del m.model.embed_tokens
    assert m._dtype() == next(iter(m.parameters())).dtype == ember.float32
    m.to(ember.float64)
    assert m._dtype() == ember.float64
