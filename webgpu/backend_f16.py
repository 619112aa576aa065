"""16-bit storage choices of the WebGPU backend: bfloat16, and float16 without shader-f16, packed two to a u32
word (pack16.py) or widened to f32 words; float16 natively (f16 words) where the adapter has shader-f16.

A mixin of WebGPUBackend: `set_pack16(on)` picks the words arrays of those dtypes are stored in. Kernels
look a word up by dtype, so an array made under the other setting would be misread: the switch is refused
while any float16/bfloat16 array of this backend is alive (EMBER_WEBGPU_PACK16=1 sets it from the start).
The packed forms cross to and from the host as their 16-bit patterns (numpy float16 values, bfloat16 bits),
half the bytes.
"""
from __future__ import annotations

import weakref

import numpy as np

from ember import dtypes as D
from ember import settings
from ember.errors import EmberError

from .buffers import BF16_PACKED, F16_NATIVE, F16_PACKED, WORD, GArray, Storage, compute_type
from .pack16 import PACKED


class Pack16Mixin:
    HALF_DTYPES = (D.float16, D.bfloat16)

    def _init_words(self):
        """float16 native with shader-f16 (EMBER_WEBGPU_F16=0 turns it off); 16-bit packing from EMBER_WEBGPU_PACK16."""
        self._half_storages = weakref.WeakSet()  # buffers of live float16/bfloat16 arrays
        self.words = dict(WORD)
        self.f16_native = self.has_f16 and settings.get("EMBER_WEBGPU_F16")
        # f16 arithmetic on native float16 words (see _mul_type); EMBER_WEBGPU_F16_COMPUTE=0: products in f32
        self.f16_compute = settings.get("EMBER_WEBGPU_F16_COMPUTE")
        if self.f16_native:
            self.words[D.float16] = F16_NATIVE
        self.set_pack16(settings.get("EMBER_WEBGPU_PACK16"))

    def set_pack16(self, on=True):
        """Store new bfloat16 (and, without native f16, float16) arrays packed two per word (on) or as f32
        words (off): packed halves their memory and transfers; each kernel unpacks its loads. Only while no
        float16/bfloat16 array of this backend exists (their words would be misread after the switch)."""
        alive = len(self._half_storages)
        if alive and bool(on) != getattr(self, "pack16", None):
            raise EmberError(f"ember: webgpu set_pack16({on}): {alive} float16/bfloat16 array(s) of this backend are "
                             f"alive; switch before making any (or set EMBER_WEBGPU_PACK16 before the first use)")
        self.pack16 = bool(on)
        self.words[D.bfloat16] = BF16_PACKED if on else WORD[D.bfloat16]
        if not self.f16_native:
            self.words[D.float16] = F16_PACKED if on else WORD[D.float16]

    @staticmethod
    def _packed_bits(a, dtype):
        """A host array of a packed dtype as its uint16 patterns (bfloat16 storage is already its bits)."""
        if dtype is D.bfloat16:
            return a.astype(np.uint16, copy=False)
        return a.astype(np.float16, copy=False).view(np.uint16)

    @staticmethod
    def _from_packed(w, dtype):
        return w.copy() if dtype is D.bfloat16 else w.view(np.float16).copy()

    def _is_packed(self, dtype):
        return self._word(dtype)[0] in PACKED

    def _packed_from(self, out, compute):
        """Fill the packed contiguous `out` from `compute(tmp)`, which writes its values (rounded to the format)
        into a float32-word temporary: then one pack dispatch (map_pair), a whole word per thread."""
        n = out.size
        tmp = GArray(Storage(self.pool, 4 * n), out.shape, out.strides, 0, D.float32)
        compute(tmp)
        fmt = "bf16" if out.dtype is D.bfloat16 else "f16"
        p = self.pipelines.get("pack16", "map_pair", "u32", ["f32"], LOADS="", EXPR="in0[i]", FMT=fmt)
        self._run(p, [n], out, [tmp], self._groups(-(-n // 2)))
        return out

    def _mul_type(self, word):
        """The WGSL type a matmul/attention kernel loads, tiles and multiplies `word` elements in: f16 for native
        float16 words with f16 compute on (half the shared memory and registers, and double-rate f16 ALUs on
        most GPUs), each product then widened into an f32 accumulator; otherwise the compute type (f32).
        A product rounds to f16 (relative error <= 2^-11, overflow past 65504) where the f32 product of two
        f16 values is exact: that is the whole difference from the numpy backend, which sums in f32 too."""
        return "f16" if word == "f16" and self.f16_compute else compute_type(word)

    def half_note(self):
        """How float16 and bfloat16 are stored and multiplied here, for `ember info`."""
        w = self.words[D.float16][0]
        if w == "f16":
            f16 = ("float16 in f16 words, f16 compute with f32 accumulation" if self.f16_compute else
                   "float16 in f16 words, f32 compute (EMBER_WEBGPU_F16_COMPUTE=0)")
        else:
            f16 = f"float16 {'packed two per u32' if w in PACKED else 'in f32 words'}, f32 compute"
        return f"{f16}; bfloat16 {'packed two per u32' if self.pack16 else 'in f32 words'}"
