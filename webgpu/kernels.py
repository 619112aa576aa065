"""WGSL sources: load the .wgsl files, specialise a kernel's template, compile once, cache.

A family file holds shared functions, then `//! kernel NAME` sections. A kernel's source is
bindings (generated here: meta, out, in0, in1, ...) + common.wgsl + the family's shared part
+ its section, with `$NAME` placeholders substituted (word types, op expressions, rounding).
"""
from __future__ import annotations

import re
from importlib import resources
from string import Template

from . import pack16

_FILES: dict = {}


def _family(name):
    f = _FILES.get(name)
    if f is None:
        text = resources.files("ember.webgpu").joinpath(f"{name}.wgsl").read_text()
        parts = re.split(r"^//! kernel (\w+)\n", text, flags=re.M)
        f = _FILES[name] = (parts[0], dict(zip(parts[1::2], parts[2::2])))
    return f


def common_source():
    """common.wgsl: the helpers every kernel gets (also prepended to ember.custom_op kernels)."""
    return _family("common")[0]


_HAS: dict = {}


def has_function(family, fname):
    key = (family, fname)
    r = _HAS.get(key)
    if r is None:  # memoised: asked on every elementwise op
        r = _HAS[key] = re.search(rf"\bfn {fname}\(", _family(family)[0]) is not None
    return r


def source(family, kernel, out_type, in_types, atomic_out=False, rw=(), include=(), **subs):
    """Full WGSL of one specialised kernel; `subs` fill the $placeholders; inputs numbered in `rw`
    are bound read_write (a kernel that also writes an input's buffer); `include` names families whose
    shared functions the kernel also calls (a fused elementwise prologue calls elementwise's op_*)."""
    shared, kernels = _family(family)
    subs.setdefault("OT", "f32" if out_type in pack16.PACKED else out_type)
    body = Template(shared + kernels[kernel]).substitute(subs)
    # f16 bindings, f16 values a fused chain holds between two f32 words, or f16 loads/products ($L)
    lines = ["enable f16;"] if any(t in ("f16", "vec4<f16>") for t in (out_type, *in_types)) \
        or re.search(r"\bf16\b", pack16.strip_comments(body)) else []
    lines.append("@group(0) @binding(0) var<storage, read> prm: array<u32>;")
    lines += bindings(1, out_type, in_types, atomic_out, rw)
    return ("\n".join(lines) + "\n" + _family("common")[0] + "".join(_family(f)[0] for f in include)
            + packed_body(body, out_type, in_types, conversions=family != "pack16"))


def bindings(first, out_type, in_types, atomic_out=False, rw=()):
    """Declarations of out (binding `first`) and in0, in1 ... (read_write where numbered in `rw`);
    packed 16-bit words as u32 (pack16.py)."""
    packed_out = out_type in pack16.PACKED
    out_elem = "atomic<u32>" if packed_out else (f"atomic<{out_type}>" if atomic_out else out_type)
    lines = [f"@group(0) @binding({first}) var<storage, read_write> out: array<{out_elem}>;"]
    for k, t in enumerate(in_types):
        mode = "read_write" if k in rw else "read"
        lines.append(f"@group(0) @binding({first + 1 + k}) var<storage, {mode}> in{k}: array<"
                     f"{pack16.storage_type(t) if pack16.is_packed(t) else t}>;")
    return lines


def packed_body(body, out_type, in_types, conversions=True):
    """body with its accesses of packed bindings rewritten, after the helpers they call (pack16.py) and
    pack16.wgsl's conversions (unless the body is of that family, which holds them already)."""
    names = {f"in{k}" for k, t in enumerate(in_types) if pack16.is_packed(t)}
    if out_type in pack16.PACKED:
        names.add("out")
    if not names:
        return body
    return ((_family("pack16")[0] if conversions else "") + pack16.helpers(out_type, in_types)
            + pack16.rewrite(pack16.strip_comments(body), names))


# kernels that write every element of a fresh output (never reading it) and store about as much as they load:
# with a packed output they run into float32 words (already rounded to the format by their $FIX), then one pack
# dispatch stores whole words, where the kernel itself needs two atomics per element (two threads may own one
# word's halves: pack16.py). Measured (bench_webgpu_f16.py, and in Chromium on SwiftShader): softmax 0.33-0.36x
# and rms_norm 0.55-0.84x the atomic form's time on SwiftShader (lavapipe: 0.49-0.89x, 0.84-0.89x); matmul,
# matvec and reductions, whose outputs are a small part of their traffic, gain nothing and pay the extra
# dispatch (a 1x256x256 matvec 1.66x on SwiftShader), so they keep the atomic stores.
WHOLE_OUTPUT = {"norm", "index.gather", "conv_gemm.im2col"}


class PackedStore:
    """A kernel compiled with float32-word output for a packed one: backend._run packs its result."""

    __slots__ = ("f32",)

    def __init__(self, f32):
        self.f32 = f32


class PipelineCache:
    """(family, kernel, types, substitutions) -> compiled pipeline; compiled once per process.
    word_stores False keeps the atomic packed stores in every kernel (bench_webgpu_f16.py measures both)."""

    def __init__(self, adapter):
        self.adapter, self.cache = adapter, {}
        self.word_stores = True

    def get(self, family, kernel, out_type, in_types, atomic_out=False, rw=(), include=(), **subs):
        if (out_type in pack16.PACKED and self.word_stores and not atomic_out
                and (family in WHOLE_OUTPUT or f"{family}.{kernel}" in WHOLE_OUTPUT)):
            return PackedStore(self.get(family, kernel, "f32", in_types, atomic_out, rw, include, **subs))
        key = (family, kernel, out_type, tuple(in_types), atomic_out, tuple(rw), tuple(include),
               tuple(sorted(subs.items())))
        p = self.cache.get(key)
        if p is None:
            code = source(family, kernel, out_type, in_types, atomic_out, rw, include, **subs)
            try:
                p = self.adapter.pipeline(code)
            except Exception as e:
                raise RuntimeError(f"ember: webgpu kernel {family}.{kernel} {key[2:]} failed to compile: {e}") from e
            self.cache[key] = p
        return p
