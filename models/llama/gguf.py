"""Llama's GGUF architecture (llama.cpp's convert_hf_to_gguf.py `llama` layout), for models/common/gguf.py:
config from `llama.*` metadata, tensors from `token_embd` / `blk.N.*` / `output*` (F32, F16, BF16 or any GGML
quant type; quantized matrices stay quantized, in QLinear layers, fused into qkv_proj / gate_up_proj block row
by block row; a quantized tied embedding stays quantized (QEmbedding); other embeddings, norms and F16/BF16
weights become float32), the tokenizer from `tokenizer.ggml.*` (SentencePiece "llama" vocabularies through
llama2.c's tokenizer, byte-level "gpt2" BPE as llama.cpp tokenizes it). The quantized weights multiply as
llama.cpp's CPU backend does, activations quantized to 8 bits per block ("q8", as Gemma 3's GGUF): llama.cpp's
numbers and speed; ember.quant.set_activations(model, "float32") multiplies float32 activations by the
dequantized weights instead (transformers' numbers on the same file).

llama.cpp stores q/k rows in the interleaved-pair rotary layout (it permutes HF's on conversion); they are
permuted back to HF's rotate-half layout on load (rotary_pairs).
"""
from __future__ import annotations

import numpy as np

import ember
from ember.nn import init
from ember.quant import QTensor, load_quantized

from ..common.embedding import QEmbedding
from ..common.gguf import LLAMA_LAYER_NAMES, LLAMA_TOP_NAMES, GGUFArchitecture, cat_rows
from . import names
from .config import LlamaConfig
from .model import Llama
from .names import LlamaWeightsError


def build(c: LlamaConfig, sd: dict, where: str) -> Llama:
    """A Llama from {HF name: Tensor | QTensor}: 2-d quantized matrices stay quantized, the rest float32. A
    quantized tied embedding stays quantized too (a QEmbedding: rows read on demand, the output multiplied
    by its blocks, as llama.cpp does)."""
    sd = {k: v if isinstance(v, QTensor) and v.ndim == 2 else np.asarray(v.numpy() if hasattr(v, "numpy") else v,
                                                                         np.float32) for k, v in sd.items()}
    if "lm_head.weight" not in sd:
        c = c.replace(tie_embeddings=True)  # llama.cpp omits output.weight when the embedding is tied
    sd = names.from_hf(sd, c, where, cat_rows=cat_rows)
    with init.skipped():  # every weight is loaded next
        model = Llama(c)
    emb = sd["model.embed_tokens.weight"]
    if c.tie_embeddings and isinstance(emb, QTensor):
        model.model.embed_tokens = QEmbedding(c.vocab_size, c.dim)
        model.model.embed_tokens.load_table(emb)
        del sd["model.embed_tokens.weight"]
    load_quantized(model, {k: v if isinstance(v, QTensor) else ember.tensor(v) for k, v in sd.items()})
    return model


GGUF = GGUFArchitecture(
    "llama", LLAMA_LAYER_NAMES, LLAMA_TOP_NAMES, LlamaConfig.from_gguf, build, error=LlamaWeightsError,
    refused={"rope_freqs.weight": "Llama 3 rope factors, which ember's GGUF loader does not apply yet"},
    rotary_pairs=True, spm="llama2c", activations="q8")
