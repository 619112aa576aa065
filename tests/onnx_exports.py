"""ONNX files made the way users' files are made, offline, from random-config transformers models (test references
only: torch, transformers, onnxruntime, onnx, onnx_ir): torch.onnx.export(dynamo=False), then onnxruntime's
transformer optimizer (optimize_model: SkipLayerNormalization, Attention, EmbedLayerNormalization, BiasGelu ...)
and its MatMulNBitsQuantizer (4-bit, block 32 asymmetric or block 128 symmetric). Decoders are exported with their
KV cache as inputs and outputs (past_key_values.<i>.key -> present.<i>.key). A Qwen2-style decoder with
GroupQueryAttention is written as onnxruntime-genai's model builder writes one (the optimizer does not fuse GQA out
of a torch export): rotary inside GroupQueryAttention, SkipSimplifiedLayerNormalization, seqlens_k from the mask.

Each file is made once per version set into the ember cache (`path(name)`); a second call reads it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from pathlib import Path

import numpy as np

from expected_skips import missing

VOCAB, HIDDEN, HEADS, LAYERS = 1000, 64, 4, 2
SEED = 0
NAMES = ["bert", "bert-q4", "gpt2", "gpt2-q4", "qwen2-gqa", "qwen2-gqa-q4", "llama", "llama-q4", "whisper-encoder",
         "whisper-decoder", "whisper-decoder-q4", "vit", "gpt2-small-q4"]  # the last: bench/bench_onnx.py's decode
DECODERS = {"gpt2", "gpt2-q4", "qwen2-gqa", "qwen2-gqa-q4", "llama", "llama-q4", "whisper-decoder",
            "whisper-decoder-q4"}


def _versions() -> str:
    import onnx
    import onnxruntime
    import torch
    import transformers
    try:
        import onnx_ir
    except ImportError:
        missing("pip onnx_ir is not installed (onnxruntime's MatMulNBitsQuantizer needs it)")
    own = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:10]
    return (f"torch{torch.__version__}-tf{transformers.__version__}-ort{onnxruntime.__version__}-onnx{onnx.__version__}"
            f"-ir{onnx_ir.__version__}-{own}").replace("+", "_")


def path(name: str) -> Path:
    """The cached .onnx of export `name` (one of NAMES), made now if missing."""
    if name not in NAMES:
        raise KeyError(f"unknown export {name!r}; known: {NAMES}")
    try:
        import onnxruntime  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        missing(f"exporting the ONNX test models needs torch, transformers and onnxruntime: {e}")
    from ember.hub import cache_dir
    folder = cache_dir("onnx-exports", _versions())
    out = folder / f"{name}.onnx"
    if not out.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.{os.getpid()}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _MAKERS[name.replace("-q4", "")](tmp, quantize=name.endswith("-q4"))
        os.replace(tmp, out)
    return out


# ============================================================================ export helpers

def _torch_export(module, args, path, inputs, outputs, dynamic):
    import torch
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=dynamic,
                          opset_version=17, dynamo=False)


def _optimize(path, model_type, heads=HEADS, hidden=HIDDEN, attention=True):
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    options = FusionOptions(model_type)
    options.enable_attention = attention
    opt = optimize_model(str(path), model_type=model_type, num_heads=heads, hidden_size=hidden,
                         optimization_options=options)
    opt.save_model_to_file(str(path))


def _quantize(path, block, symmetric):
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    q = MatMulNBitsQuantizer(onnx.load(str(path)), block_size=block, is_symmetric=symmetric)
    q.process()
    q.model.save_model_to_file(str(path))


def _kv_names(layers, infix=""):
    pin = [f"past_key_values.{i}.{infix}{k}" for i in range(layers) for k in ("key", "value")]
    pout = [f"present.{i}.{infix}{k}" for i in range(layers) for k in ("key", "value")]
    return pin, pout


def _decoder_wrapper(model, layers, extra_args=()):
    """model(input_ids, attention_mask, position_ids, *past) -> (logits, *present) with a DynamicCache built from
    the past tensors (transformers 5 models take keyword arguments and Cache objects)."""
    import torch
    from transformers import DynamicCache

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, mask, pos, *past):
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            o = self.m(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
            outs = [o.logits]
            for i in range(layers):
                outs += [o.past_key_values.layers[i].keys, o.past_key_values.layers[i].values]
            return tuple(outs)
    return Wrap()


def _seeded():
    import torch
    torch.manual_seed(SEED)


def _sharpen(model, scale=4.0):
    """Random models' logits are nearly flat, which makes greedy picks hang on the last bits; a wider output
    layer makes them decisive without changing what is computed."""
    import torch
    with torch.no_grad():
        head = model.get_output_embeddings()
        head.weight.mul_(scale)


# ============================================================================ the models

def _bert(path, quantize):
    from transformers import BertConfig, BertModel
    import torch
    _seeded()
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=4 * HIDDEN, max_position_embeddings=128)
    cfg._attn_implementation = "eager"  # the attention pattern onnxruntime's optimizer fuses into Attention
    model = BertModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, mask, tt):
            return self.m(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
    ids = torch.randint(0, VOCAB, (2, 16))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    _torch_export(Wrap(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), path, names, ["last_hidden_state"],
                  {n: {0: "batch", 1: "sequence"} for n in names + ["last_hidden_state"]})
    _optimize(path, "bert")
    if quantize:
        _quantize(path, 32, False)


def _gpt2(path, quantize):
    from transformers import GPT2Config, GPT2LMHeadModel
    _seeded()
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=128,
                     bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)  # (tied: a random model repeats)
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg).eval()
    _sharpen(model)
    _export_decoder(model, path, HEADS, HIDDEN // HEADS)
    _optimize(path, "gpt2")
    if quantize:
        _quantize(path, 32, False)


def _gpt2_small(path, quantize):
    """GPT-2 small's shapes (768 wide, 12 layers, 12 heads, 50257 words, random weights) for the decode benchmark."""
    from transformers import GPT2Config, GPT2LMHeadModel
    _seeded()
    cfg = GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg).eval()
    _export_decoder(model, path, 12, 64, vocab=cfg.vocab_size)
    _optimize(path, "gpt2", heads=12, hidden=768)
    if quantize:
        _quantize(path, 32, False)


