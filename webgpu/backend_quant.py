"""The WebGPU backend's quantized matmul: GGML blocks uploaded once per weight, decoded in WGSL.

A mixin of WebGPUBackend. Q4_0, Q4_1, Q8_0, Q4_K and Q6_K weights go to the GPU as their raw blocks
(quant.wgsl decodes them); any other GGML type is dequantized on the host once (by the type
descriptor's own dequantize_rows: no backend imports ember.quant) and kept as float32.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ember import dtypes as D

from .buffers import GArray, Storage
from .fusion import XV_PLAIN

_DECODERS = {"Q4_0": "decode_q4_0", "Q4_1": "decode_q4_1", "Q8_0": "decode_q8_0", "Q4_K": "decode_q4_k",
             "Q6_K": "decode_q6_k"}
_MATVEC_ROWS = 8                 # input rows one qmatvec dispatch serves (its accumulators)
_MATVEC_MAX_M = 4 * _MATVEC_ROWS  # past this, dequantize slabs and use the tiled matmul
_SLAB_BYTES = 32 << 20           # float32 bytes of one dequantized slab of weight rows
# float32 weights up to this size take the qmatvec (decode_f32) with a pending input computed inside it; a
# larger one (a tied 51864-row output embedding: 80 MB) reads faster through the vec4 matmul, and one more
# dispatch (the norm) is nothing beside it (bench_webgpu.py's Whisper step on lavapipe)
_F32_MATVEC_BYTES = 16 << 20


def _col_groups(n):
    """One workgroup per output column; 2-D past the 65535-per-dimension limit."""
    return (n, 1, 1) if n <= 65535 else (65535, -(-n // 65535), 1)


class QuantMixin:
    def _qmatmul(self, x, raw, qtype, shape):
        """x (..., K) float -> (..., N) float32 = x @ dequantize(W).T, W (N, K) as GGML blocks
        `raw` (uint8 (N, row_bytes) host array) of the GGML type descriptor `qtype`."""
        n_out, k_in = (int(s) for s in shape)
        if x.shape[-1] != k_in:
            raise ValueError(f"ember: quantized matmul: input of shape {tuple(x.shape)} does not match the "
                             f"weight of shape {(n_out, k_in)} (last dim must be {k_in})")
        lead = tuple(x.shape[:-1])
        m = math.prod(lead)
        decoder = _DECODERS.get(qtype.name)
        pro = self._fused_input(x, k_in) if decoder and 0 < m <= _MATVEC_MAX_M and n_out else None
        if pro is not None:  # x is pending (a norm, SiLU(gate) * up): computed inside the matvec, never written
            return self.reshape(self._qmatvec(m=m, w=self._device_weight(raw, qtype, shape, False), decoder=decoder,
                                              n_out=n_out, k_in=k_in, row_bytes=qtype.row_bytes(k_in), **pro),
                                lead + (n_out,))
        x2 = self.contiguous(self.reshape(self.cast(x, D.float32), (m, k_in)))  # (M, K)
        if decoder is None:
            w = self._device_weight(raw, qtype, shape, dequantize=True)          # (N, K) float32
            return self.reshape(self.matmul(x2, self.permute(w, [1, 0])), lead + (n_out,))
        w = self._device_weight(raw, qtype, shape, dequantize=False)             # raw blocks as u32 words
        row_bytes = qtype.row_bytes(k_in)
        if m == 0 or n_out == 0 or m > _MATVEC_MAX_M:
            return self.reshape(self._q_prefill(x2, w, decoder, n_out, k_in, row_bytes), lead + (n_out,))
        y = self._qmatvec([x2], x2.offset, m, w, decoder, n_out, k_in, row_bytes)
        return self.reshape(y, lead + (n_out,))

    def _fused_input(self, x, k, extra=0):
        """The qmatvec pieces (xs, x_off, xv, pro, rw, xmeta, eps) that compute a pending x (..., k) inside it:
        a norm (norm_prologue.py) or an elementwise chain such as SiLU(gate) * up (fusion.py), within the
        device's storage bindings with `extra` more (a bias); None otherwise."""
        if not self.fuse:
            return None
        pro = self._norm_matvec(x, k, extra)
        if pro is not None:
            return pro
        ew = self._matvec_prologue(x, k)
        if ew is None or len(ew[1]) > self._bindings_left(3 + extra):
            return None
        return self._staged(dict(xs=ew[1], x_off=0, xv=ew[0], xmeta=ew[2]), x.size)

    def _staged(self, pro, n):
        """The pieces with x's n values computed once per workgroup into workgroup memory (the PRO pass) when
        they fit beside the kernel's own: the matvec then reads xst[j] instead of recomputing element j (its
        leaves, index arithmetic, the norm) for every column it serves, which dominated on lavapipe."""
        if n > self._stage_cap():
            return pro
        pro["xv"] = (pro["xv"].replace("fn xv(", "fn xsrc(")                   # sized to x: a pipeline per size
                     + f"\nvar<workgroup> xst: array<f32, {-(-n // 64) * 64}>;\n"
                     "fn xv(j: u32) -> f32 { return xst[j - prm[4]]; }")
        pro["pro"] = (pro.get("pro", "") + " for (var r = lid; r < M * K; r = r + 64u) { xst[r] = xsrc(prm[4] + r); }"
                      " workgroupBarrier();")
        return pro

    def _stage_cap(self):
        """Floats of x a qmatvec workgroup can hold: the device's workgroup storage less the kernel's own
        (part: 2 KiB, the norm's statistics), a multiple of 64."""
        limit = int(self.adapter.limits.get("max-compute-workgroup-storage-size", 16384))
        return max(0, (limit - 2048 - 256) // 4) // 64 * 64

    def _qmatvec(self, xs, x_off, m, w, decoder, n_out, k_in, row_bytes, xv=None, xmeta=(), pro="", rw=(), eps=0,
                 bias=None, tail=(), tail_wgsl=""):
        """(M, N) float32 from the blocks w and x: [x2] read at x_off + row * K, or the inputs of a pending x
        whose element j xv (WGSL, fusion.py / norm_prologue.py) computes from them (views in xmeta), after
        `pro` (a norm's row statistics); inputs numbered in rw (from 1) are written (a residual sum). bias: a
        (N,) bias added to each row; or `tail` inputs bound after xs, read by `tail_wgsl` (which may define
        the decoder and `bias_of(n)`: _f32_matvecs)."""
        if rw and m > _MATVEC_ROWS:  # the residual sum is written by the one dispatch's workgroup 0
            raise ValueError(f"ember: a norm prologue serves at most {_MATVEC_ROWS} rows, got {m}")
        y = self._new((m, n_out), D.float32)                                     # (M, N)
        tpc = self.qmatvec_split
        xs = list(xs) + ([] if bias is None else [bias]) + list(tail)
        types = ["u32"] + [self._word(x.dtype)[0] for x in xs]
        add = "" if bias is None else f" + in{len(xs)}[prm[7] + n]"            # prm[7]: the bias's offset
        if "fn bias_of(" in tail_wgsl:
            add = " + bias_of(n)"
        p = self.pipelines.get("quant", "qmatvec", "f32", types, include=("elementwise",) if xv else (),
                               rw=rw, DECODE=decoder, TPC=str(tpc), XV=(xv or XV_PLAIN) + "\n" + tail_wgsl, PRO=pro,
                               BIAS=add)
        for m0 in range(0, m, _MATVEC_ROWS):
            rows = min(_MATVEC_ROWS, m - m0)
            # x rows from element prm[4] of x (its buffer, or the pending x's flat index), out rows from prm[5] of y's
            meta = [rows, n_out, k_in, row_bytes, x_off + m0 * k_in, m0 * n_out, eps,
                    0 if bias is None else bias.offset] + list(xmeta)
            self._run(p, meta, y, [w] + xs, _col_groups(-(-n_out // (64 // tpc))))
        return y

    def _f32_matvec(self, a, b, bias=None):
        """a (..., M, K) @ b (K, N) as the qmatvec over float32 weights when a is pending (a norm, an
        elementwise chain) and computed inside it, M <= 32, K a multiple of 32, b the transposed view of a
        contiguous (N, K) weight (F.linear's: decode_f32) or a contiguous (K, N) matrix (a rope step's
        rotation: decode_f32t); else None (matmul dispatches as usual)."""
        if len(b.shape) != 2 or not b.shape[0] or b.offset or a.dtype is not D.float32 or b.dtype is not D.float32 \
                or b.shape[0] % 32:
            return None
        k_in, n_out = b.shape
        if 4 * k_in * n_out > _F32_MATVEC_BYTES:  # a large weight's read dominates: the vec4 matmul after the norm
            return None
        if b.strides == (1, k_in):
            decoder, row_bytes = "decode_f32", 4 * k_in
        elif b.strides == (n_out, 1):
            decoder, row_bytes = "decode_f32t", 4
        else:
            return None
        m = a.size // max(k_in, 1)
        if not (0 < m <= _MATVEC_MAX_M and n_out):
            return None
        if bias is not None and bias.dtype is not D.float32:
            return None
        pro = self._fused_input(a, k_in, extra=0 if bias is None else 1)
        if pro is None:
            return None
        if bias is not None:
            if bias.strides[0] != 1 and n_out > 1:
                bias = self.contiguous(bias)
            pro["bias"] = bias
        w = GArray(b.storage, (b.size,), (1,), 0, D.uint32)                     # (N * K) f32 words, as u32
        y = self._qmatvec(m=m, w=w, decoder=decoder, n_out=n_out, k_in=k_in, row_bytes=row_bytes, **pro)
        return self.reshape(y, a.shape[:-1] + (n_out,))

    def _linears(self, x, ws, bs):
        """x (..., K) @ [w0 | w1 | ...].T + [b0 | b1 | ...] -> (..., sum N) in one qmatvec reading each (N_i, K)
        float32 weight where it lies (no concatenated copy), when x is a pending decode row (a norm: q, k and v
        of one attention from one layer norm); None otherwise (F.linears composes one linear per weight)."""
        k_in = x.shape[-1]
        m = x.size // max(k_in, 1)
        if not (self.fuse and self.decode_fusion and 0 < m <= _MATVEC_MAX_M and k_in and k_in % 32 == 0
                and x.dtype is D.float32) or any(
                w.dtype is not D.float32 or not w.contiguous or len(w.shape) != 2 or w.shape[1] != k_in for w in ws) \
                or any(b is not None and (b.dtype is not D.float32 or b.shape != w.shape[:1]) for w, b in zip(ws, bs)):
            return None
        biases = [self.contiguous(b) for b in bs if b is not None]
        tail = list(ws[1:]) + biases
        pro = self._fused_input(x, k_in, extra=len(tail))
        if pro is None:
            return None
        first = 1 + len(pro["xs"])                                              # tail bindings start here
        ends, e = [], 0
        for w in ws:
            e += w.shape[0]
            ends.append(e)
        branches, bias_lines, bi = [], [], first + len(ws) - 1
        for i, (w, b) in enumerate(zip(ws, bs)):
            start = ends[i] - w.shape[0]
            buf = "in0" if i == 0 else f"in{first + i - 1}"
            branches.append(f"if (n < {ends[i]}u) {{ let o = (n - {start}u) * K + c * 32u; for (var i = 0u; i < 32u; "
                            f"i = i + 1u) {{ wv[i] = bitcast<f32>({buf}[o + i]); }} return; }}")
            if b is not None:
                bias_lines.append(f"if (n >= {start}u && n < {ends[i]}u) {{ return in{bi}[n - {start}u]; }}")
                bi += 1
        # row = n * prm[3] with prm[3] = 4 (decode_f32t's convention): the column n selects the weight
        src = ("fn decode_cat(row: u32, c: u32) { let n = row >> 2u; let K = prm[2]; " + " ".join(branches) + " }\n"
               + ("fn bias_of(n: u32) -> f32 { " + " ".join(bias_lines) + " return 0.0; }" if bias_lines else ""))
        w0 = GArray(ws[0].storage, (ws[0].size,), (1,), 0, D.uint32)
        y = self._qmatvec(m=m, w=w0, decoder="decode_cat", n_out=ends[-1], k_in=k_in, row_bytes=4, tail=tail,
                          tail_wgsl=src, **pro)
        return self.reshape(y, x.shape[:-1] + (ends[-1],))

    def _q_prefill(self, x2, w, decoder, n_out, k_in, row_bytes):
        """Many input rows: dequantize slabs of weight rows on the GPU, multiply with the tiled matmul."""
        m = x2.shape[0]
        if m == 0 or n_out == 0:
            return self._new((m, n_out), D.float32)
        p = self.pipelines.get("quant", "dequant", "f32", ["u32"], DECODE=decoder)
        step = max(1, _SLAB_BYTES // (4 * k_in))
        y = None if step >= n_out else self._new((m, n_out), D.float32)          # (M, N)
        for r0 in range(0, n_out, step):
            rows = min(step, n_out - r0)
            slab = self._new((rows, k_in), D.float32)                              # (rows, K)
            self._run(p, [rows, n_out, k_in, row_bytes, r0], slab, [w], self._groups(rows * (k_in // 32)))
            part = self.matmul(x2, self.permute(slab, [1, 0]))                     # (M, rows)
            if y is None:
                return part
            self._copy_into(self.slice(y, [0, r0], [m, r0 + rows], [1, 1]), part)
        return y

    def _device_weight(self, raw, qtype, shape, dequantize):
        """The weight on this device, uploaded once per host array: raw blocks as u32 words (plus
        one spare word for quant.wgsl's unaligned reads) or, dequantize=True, float32 (N, K)."""
        cache = self.__dict__.setdefault("_qweights", {})
        key = (id(raw), dequantize)
        hit = cache.get(key)
        if hit is not None and hit[0]() is raw:
            return hit[1]
        rows = np.asarray(raw)                                                   # (N, row_bytes) uint8
        want = (int(shape[0]), qtype.row_bytes(int(shape[1])))
        if rows.dtype != np.uint8 or rows.shape != want:
            raise ValueError(f"ember: quantized matmul: {qtype.name} weight of shape {tuple(shape)} needs uint8 "
                             f"blocks of shape {want}, got {rows.dtype} {rows.shape}")
        if dequantize:
            dev = self.from_numpy(qtype.dequantize_rows(rows).reshape(want[0], -1), D.float32)
        else:
            flat = np.zeros(-(-rows.size // 4) * 4 + 4, np.uint8)
            flat[:rows.size] = rows.reshape(-1)
            words = flat.view(np.uint32)
            dev = GArray(Storage(self.pool, words.nbytes), (words.size,), (1,), 0, D.uint32)
            self._upload(dev, words)
        cache[key] = (weakref.ref(raw, lambda _, c=cache, k=key: c.pop(k, None)), dev)
        return dev
