"""The WebGPU backend's `custom_kernel` primitive: compile and dispatch an ember.custom_op's WGSL kernel.

A mixin of WebGPUBackend. The op's source holds `fn main`; this file prepends what every ember kernel gets
(bindings, webgpu/common.wgsl's helpers, element-type aliases, the output's rounding) and checks the bindings
before compiling, because WebGPU's automatic layout silently drops a binding the kernel never reads and the
failure would otherwise surface as an anonymous bind-group error at dispatch.
"""
from __future__ import annotations

import functools
import re

from ember import dtypes as D
from ember.errors import CustomOpError

from . import kernels, pack16
from .buffers import compute_type

@functools.lru_cache(maxsize=256)
def binding_names(source):
    """The binding names (prm, out, in0, in1 ...) a WGSL source mentions outside comments (once a source: a
    fused kernel runs a few times a decoded token)."""
    return frozenset(re.findall(r"\b(prm|out|in\d+)\b", pack16.strip_comments(source)))


def _word_bits(v):
    """A kernel parameter as one u32 word: ints (and bools) as their 32-bit pattern, floats as f32 bits."""
    if isinstance(v, float):
        return ("f", v)
    return ("i", int(v) & 0xFFFFFFFF)


class CustomKernelMixin:
    def custom_kernel(self, kernel, inputs, out_shape, out_dtype, attrs):
        """Run `kernel` (an ember.WGSL descriptor) over `inputs` (GArrays or None) into a fresh contiguous
        array of out_shape/out_dtype; prm = [element count] + kernel.params(*inputs, **attrs)."""
        op = kernel.op
        user = kernel.source()
        names = binding_names(user)
        n_in = len(inputs)
        extra = sorted(int(m[2:]) for m in names if m.startswith("in") and int(m[2:]) >= n_in)
        if extra:
            raise CustomOpError(f"ember: custom op {op!r} (webgpu): the WGSL reads in{extra[0]}, but the op was "
                                f"called with {n_in} input(s) (in0..in{n_in - 1})")
        unread = [k for k in range(n_in) if f"in{k}" not in names]
        if unread:
            raise CustomOpError(f"ember: custom op {op!r} (webgpu): the WGSL never reads binding in{unread[0]} "
                                f"(input {unread[0]} of {n_in}); WebGPU drops unread bindings, so every input "
                                f"must be read (pass None for an absent one and read it under a flag)")
        if "out" not in names:
            raise CustomOpError(f"ember: custom op {op!r} (webgpu): the WGSL never writes the output binding 'out'")
        arrays = [None if x is None else self._dev(x) for x in inputs]
        if not kernel.views:
            arrays = [None if x is None else self.contiguous(x) for x in arrays]
        params = list(kernel.params(*arrays, **attrs)) if kernel.params is not None else []
        grid = kernel.grid(out_shape, *arrays, **attrs) if kernel.grid is not None else None
        writes = getattr(kernel, "writes", ())
        if any(arrays[i] is None for i in writes):
            raise CustomOpError(f"ember: custom op {op!r} (webgpu): an input it writes (in{writes}) is None")
        for i in writes:  # a pending kernel reading a buffer this one writes must run before it (fusion.py)
            self._flush_readers(arrays[i].storage)
        arrays = [self._dummy() if x is None else x for x in arrays]
        out = self._new(out_shape, out_dtype)
        n = out.size
        if n == 0:
            return out
        use_prm = "prm" in names
        out_wt = self._word(out_dtype)[0]
        in_wts = [self._word(x.dtype)[0] for x in arrays]
        key = ("custom", id(kernel), user, out_dtype.name, tuple(in_wts), tuple(map(self._mul_type, in_wts)), use_prm,
               writes)
        pipe = self.pipelines.cache.get(key)
        if pipe is None:
            code = self._custom_source(user, out_dtype, out_wt, in_wts, use_prm, writes)
            try:
                pipe = self.adapter.pipeline(code)
            except Exception as e:
                raise CustomOpError(f"ember: custom op {op!r} (webgpu): its WGSL failed to compile: {e}") from e
            self.pipelines.cache[key] = pipe
        words = [n]
        for v in params:
            kind, w = _word_bits(v)
            words.append(self._bits(w, D.float32) if kind == "f" else w)
        groups = tuple(grid) if grid is not None else self._groups(n, kernel.workgroup_size)
        handles = ([self._meta_handle(words)] if use_prm else []) + [out.storage.handle] + \
            [x.storage.handle for x in arrays]
        self._dispatch(pipe, handles, groups)  # after a held KV-cache write (backend._write_into)
        return out

    def _custom_source(self, user, out_dtype, out_wt, in_wts, use_prm, writes=()):
        lines = ["enable f16;"] if "f16" in (out_wt, *in_wts) else []
        b = 0
        if use_prm:
            lines.append("@group(0) @binding(0) var<storage, read> prm: array<u32>;")
            b = 1
        lines += kernels.bindings(b, out_wt, in_wts, rw=writes)
        def elem(t):  # packed 16-bit words are read and written as f32 values (pack16.py)
            return "f32" if t in pack16.PACKED else t
        lines.append(f"alias OT = {elem(out_wt)};")
        lines += [f"alias T{k} = {elem(t)};" for k, t in enumerate(in_wts)]
        # the type to multiply input k's values in: f16 for float16 in f16 words with f16 compute on, else f32
        # (integers: their own type); accumulate the products in f32
        lines += [f"alias L{k} = {self._mul_type(t)};" for k, t in enumerate(in_wts)]
        common = kernels.common_source()
        if not use_prm:  # the shared view_index helper reads prm, which this kernel does not bind
            common = re.sub(r"\nfn view_index\(.*?\n}\n", "\n", common, flags=re.S)
        fix = self._word(out_dtype)[2]
        ct = compute_type(out_wt)
        if ct == "f32":
            conv = f"OT({fix}(v))" if fix else "OT(v)"
        else:
            conv = f"{fix}(OT(v))" if fix else "OT(v)"
        to_out = f"fn to_out(v: f32) -> OT {{ return {conv}; }}\n"
        return "\n".join(lines) + "\n" + common + to_out + kernels.packed_body(user, out_wt, in_wts)
