"""Packed 16-bit storage on WebGPU: bfloat16, and float16 on adapters without `shader-f16`, two elements per
u32 word (half the memory and transfer bytes of the f32 words these dtypes otherwise take).

Kernels are written for one element per array slot. For a packed input or output, `rewrite` turns a
kernel's element accesses into calls of generated helpers, so every kernel family serves packed dtypes
unchanged: `inK[i]` -> `ldK(u32(i))` (load the word, take the half, widen to f32), a read of `out[i]` ->
`ld_out(...)`, and `out[i] = v;` -> `st_out(u32(i), v);`. Two threads may own the two halves of one word,
so the packed output is an array of atomic<u32> and a store clears and sets its own half with atomicAnd /
atomicOr (the other half's bits are never touched: no lost update, no zero-initialised buffer needed).
Stores round to the format (RNE) and conversions are written out bit by bit (pack16.wgsl): WGSL leaves
pack2x16float of inf / NaN indeterminate, and these must round-trip exactly as numpy's. Most stores skip the
atomics: elementwise results are computed two per thread and stored as whole words (pack16.wgsl's map_pair),
and the row kernels in kernels.WHOLE_OUTPUT write f32 words that map_pair then packs.
"""
from __future__ import annotations

import re

BF16, F16 = "bf16x2", "f16x2"  # word names in buffers.WORD / F16_PACKED
PACKED = (BF16, F16)
# 4 elements per load (matmul_vec4.wgsl binds its inputs as vec4 arrays): two words, a vec2<u32>
VEC4 = {f"vec4<{w}>": w for w in PACKED}


def is_packed(t):
    return t in PACKED or t in VEC4


def storage_type(t):
    """The WGSL element type a packed binding is declared with."""
    return "vec2<u32>" if t in VEC4 else "u32"



def _half(word):
    return "bf16" if word == BF16 else "f16"


def helpers(out_type, in_types):
    """WGSL helper functions for the packed bindings of one kernel (after pack16.wgsl's conversions)."""
    parts = []
    for k, t in enumerate(in_types):
        if t in VEC4:
            f = f"pk_{_half(VEC4[t])}_to_f32"
            parts.append(f"fn ld{k}(i: u32) -> vec4<f32> {{ let w = in{k}[i]; return vec4<f32>({f}(w.x & 0xffffu), "
                         f"{f}(w.x >> 16u), {f}(w.y & 0xffffu), {f}(w.y >> 16u)); }}")
        elif t in PACKED:
            parts.append(f"fn ld{k}(i: u32) -> f32 {{ return pk_{_half(t)}_to_f32((in{k}[i >> 1u] >> ((i & 1u) * 16u)) "
                         f"& 0xffffu); }}")
    if out_type in PACKED:
        h = _half(out_type)
        parts.append(f"fn ld_out(i: u32) -> f32 {{ return pk_{h}_to_f32((atomicLoad(&out[i >> 1u]) >> "
                     f"((i & 1u) * 16u)) & 0xffffu); }}")
        parts.append(f"""fn st_out(i: u32, v: f32) {{
    let sh = (i & 1u) * 16u;
    atomicAnd(&out[i >> 1u], ~(0xffffu << sh));
    atomicOr(&out[i >> 1u], pk_f32_to_{h}(v) << sh);
}}""")
    return "\n".join(parts) + "\n"


def _scan(src, i, stop):
    """Index of the first `stop` (']' closing the bracket opened just before i, or the ';' ending a statement)
    at bracket depth 0 from position i."""
    depth = 0
    while True:
        c = src[i]
        if c == stop and depth == 0:
            return i
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        i += 1


_ACCESS = re.compile(r"\b(out|in\d+)\[")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def strip_comments(source):
    return _COMMENT.sub("", source)


def rewrite(body, packed_names):
    """body with the element accesses of the bindings in `packed_names` ('out', 'in0', ...) turned into helper
    calls (loads anywhere, stores `out[i] = v;`); comments must be stripped first (strip_comments)."""
    out, pos = [], 0
    for m in _ACCESS.finditer(body):
        if m.start() < pos or m.group(1) not in packed_names:
            continue
        name, open_at = m.group(1), m.end()
        close = _scan(body, open_at, "]")
        idx = rewrite(body[open_at:close], packed_names)
        out.append(body[pos:m.start()])
        rest = body[close + 1:]
        assign = re.match(r"\s*=(?!=)\s*", rest)
        if name == "out" and assign:
            start = close + 1 + assign.end()
            end = _scan(body, start, ";")
            out.append(f"st_out(u32({idx}), {rewrite(body[start:end], packed_names)})")
            pos = end
        else:
            out.append(f"{'ld_out' if name == 'out' else 'ld' + name[2:]}(u32({idx}))")
            pos = close + 1
    out.append(body[pos:])
    return "".join(out)
