"""`ember convert`: safetensors -> GGUF (quantizing as it goes) and GGUF -> safetensors.

safetensors_to_gguf streams: tensors are read lazily and quantized one at a time while the GGUF
is written, so peak memory is about one float32 tensor. Which tensors get quantized follows
llama.cpp's default: floating-point tensors with 2+ dims whose rows fill whole blocks; 1-d tensors
(norms, biases) and integer tensors keep their dtype.
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..ggml import types as T
from ..ggml.codec import quantize

GGML_QUANT_VERSION = 2  # llama.cpp reads quantized files only with general.quantization_version = 2


def _float32(stored):
    from ..dtypes import bf16_bits_to_f32
    a = stored.array
    return bf16_bits_to_f32(a) if stored.dtype.name == "bfloat16" else a.astype(np.float32, copy=False)


def _plan(name, stored, t, include):
    """The GGUF type a safetensors tensor is written as."""
    d = stored.dtype
    wants = (d.is_float and len(stored.shape) >= 2 and stored.shape[-1] % t.block_size == 0
             and (include is None or include(name, tuple(stored.shape))))
    if wants:
        return t
    plain = T.PLAIN_BY_DTYPE.get(d.name)
    if plain is None:
        raise TypeError(f"ember: tensor {name!r} has dtype {d.name}, which GGUF cannot store")
    return plain


def safetensors_to_gguf(src, dst, qtype="q8_0", include=None, metadata: dict | None = None) -> dict:
    """Convert a .safetensors file to GGUF with `qtype` (any GGML type ember quantizes, or f16/bf16/f32).

    include(name, shape) -> bool narrows which eligible tensors are converted. The safetensors
    `__metadata__` strings are kept under their own keys; `metadata` adds/overrides GGUF keys.
    Returns {tensor name: GGML type name written}."""
    from ..io import gguf
    from ..io.safetensors import safe_open
    t = T.get(qtype)
    if t.is_quantized and t.quantize_blocks is None:
        raise ValueError(f"ember: cannot convert to {t.name}; supported: "
                         f"{', '.join(T.supported_quant_types() + ['F16', 'BF16', 'F32'])}")
    f = safe_open(src)
    try:
        meta = dict(f.metadata() or {})
        if t.is_quantized:
            meta["general.quantization_version"] = gguf.GGUFValue(GGML_QUANT_VERSION, gguf.UINT32)
        meta.update(metadata or {})
        plan, entries = {}, {}
        for name in f.keys():
            stored = f.get_stored(name)  # lazy: a memory-mapped view until load() touches it
            out_t = _plan(name, stored, t, include)
            plan[name] = out_t.name
            entries[name] = gguf.Deferred(out_t, stored.shape or (1,), _loader(name, f, out_t))
        gguf.save(entries, dst, metadata=meta)
    finally:
        f.close()
    return plan


def _loader(name, f, out_t):
    def load():
        stored = f.get_stored(name)
        if out_t.np_dtype is not None and stored.array.dtype == out_t.np_dtype:
            return np.ascontiguousarray(stored.array).reshape(-1).view(np.uint8)  # same dtype: copy bytes
        return quantize(_float32(stored), out_t, name).reshape(-1)
    return load


def gguf_to_safetensors(src, dst) -> dict:
    """Convert a GGUF file to .safetensors: quantized tensors are dequantized to float32, plain ones keep
    their dtype. GGUF metadata goes into `__metadata__` (strings as-is, other values JSON-encoded).
    Returns {tensor name: dtype written}."""
    from ..io import safetensors
    from ..io.formats import Stored
    from ..io.gguf import GGUFReader
    from ..dtypes import float32
    with GGUFReader(src) as f:
        meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in f.metadata().items()}
        tensors = {}
        for name in f.keys():
            v = f.get_stored(name)
            tensors[name] = v if isinstance(v, Stored) else Stored(v.numpy(), float32)
        safetensors.save(tensors, dst, metadata=meta)
    return {k: v.dtype.name for k, v in tensors.items()}


# ---------------------------------------------------------------- CLI hook

def add_convert_gguf_parser(subparsers):
    """Register `convert SRC DST [--qtype Q] ` on an argparse subparsers object; the direction follows
    the extensions (.safetensors -> .gguf quantizes, .gguf -> .safetensors dequantizes)."""
    p = subparsers.add_parser("convert", help="convert weights: safetensors <-> GGUF (with quantization)",
                              description=add_convert_gguf_parser.__doc__)
    p.add_argument("src", help="input .safetensors or .gguf file")
    p.add_argument("dst", help="output .gguf or .safetensors file")
    p.add_argument("--qtype", default="q8_0",
                   help=f"GGUF tensor type for 2-d float weights (default q8_0): "
                        f"{', '.join(t.lower() for t in T.supported_quant_types())}, f16, bf16, f32")
    p.set_defaults(func=run_convert)
    return p


def run_convert(args) -> int:
    kinds = tuple(os.path.splitext(os.fspath(p))[1].lower() for p in (args.src, args.dst))
    if kinds == (".safetensors", ".gguf"):
        plan = safetensors_to_gguf(args.src, args.dst, args.qtype)
    elif kinds == (".gguf", ".safetensors"):
        plan = gguf_to_safetensors(args.src, args.dst)
    else:
        raise SystemExit(f"ember convert: expected .safetensors -> .gguf or .gguf -> .safetensors, got "
                         f"{kinds[0] or '(none)'} -> {kinds[1] or '(none)'}")
    counts = {}
    for kind in plan.values():
        counts[kind] = counts.get(kind, 0) + 1
    print(f"{args.src} -> {args.dst}: {len(plan)} tensors ("
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")")
    return 0
