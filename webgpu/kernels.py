"""WGSL sources: load the .wgsl files, specialise a kernel's template, compile once, cache.

A family file holds shared functions, then `//! kernel NAME` sections. A kernel's source is
bindings (generated here: meta, out, in0, in1, ...) + common.wgsl + the family's shared part
+ its section, with `$NAME` placeholders substituted (word types, op expressions, rounding).
"""
from __future__ import annotations

import re
from importlib import resources
from string import Template

_FILES: dict = {}


def _family(name):
    f = _FILES.get(name)
    if f is None:
        text = resources.files("ember.webgpu").joinpath(f"{name}.wgsl").read_text()
        parts = re.split(r"^//! kernel (\w+)\n", text, flags=re.M)
        f = _FILES[name] = (parts[0], dict(zip(parts[1::2], parts[2::2])))
    return f


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
    subs.setdefault("OT", out_type)
    body = Template(shared + kernels[kernel]).substitute(subs)
    # a fused chain may hold an f16 value between two f32 words
    lines = ["enable f16;"] if "f16" in (out_type, *in_types) or re.search(r"\bf16\(", body) else []
    lines.append("@group(0) @binding(0) var<storage, read> prm: array<u32>;")
    out_elem = f"atomic<{out_type}>" if atomic_out else out_type
    lines.append(f"@group(0) @binding(1) var<storage, read_write> out: array<{out_elem}>;")
    for k, t in enumerate(in_types):
        mode = "read_write" if k in rw else "read"
        lines.append(f"@group(0) @binding({k + 2}) var<storage, {mode}> in{k}: array<{t}>;")
    return "\n".join(lines) + "\n" + _family("common")[0] + "".join(_family(f)[0] for f in include) + body


class PipelineCache:
    """(family, kernel, types, substitutions) -> compiled pipeline; compiled once per process."""

    def __init__(self, adapter):
        self.adapter, self.cache = adapter, {}

    def get(self, family, kernel, out_type, in_types, atomic_out=False, rw=(), include=(), **subs):
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