def _llama(path, quantize):
    from transformers import LlamaConfig, LlamaForCausalLM
    _seeded()
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=2, intermediate_size=2 * HIDDEN, max_position_embeddings=256,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).eval()
    _sharpen(model)
    _export_decoder(model, path, 2, HIDDEN // HEADS)
    _optimize(path, "gpt2")  # SkipSimplifiedLayerNormalization; the attention stays as the export wrote it
    if quantize:
        _quantize(path, 128, True)


def _export_decoder(model, path, kv_heads, head_size, vocab=VOCAB):
    import torch
    pin, pout = _kv_names(model.config.num_hidden_layers)
    b, s, p = 1, 3, 4
    ids = torch.randint(0, vocab, (b, s))
    mask = torch.ones(b, p + s, dtype=torch.long)
    pos = torch.arange(p, p + s)[None]
    past = [torch.randn(b, kv_heads, p, head_size) for _ in pin]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
    dyn.update({n: {0: "batch", 2: "past"} for n in pin})
    dyn.update({n: {0: "batch", 2: "total"} for n in pout})
    _torch_export(_decoder_wrapper(model, model.config.num_hidden_layers), (ids, mask, pos, *past), path,
                  ["input_ids", "attention_mask", "position_ids"] + pin, ["logits"] + pout, dyn)


def _whisper_model():
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    _seeded()
    cfg = WhisperConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=4 * HIDDEN,
                        decoder_ffn_dim=4 * HIDDEN, num_mel_bins=80, max_source_positions=50,
                        max_target_positions=64, decoder_start_token_id=1, pad_token_id=0, eos_token_id=2,
                        bos_token_id=1, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = WhisperForConditionalGeneration(cfg).eval()
    _sharpen(model)
    return model


def _whisper_encoder(path, quantize):
    import torch
    model = _whisper_model()

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, feats):
            return self.m.model.encoder(input_features=feats).last_hidden_state
    _torch_export(Enc(), (torch.randn(1, 80, 100),), path, ["input_features"], ["last_hidden_state"],
                  {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}})
    _optimize(path, "bart")


