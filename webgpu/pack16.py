"""Packed 16-bit storage on WebGPU: bfloat16, and float16 on adapters without `shader-f16`, two elements per
u32 word (half the memory and transfer bytes of the f32 words these dtypes otherwise take).

Kernels are written for one element per array slot. For a packed input or output, `rewrite` turns a
kernel's element accesses into calls of generated helpers, so every kernel family serves packed dtypes
unchanged: `inK[i]` -> `ldK(u32(i))` (load the word, take the half, widen to f32), a read of `out[i]` ->
`ld_out(...)`, and `out[i] = v;` -> `st_out(u32(i), v);`. Two threads may own the two halves of one word,
so the packed output is an array of atomic<u32> and a store clears and sets its own half with atomicAnd /
atomicOr (the other half's bits are never touched: no lost update, no zero-initialised buffer needed).
Stores round to the format (RNE) and conversions are written out bit by bit: WGSL leaves pack2x16float of
inf / NaN indeterminate, and these must round-trip exactly as numpy's.
"""
from __future__ import annotations

import re

BF16, F16 = "bf16x2", "f16x2"  # word names in buffers.WORD / F16_PACKED
PACKED = (BF16, F16)

_CONVERT = """
fn pk_f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-08)); }  // m * 2^-24
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn pk_f32_to_f16(x: f32) -> u32 {
    let v = fix_f16(x);                 // round to nearest even (overflow to inf) first: then exact below
    let u = bitcast<u32>(v);
    let s = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u; }
    if (a >= 0x47800000u) { return s | 0x7c00u; }
    if (a < 0x38800000u) { return s | u32(round(bitcast<f32>(a) * 16777216.0)); }
    return s | (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
}
fn pk_bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }
fn pk_f32_to_bf16(x: f32) -> u32 { return bitcast<u32>(fix_bf16(x)) >> 16u; }
"""


def _half(word):
    return "bf16" if word == BF16 else "f16"


def helpers(out_type, in_types):
    """WGSL helper functions for the packed bindings of one kernel."""
    parts = [_CONVERT]
    for k, t in enumerate(in_types):
        if t in PACKED:
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