def _whisper_decoder(path, quantize):
    """input_ids, encoder_hidden_states and the self-attention cache -> logits and its present (the cross-attention
    keys and values recomputed from encoder_hidden_states each step)."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache
    model = _whisper_model()
    layers = LAYERS

    class Dec(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, enc, *past):
            self_cache = DynamicCache()
            for i in range(layers):
                self_cache.update(past[2 * i], past[2 * i + 1], i)
            o = self.m(decoder_input_ids=ids, encoder_outputs=(enc,), use_cache=True,
                       past_key_values=EncoderDecoderCache(self_cache, DynamicCache()))
            outs = [o.logits]
            for i in range(layers):
                lay = o.past_key_values.self_attention_cache.layers[i]
                outs += [lay.keys, lay.values]
            return tuple(outs)
    pin, pout = _kv_names(layers, "decoder.")
    past = [torch.randn(1, HEADS, 3, HIDDEN // HEADS) for _ in pin]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "encoder_hidden_states": {0: "batch", 1: "frames"},
           "logits": {0: "batch", 1: "sequence"}}
    dyn.update({n: {0: "batch", 2: "past"} for n in pin})
    dyn.update({n: {0: "batch", 2: "total"} for n in pout})
    _torch_export(Dec(), (torch.tensor([[5, 6]]), torch.randn(1, 50, HIDDEN), *past), path,
                  ["input_ids", "encoder_hidden_states"] + pin, ["logits"] + pout, dyn)
    # onnxruntime 1.32's bart fusion turns layer 0's self-attention into an Attention without its past (the
    # model then drops past_key_values.0.decoder.value): its attention fusion is left out for this decoder
    _optimize(path, "bart", attention=False)
    if quantize:
        _quantize(path, 32, False)


def _vit(path, quantize):
    import torch
    from transformers import ViTConfig, ViTModel
    _seeded()
    cfg = ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                    intermediate_size=4 * HIDDEN, image_size=32, patch_size=8)
    cfg._attn_implementation = "eager"
    model = ViTModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixels):
            return self.m(pixel_values=pixels).last_hidden_state
    _torch_export(Wrap(), (torch.randn(1, 3, 32, 32),), path, ["pixel_values"], ["last_hidden_state"],
                  {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}})
    _optimize(path, "vit")


# ============================================================================ a GroupQueryAttention decoder

def qwen2_model():
    """The random Qwen2 (biases on q/k/v, 4 query heads over 2 KV heads, head size 16) the GQA export holds."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    _seeded()
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=2, intermediate_size=2 * HIDDEN, max_position_embeddings=256,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "eager"
    model = Qwen2ForCausalLM(cfg).eval()
    _sharpen(model)
    return model


def _qwen2_gqa(path, quantize):
    """onnxruntime-genai's graph for a Qwen2 decoder: GroupQueryAttention (do_rotary, cos/sin caches, seqlens_k and
    total_sequence_length from attention_mask), SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization,
    MatMul (+ Add for q/k/v biases), SiLU as Sigmoid * x; then MatMulNBitsQuantizer for the -q4 file."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    model = qwen2_model()
    cfg = model.config
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    hd, nkv, layers = HIDDEN // HEADS, cfg.num_key_value_heads, cfg.num_hidden_layers
    inits, nodes = [], []

    def init(name, a):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def node(op, ins, outs, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, outs, domain=domain, name=outs[0] + "/" + op, **attrs))
        return outs

    eps = float(cfg.rms_norm_eps)
    inv = 1.0 / cfg.rope_parameters["rope_theta"] ** (np.arange(0, hd, 2) / hd)
    ang = np.arange(cfg.max_position_embeddings)[:, None] * inv[None]
    init("cos_cache", np.cos(ang).astype(np.float32))
    init("sin_cache", np.sin(ang).astype(np.float32))
    init("one_axis", np.array([1], np.int64))
    init("one", np.array(1, np.int64))
    # seqlens_k = sum(mask) - 1 per row (int32); total_sequence_length = mask's width (int32 scalar)
    node("ReduceSum", ["attention_mask", "one_axis"], ["mask_sum"], keepdims=0)
    node("Sub", ["mask_sum", "one"], ["seqlens_k64"])
    node("Cast", ["seqlens_k64"], ["seqlens_k"], to=TensorProto.INT32)
    node("Shape", ["attention_mask"], ["mask_shape"])
    init("idx1", np.array(1, np.int64))
    node("Gather", ["mask_shape", "idx1"], ["total64"], axis=0)
    node("Cast", ["total64"], ["total_sequence_length"], to=TensorProto.INT32)
    init("embed", sd["model.embed_tokens.weight"])
    node("Gather", ["embed", "input_ids"], ["h0"])
    residual, x = "h0", None
    for i in range(layers):
        p = f"model.layers.{i}."
        w_in = init(p + "in_norm", sd[p + "input_layernorm.weight"])
        if i == 0:
            node("SimplifiedLayerNormalization", [residual, w_in], [f"l{i}_n1"], epsilon=eps)
        else:
            node("SkipSimplifiedLayerNormalization", [x, residual, w_in], [f"l{i}_n1", "", "", f"l{i}_res1"],
                 domain="com.microsoft", epsilon=eps)
            residual = f"l{i}_res1"
        for proj in ("q", "k", "v"):
            w = init(p + proj, sd[p + f"self_attn.{proj}_proj.weight"].T)
            b = init(p + proj + "_bias", sd[p + f"self_attn.{proj}_proj.bias"])
            node("MatMul", [f"l{i}_n1", w], [f"l{i}_{proj}_mm"])
            node("Add", [f"l{i}_{proj}_mm", b], [f"l{i}_{proj}"])
        node("GroupQueryAttention", [f"l{i}_q", f"l{i}_k", f"l{i}_v", f"past_key_values.{i}.key",
                                     f"past_key_values.{i}.value", "seqlens_k", "total_sequence_length",
                                     "cos_cache", "sin_cache"],
             [f"l{i}_attn", f"present.{i}.key", f"present.{i}.value"], domain="com.microsoft",
             num_heads=HEADS, kv_num_heads=nkv, do_rotary=1)
        node("MatMul", [f"l{i}_attn", init(p + "o", sd[p + "self_attn.o_proj.weight"].T)], [f"l{i}_o"])
        node("SkipSimplifiedLayerNormalization", [f"l{i}_o", residual, init(p + "post_norm",
             sd[p + "post_attention_layernorm.weight"])], [f"l{i}_n2", "", "", f"l{i}_res2"],
             domain="com.microsoft", epsilon=eps)
        residual = f"l{i}_res2"
        node("MatMul", [f"l{i}_n2", init(p + "gate", sd[p + "mlp.gate_proj.weight"].T)], [f"l{i}_gate"])
        node("MatMul", [f"l{i}_n2", init(p + "up", sd[p + "mlp.up_proj.weight"].T)], [f"l{i}_up"])
        node("Sigmoid", [f"l{i}_gate"], [f"l{i}_sig"])
        node("Mul", [f"l{i}_gate", f"l{i}_sig"], [f"l{i}_silu"])
        node("Mul", [f"l{i}_silu", f"l{i}_up"], [f"l{i}_act"])
        node("MatMul", [f"l{i}_act", init(p + "down", sd[p + "mlp.down_proj.weight"].T)], [f"l{i}_down"])
        x = f"l{i}_down"
    node("SkipSimplifiedLayerNormalization", [x, residual, init("final_norm", sd["model.norm.weight"])],
         ["final"], domain="com.microsoft", epsilon=eps)
    node("MatMul", ["final", init("lm_head", sd["lm_head.weight"].T)], ["logits"])
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    ins = [helper.make_tensor_value_info("input_ids", i64, ["batch", "sequence"]),
           helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"])]
    outs = [helper.make_tensor_value_info("logits", f32, ["batch", "sequence", VOCAB])]
    for i in range(layers):
        for k in ("key", "value"):
            ins.append(helper.make_tensor_value_info(f"past_key_values.{i}.{k}", f32, ["batch", nkv, "past", hd]))
            outs.append(helper.make_tensor_value_info(f"present.{i}.{k}", f32, ["batch", nkv, "total", hd]))
    graph = helper.make_graph(nodes, "qwen2_gqa", ins, outs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    onnx.save(m, str(path))
    if quantize:
        _quantize(path, 32, False)


_MAKERS = {"bert": _bert, "gpt2": _gpt2, "gpt2-small": _gpt2_small, "qwen2-gqa": _qwen2_gqa, "llama": _llama,
           "whisper-encoder": _whisper_encoder, "whisper-decoder": _whisper_decoder, "vit": _vit}


# ============================================================================ inputs and a greedy loop for references

def feeds(name: str, rng) -> dict:
    """One set of inputs for export `name` (not decoders: decode() feeds those)."""
    if name.startswith("bert"):
        ids = rng.integers(1, VOCAB, (2, 9)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, 6:] = 0
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": (rng.random(ids.shape) < 0.5).astype(np.int64)}
    if name == "vit":
        return {"pixel_values": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
    if name == "whisper-encoder":
        return {"input_features": rng.standard_normal((1, 80, 100)).astype(np.float32)}
    raise KeyError(name)


def decoder_feeds(name: str, rng) -> dict:
    """Constant feeds beside the tokens and the cache (the Whisper decoder's encoder output)."""
    if name.startswith("whisper-decoder"):
        return {"encoder_hidden_states": rng.standard_normal((1, 50, HIDDEN)).astype(np.float32)}
    return {}


def copy_to(name: str, folder: Path) -> Path:
    """The export placed in `folder` (a hard link where possible) as <name>.onnx."""
    src, dest = path(name), Path(folder) / f"{name}.onnx"
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy(src, dest)
    return dest
