"""The CPU backend's kernels on the page's kernel pool (cpu_pool.py): the same C as the Pyodide side module
(cpu_wasm_kernels.py), so the same bits, with each product's output rows split between the pool's threads.

Every call copies its activations into the pool's shared memory and its results back (a memcpy each way, ~10 GB/s),
but for a conv's output, whose copy there is kept while its array lives, for the next conv to read (_keep);
weights are there once: a QTensor's blocks and a decode plan's layers are placed at their first use and kept while
their array lives (Pool.place). A float GEMM copies both operands per call: its weights are numpy arrays a model may
write in place, and for the products it takes (at least POOL_MIN_MACS multiply-adds) the copy is a few percent.
Smaller products run on this thread's side module, where a copy and a hand-off would cost more than they save.

PoolFloatKernels: cpu_float_kernels.FloatKernels (conv.c, attention.c, rows.c) on the pool, with the same copies as
the GEMM (operands in, strides kept; results out); calls too small to split, and row kernels that cost no more
than their copies (LayerNorm, ReLU, a bias), stay on the side module.

PoolDecodePlan: decode.c's plan with its layers in the shared memory and a copy of the KV cache there: the numpy
cache stays the model's (the composed path reads and writes it); each step writes its new rows back to it, and
a change by anyone else (a prompt's prefill, a beam reorder: KVCache.writes) copies the cache in again.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from .cpu_decode import L_CAPACITY, L_KCACHE, L_LENGTH, L_SLOT, DecodePlan
from .cpu_decode_xattn import _L_CACHE, XattnPlan
from .cpu_float_kernels import ACTS, FloatKernels, _strides
from .cpu_matmul import blocked, derived_copy
from .cpu_pool import Block, SharedRows, addr, i32
from .cpu_wasm_kernels import EP_ACT, EP_COLS, EP_NONE, EP_ROWS

F32 = np.dtype(np.float32)
POOL_MIN_MACS = 1 << 20  # below this a product stays on this thread (its copies and hand-off ~30 us)
POOL_MIN_ROWS = 16  # a float product with fewer rows of A stays too: its B, copied at every call, is read only
# that many times (a decode step's x @ W^T reads W once: the copy costs what the product does, 80 MB a token
# for Whisper's tied 51,864-word output)
POOL_MIN_ELEMENTS = 1 << 17  # bias + GELU / SiLU rows on fewer floats stay: parallel.h would not split them
POOL_ROW_ACTS = (ACTS["silu"], ACTS["gelu"], ACTS["gelu_tanh"])  # the row kernels the pool takes: LayerNorm, ReLU and
# a bias alone stream their rows at about the speed of the copies in and out (Node, 1500 x 1536 floats: LayerNorm
# 2.4 ms on one thread, the copies 1.8 ms), GELU and SiLU compute (21.7 and 11.5 ms)
RESIDENT_MIN_BYTES = 1 << 16  # a conv's output at least this large stays in the pool's memory while it lives
RESIDENT_MAX_BYTES = 256 << 20  # (in all: past this, outputs leave through the per-call block as before)
IO_BYTES = 16 << 20  # a product's result goes out in pieces of about this much (a 2k prompt's attention scores are
# 62 MB for Gemma 3 270M): the pool's per-call block, which its memory keeps, stays this size


def _kernel_type(w, type_id: int) -> int:
    """The type id the pool's kernels take for weight w of GGML type `type_id` (its rows' bytes layout, if any)."""
    return w.kernel_type(type_id) if isinstance(w, SharedRows) else type_id


def _align(n: int) -> int:
    return -(-n // 64) * 64


class PoolKernels:
    """q8_matmul, qmatmul, matmul and the decode step of cpu_wasm_kernels.WasmKernels, on the pool's threads."""

    def __init__(self, pool, side):
        self.pool, self.side = pool, side
        ex = pool.exports
        self._q8_matmul, self._qmatmul, self._sgemm_batched = ex.ember_q8_matmul, ex.ember_qmatmul, ex.ember_sgemm_batched
        self._sgemm_exact = ex.ember_sgemm_batched_exact  # multiply then add, never fused: the plain module's bits
        self._sgemm_ep, self._sgemm_ep_exact = ex.ember_sgemm_ep, ex.ember_sgemm_ep_exact  # (a bias and activation
        # in the product's epilogue)
        self._decode, self._argmax, self._qdequant = ex.ember_decode, ex.ember_argmax_f32, ex.ember_qdequant
        self.qmatmul_types = side.qmatmul_types
        self._gemm_scratch = Block(pool.arena, int(ex.ember_sgemm_scratch_floats()) * 4 * pool.threads)
        self._io = Block(pool.arena, 1 << 20)
        self._float = None

    @property
    def threads(self) -> int:
        return self.pool.threads

    def describe(self) -> str:
        return f"wasm kernel pool, {self.pool.threads} threads"

    def _io_at(self, nbytes: int) -> int:
        """The per-call block (operands in, results out), grown as needed: calls come one at a time."""
        if self._io.nbytes < nbytes:
            old = self._io.nbytes
            self._io = None  # (freed before the larger one is taken)
            self._io = Block(self.pool.arena, max(nbytes, 2 * old))
        return self._io.at

    def _weights(self, w) -> int:
        """A weight's address in the shared memory: where SharedRows hold it, else its placed copy."""
        return w.at if isinstance(w, SharedRows) else self.pool.place(w).at

    # ---------------------------------------------------------------- quantized products

    def act_bytes(self, type_id: int, m: int, k: int) -> int:
        return self.side.act_bytes(type_id, m, k)

    def decode_scratch_bytes(self, plan: np.ndarray, max_length: int) -> int:
        return self.side.decode_scratch_bytes(plan, max_length)

    def q8_matmul(self, x: np.ndarray, w: np.ndarray, type_id: int, out_features: int) -> np.ndarray:
        """WasmKernels.q8_matmul on the pool: x (m, k) float32 C-contiguous, w (out_features, row_bytes) uint8."""
        m, k = x.shape
        if m * out_features * k < POOL_MIN_MACS and not isinstance(w, SharedRows):
            return self.side.q8_matmul(x, w, type_id, out_features)
        return self.pool.read(self._q8_product(x, w, type_id, out_features), np.empty((m, out_features), F32))

    def q8_matmul_argmax(self, x: np.ndarray, w, type_id: int, out_features: int) -> int:
        """int(np.argmax(self.q8_matmul(x, w, type_id, out_features))) for one row x (1, k), scanned where the
        logits lie in the shared memory (a greedy decode's pick: no 1 MB read back and numpy scan for Gemma 3's
        262k)."""
        return int(self._argmax(i32(self._q8_product(x, w, type_id, out_features)), out_features))

    def argmax(self, y: np.ndarray) -> int:
        """int(np.argmax(y)) for float32 y in this thread's heap (the side module's scan)."""
        return self.side.argmax(y)

    def _q8_product(self, x, w, type_id, out_features) -> int:
        """x @ W.T computed on the pool into the per-call block: the address of its (m, out_features) floats."""
        m, k = x.shape
        size = self.side.act_bytes(type_id, m, k)
        if size < 0:
            raise ValueError(f"ember: wasm q8 matmul: no kernel for GGML type {type_id} with rows of {k}")
        ybytes = _align(4 * m * out_features)
        xat = self._io_at(_align(x.nbytes) + ybytes + size)
        yat = xat + _align(x.nbytes)
        self.pool.write(xat, x)
        rc = self._q8_matmul(_kernel_type(w, type_id), m, out_features, k, i32(self._weights(w)), i32(xat), k,
                             i32(yat), out_features, i32(yat + ybytes))
        self.pool.check(rc, "quantized matmul")
        return yat

    def qmatmul(self, x: np.ndarray, w: np.ndarray, type_id: int, out_features: int) -> np.ndarray:
        """WasmKernels.qmatmul (float32 activations, W decoded in registers) on the pool."""
        m, k = x.shape
        if m * out_features * k < POOL_MIN_MACS and not isinstance(w, SharedRows):
            return self.side.qmatmul(x, w, type_id, out_features)
        y = np.empty((m, out_features), F32)
        wat = self._weights(w)
        xat = self._io_at(_align(x.nbytes) + _align(y.nbytes) + _align(m * k // 32 * 4))
        yat = xat + _align(x.nbytes)
        self.pool.write(xat, x)
        rc = self._qmatmul(_kernel_type(w, type_id), m, out_features, k, i32(wat), i32(xat), k, i32(yat),
                           out_features, i32(yat + _align(y.nbytes)))
        if self.pool.check(rc, "quantized matmul") != 0:
            raise ValueError(f"ember: wasm qmatmul: no kernel for GGML type {type_id} with rows of {k}")
        return self.pool.read(yat, y)

    def qdequant(self, w: np.ndarray, type_id: int, k: int) -> np.ndarray:
        return self.side.qdequant(w, type_id, k)  # (a slab at a time, between GEMMs: memory-bound, small)

    def qrows(self, w: SharedRows, ids: np.ndarray, type_id: int, k: int) -> np.ndarray:
        """Rows ids of a weight the pool holds, dequantized where they lie and read back: float32 (n, k)."""
        y = np.empty((len(ids), k), F32)
        at, stride, kind = self._io_at(_align(y.nbytes)), w.stride, w.kernel_type(type_id)
        for i, r in enumerate(ids.tolist()):
            rc = self._qdequant(kind, 1, k, i32(w.at + r * stride), i32(at + i * k * 4))
            if self.pool.check(rc, "dequantizing rows") != 0:
                raise ValueError(f"ember: wasm qdequant: no kernel for GGML type {type_id} with rows of {k}")
        return self.pool.read(at, y)

    # ---------------------------------------------------------------- float GEMM

    def takes_matmul(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether a @ b is for the pool: large enough, and each B read by enough rows of A to pay for its copy."""
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m = a.shape[-2]
        return m >= POOL_MIN_ROWS and math.prod(batch) * m * a.shape[-1] * b.shape[-1] >= POOL_MIN_MACS

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, exact: bool = False,
               bias: np.ndarray | None = None, act: str | None = None) -> np.ndarray:
        """WasmKernels.matmul on the pool: a (..., M, K) @ b (..., K, N) -> (..., M, N) float32 (into `out` when
        given), batched and broadcast, any strides. exact: the plain SIMD128 module's bits whatever this module's
        variant (deterministic mode: gemm_exact.c's multiply-add is never fused). bias: (N,) float32 added to every
        row in the shared memory before the result comes out (gemm.c's epilogue, as each panel of the product is
        done: one float add, numpy's `c += bias` bits), for a linear layer (cpu_fused.linear); act (with a bias):
        then that activation with rows.c's bits (cpu_fused.linear_act)."""
        (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
        if k2 != k:
            raise ValueError(f"ember: matmul shapes {a.shape} and {b.shape} do not match (K {k} vs {k2})")
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        shape = batch + (m, n)
        into = out is not None and out.shape == shape and out.dtype == F32 and out.flags.c_contiguous
        c = out if into else np.empty(shape, F32)
        if m and n:
            gemm = self._sgemm_exact if exact else self._sgemm_batched
            if batch and b.ndim == 2 and a.flags.c_contiguous:
                # (..., M, K) @ (K, N), a linear layer: one GEMM over all of a's rows, as the side module does (a
                # batch of short rows, MiniLM's 32 sentences x 19 tokens, would pack the weight once per sentence)
                # (the side module's bits: it folds the same way, so 1 and N threads agree)
                self._batched(a.reshape(-1, k), b, c.reshape(-1, n), gemm, (bias, act))
            else:
                a = np.broadcast_to(a, batch + (m, k)) if a.shape[:-2] != batch else a
                b = np.broadcast_to(b, batch + (k, n)) if b.shape[:-2] != batch else b
                if len(batch) <= 1:
                    self._batched(a, b, c, gemm, (bias, act))
                else:  # (B, heads, ...): one batch dim, one call (a stack in heads-inside-tokens order copied first)
                    self._batched(_one_batch_dim(a), _one_batch_dim(b), c.reshape(-1, m, n), gemm, (bias, act))
        if out is not None and not into:
            np.copyto(out, c)
            return out
        return c

    def _batched(self, a, b, c, gemm, epilogue=(None, None)):
        """a (B?, M, K) @ b (B?, K, N) -> c (B?, M, N) C-contiguous, in calls of at most ~IO_BYTES of c each: whole
        matrices of the batch, or blocks of rows (never one row alone where M > 1: gemm.c takes another path for
        a single row, whose sums run in another order)."""
        if c.nbytes <= IO_BYTES:
            return self._call(a, b, c, gemm, epilogue)
        if c.ndim == 3 and c.shape[0] > 1:
            step = max(1, IO_BYTES // c[0].nbytes)
            for t in range(0, c.shape[0], step):
                self._batched(a[t:t + step], b[t:t + step], c[t:t + step], gemm, epilogue)
            return
        m = c.shape[-2]
        step = max(4, IO_BYTES // (4 * c.shape[-1]) // 4 * 4)
        starts = list(range(0, m, step))
        if m - starts[-1] == 1 and len(starts) > 1:
            starts.pop()  # (the last row goes with the block before it)
        for i, r in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else m
            self._call(a[..., r:e, :], b, c[..., r:e, :], gemm, epilogue)

    def _call(self, a, b, c, gemm, epilogue=(None, None)):
        """a (B?, M, K) @ b (B?, K, N) -> c (B?, M, N) with unit column stride, in one call on the pool (and one
        more for an epilogue: (bias (N,), activation) or (None, None))."""
        bias, act = epilogue
        three = c.ndim == 3
        batch, (m, n), k = (c.shape[0] if three else 1), c.shape[-2:], a.shape[-1]
        a, b = _dense(a), _dense(b)
        sa, sb = _span(a), _span(b)
        extra = 0 if bias is None else _align(n * 4)  # (the bias)
        io = self._io_at(_align(sa[0]) + _align(sb[0]) + _align(m * n * batch * 4) + 64 + extra)
        at_a, at_b, at_c = io, io + _align(sa[0]), io + _align(sa[0]) + _align(sb[0])
        ea, eb = self._stage(a, sa, at_a), self._stage(b, sb, at_b)
        strides = np.array([_es(a, -3) if three else 0, _es(a, -2), _es(a, -1), _es(b, -3) if three else 0,
                            _es(b, -2), _es(b, -1), m * n, n], np.int32)  # (c is written contiguous in the pool)
        at_s = at_c + _align(m * n * batch * 4)
        self.pool.write(at_s, strides)
        if bias is None:
            rc = gemm(batch, m, n, k, i32(ea), i32(eb), i32(at_c), i32(at_s), i32(self._gemm_scratch.at), 0)
        else:  # c = act(c + bias) as each panel of it is done (gemm.c's epilogue: rows.c's bias_act bits)
            at_bias = at_s + 64
            self.pool.write(at_bias, np.ascontiguousarray(bias, F32))
            ep = self._sgemm_ep_exact if gemm is self._sgemm_exact else self._sgemm_ep
            rc = ep(batch, m, n, k, i32(ea), i32(eb), i32(at_c), i32(at_s), i32(self._gemm_scratch.at), i32(at_bias),
                    EP_COLS, ACTS[act])
        self.pool.check(rc, "matmul")
        if c.flags.c_contiguous:
            self.pool.read(at_c, c)
        else:  # a block of rows of a larger result
            c[...] = self.pool.read(at_c, np.empty(c.shape, F32))

    # ---------------------------------------------------------------- SiLU, GELU (elementwise.c)

    def silu(self, x: np.ndarray) -> np.ndarray:
        return self._unary(0, x)

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return self._unary(1, x)

    def _unary(self, which: int, x: np.ndarray) -> np.ndarray:
        """WasmKernels.silu / gelu with the elements split between the pool's threads (every lane alone: the same
        bits); fewer than POOL_MIN_ELEMENTS on this thread. Whisper tiny's (1500, 1536) GELU: 11.5 ms on one thread,
        the copies in and out ~1.8 ms."""
        if x.size < POOL_MIN_ELEMENTS:
            return self.side.gelu(x) if which else self.side.silu(x)
        x = np.ascontiguousarray(x, F32)
        y = np.empty_like(x)
        at_x = self._io_at(2 * _align(x.nbytes))
        at_y = at_x + _align(x.nbytes)
        self.pool.write(at_x, x)
        self.pool.check(self.pool.exports.ember_unary_blocks_f32(which, i32(at_x), i32(at_y), x.size), "SiLU/GELU")
        return self.pool.read(at_y, y)

    def attention_blocks(self, q3, kt, v1, exact: bool) -> np.ndarray | None:
        """cpu_fused._blocked_attention's products and exponentials on the pool: q3 (heads, L, E) @ kt (heads, E, S),
        a block of query rows at a time, its exponentials (exp_rowmax), then @ v1 (heads, S, Ev + 1) -> (heads, L,
        Ev + 1) (the weighted values | the sums). The operands go in once and each block's scores stay in the
        shared memory (the composed path copies them out and in again around exp_rowmax); the calls are mm's and
        exp_rowmax's, so the bits are theirs: a row's sums do not depend on the rows beside it (gemm.c), except
        a block of one row (a row-vector product, which deterministic mode's mm makes column-major): then None.
        Blocks are as large as IO_BYTES of scores allows (a whole head of Whisper's: 1500 rows), so that the
        values' product (S x 65) has enough rows to split evenly (349 rows are 3 of gemm.c's units): Whisper tiny's
        encoder attention (6 heads, 1500 x 1500) 125 ms in blocks of 349 rows, 107 ms in whole heads, on 2 threads
        (Node; 183-199 ms on one)."""
        heads, n_q, e = q3.shape
        s_len, ev1 = kt.shape[2], v1.shape[2]
        rows = max(16, min(n_q, IO_BYTES // (4 * s_len)))
        if n_q % rows == 1:
            return None
        q3, kt, v1 = (np.ascontiguousarray(t, F32) for t in (q3, kt, v1))
        acc = np.empty((heads, n_q, ev1), F32)
        sizes = [q3.nbytes, kt.nbytes, v1.nbytes, acc.nbytes, rows * s_len * 4, 64]
        at_q = self._io_at(sum(_align(n) for n in sizes))
        at_k = at_q + _align(q3.nbytes)
        at_v = at_k + _align(kt.nbytes)
        at_a = at_v + _align(v1.nbytes)
        at_s = at_a + _align(acc.nbytes)
        at_st = at_s + _align(rows * s_len * 4)
        for a, at in ((q3, at_q), (kt, at_k), (v1, at_v)):
            self.pool.write(at, a)
        gemm, scratch = self._sgemm_exact if exact else self._sgemm_batched, i32(self._gemm_scratch.at)
        rowmax = self.pool.exports.ember_exp_rowmax_rows_f32
        for h in range(heads):
            for i in range(0, n_q, rows):
                n = min(rows, n_q - i)
                self.pool.write(at_st, np.array([0, e, 1, 0, s_len, 1, n * s_len, s_len], np.int32))
                rc = gemm(1, n, s_len, e, i32(at_q + 4 * (h * n_q + i) * e), i32(at_k + 4 * h * e * s_len), i32(at_s),
                          i32(at_st), scratch, 0)
                rc = rc or rowmax(i32(at_s), n, s_len, s_len)
                self.pool.write(at_st, np.array([0, s_len, 1, 0, ev1, 1, n * ev1, ev1], np.int32))
                rc = rc or gemm(1, n, ev1, s_len, i32(at_s), i32(at_v + 4 * h * s_len * ev1),
                                i32(at_a + 4 * (h * n_q + i) * ev1), i32(at_st), scratch, 0)
                self.pool.check(rc, "attention")
        return self.pool.read(at_a, acc)

    def _stage(self, x, span, at) -> int:
        """Copy the bytes x's elements span into the shared memory at `at`; -> the shared address of x's first
        element (strides are kept: a transposed or broadcast weight goes as it is)."""
        nbytes, low = span
        if nbytes:
            self.pool.write_raw(addr(x) + low, nbytes, at)
        return at - low

    def float_kernels(self, side: FloatKernels) -> "PoolFloatKernels":
        """The float kernels on the pool, over `side` (the side module's, for what stays on this thread)."""
        if self._float is None or self._float.side is not side:
            self._float = PoolFloatKernels(self, side)
        return self._float

    # ---------------------------------------------------------------- the decode step

    def decode_plan(self, spec: dict) -> "PoolDecodePlan":
        return PoolDecodePlan(self, spec)


class PoolFloatKernels(FloatKernels):
    """FloatKernels' conv2d, attention, layer_norm and bias_act on the pool's threads: the same C as the side
    module (`side`), so the same bits; small calls run on `side`, as do xattn_decode with a plan in Pyodide's
    heap (cpu_decode_xattn gives the pool its own plan, PoolXattnPlan) and the feature-map passes (max pooling,
    upsampling: memory-bound, a copy into the pool's memory would cost what they do)."""

    def __init__(self, kern: PoolKernels, side: FloatKernels):
        self.native, self.kern, self.pool, self.side = False, kern, kern.pool, side
        ex = self.pool.exports
        self._conv2d, self._conv2d_scratch_floats = ex.ember_conv2d, ex.ember_conv2d_scratch_floats
        self._conv3x3_winograd = ex.ember_conv3x3_winograd
        self._conv3x3_winograd_scratch_floats = ex.ember_conv3x3_winograd_scratch_floats
        self._attention, self._attention_scratch_floats = ex.ember_attention, ex.ember_attention_scratch_floats
        self._layer_norm, self._bias_act = ex.ember_layer_norm, ex.ember_bias_act
        self._scratch_block = Block(self.pool.arena, 1 << 16)
        self._plans: dict = {}  # (kernel, its size fields) -> (its parameter block, scratch floats): _conv
        self._resident: dict = {}  # id(a conv's output) -> (weakref to it, the Block that holds its copy): _keep
        self._resident_bytes = 0

    def xattn_decode(self, plan, fparams, x, scratch) -> int:
        return self.side.xattn_decode(plan, fparams, x, scratch)

    def xattn_decode_scratch_bytes(self, plan, max_keys) -> int:
        return self.side.xattn_decode_scratch_bytes(plan, max_keys)

    def max_pool2d(self, x, kernel, stride, pads, dilation, out):  # (a pass over a map: the side module's thread)
        return self.side.max_pool2d(x, kernel, stride, pads, dilation, out)

    def upsample_nearest(self, x, factors):
        return self.side.upsample_nearest(x, factors)

    def _scratch_at(self, floats: int) -> int:
        if self._scratch_block.nbytes < 4 * floats:
            old = self._scratch_block.nbytes
            self._scratch_block = None
            self._scratch_block = Block(self.pool.arena, max(4 * floats, 2 * old))
        return self._scratch_block.at

    def _io(self, arrays) -> list[int]:
        """Room in the per-call block for each array's span (None: none), in order -> each one's shared address
        of its first element (strides kept)."""
        spans = [_span(a) if a is not None else (0, 0) for a in arrays]
        at = self.kern._io_at(sum(_align(n) for n, _ in spans) + 64)
        out = []
        for n, low in spans:
            out.append(at - low)
            at += _align(n)
        return out

    def _run(self, fn, params: np.ndarray, at_params: int, scratch_fn, slot: int, what: str, *scratch_args):
        """Write params (pool addresses; the scratch's, params[slot], filled here) and run fn on the pool."""
        self.pool.write(at_params, params)
        size = int(scratch_fn(i32(at_params), *scratch_args))
        if size < 0:
            raise ValueError(f"ember: {what} kernel: parameters it does not take")
        params[slot] = i32(self._scratch_at(size))
        self.pool.write(at_params, params)
        return self.pool.check(fn(i32(at_params)), what)

    # ---------------------------------------------------------------------------------------- convolution
    def conv2d(self, x, w, b, stride, padding, dilation, groups, act=None):
        if x.ndim == 3:  # a 1-D conv: the conv2d of one row
            y = self.conv2d(x[:, :, None], w[:, :, None], b, (1, *stride), (0, *padding), (1, *dilation), groups, act)
            return y.reshape(y.shape[0], y.shape[1], y.shape[3])
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        if n * o * ho * wo * cg * kh * kw < POOL_MIN_MACS or ho <= 0 or wo <= 0:
            return self.side.conv2d(x, w, b, stride, padding, dilation, groups, act)
        return self._conv(self._conv2d, self._conv2d_scratch_floats, "conv2d", [x], w, b, np.empty((n, o, ho, wo), F32),
                          [n, c, h, wd, o, kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0],
                           dilation[1], groups, ACTS[act], i32(self.kern._gemm_scratch.at)])

    def conv3x3_winograd(self, x, u, b, padding, act=None, tile_products=False):
        n, c, h, wd = x.shape
        o = u.shape[1]
        ho, wo = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
        if n * o * ho * wo * c * 9 < POOL_MIN_MACS or ho <= 0 or wo <= 0:
            return self.side.conv3x3_winograd(x, u, b, padding, act)
        return self._conv(self._conv3x3_winograd, self._conv3x3_winograd_scratch_floats, "conv3x3_winograd", [x], u, b,
                          np.empty((n, o, ho, wo), F32), [n, c, h, wd, o, padding[0], padding[1], ACTS[act], 1,
                                                          i32(self.kern._gemm_scratch.at)])

    def _conv(self, fn, scratch_fn, what: str, xs, w, b, y, fields: list) -> np.ndarray:
        """A conv kernel on the pool (parameters x, w, b, y, the scratch, then `fields`): x copied in from its
        C-contiguous parts `xs` written one after another (x alone, of any batch, or conv_cat_act's parts along the
        channels of one image), y out; w and b (C-contiguous) read where the pool's memory keeps them
        (_constant), else copied in too. A call shape's parameter block and scratch size are kept (_plans): a
        layer's call after its first costs one write of its parameters, where Pyodide's Python spent ~0.4 ms on
        them (~25 ms of a YOLOv8s forward)."""
        at_x, at_w, at_b, at_y, at_p, kept = self._operands(xs, w, b, y, 4 * (5 + len(fields)))
        key = (what, *fields)
        plan = self._plans.get(key)
        params = np.empty(5 + len(fields), np.int32) if plan is None else plan[0]
        params[:4] = [i32(at_x), i32(at_w), i32(at_b), i32(at_y)]
        if plan is None:  # (the scratch's size reads the sizes only)
            params[4:] = [0, *fields]
            self.pool.write(at_p, params)
            size = int(scratch_fn(i32(at_p)))
            if size < 0:
                raise ValueError(f"ember: {what} kernel: parameters it does not take")
            if len(self._plans) >= 64:  # (a model fed ever new shapes: recomputed, never grown past this)
                self._plans.clear()
            plan = self._plans[key] = (params, size)
        params[4] = i32(self._scratch_at(plan[1]))
        self.pool.write(at_p, params)
        if self.pool.check(fn(i32(at_p)), what) != 0:
            raise ValueError(f"ember: {what} kernel refused its parameters")
        return self._keep(self.pool.read(at_y, y), kept)

    def pointwise(self, xs, w, b, act, direct: bool):
        """act(conv(cat(xs, 1), w) + b) for a plain 1x1 w (O, C, 1, 1) and one image, the parts written one after
        another where the call's x goes (their concatenation, without numpy's copy): conv.c's conv2d where
        `direct` (the rule's choice for this map), else gemm.c's product of w (O, C) and the pixels (C, H W) with
        the bias (per channel) and the activation in its epilogue: the bits of the backend's conv (numpy_conv's
        product on the pool) then bias_act, in one call where they took two, two copies each way and ~1 ms of
        Pyodide's Python, and without that pass over y. None where the pool would not take the call as those do (a batch, a
        product too small to split or too large for one call): the caller composes."""
        n, _, h, wd = xs[0].shape
        o, c, p = w.shape[0], w.shape[1], h * wd
        if n != 1 or not all(x.flags.c_contiguous for x in xs) or not w.flags.c_contiguous or \
                (b is not None and not b.flags.c_contiguous) or o * c * p < POOL_MIN_MACS:
            return None
        y = np.empty((1, o, h, wd), F32)
        if direct:
            return self._conv(self._conv2d, self._conv2d_scratch_floats, "conv2d", xs, w, b, y,
                              [1, c, h, wd, o, 1, 1, 1, 1, 0, 0, 1, 1, 1, ACTS[act], 0])
        if o < POOL_MIN_ROWS or y.nbytes > IO_BYTES:
            return None
        kern = self.kern
        at_x, at_w, at_b, at_y, at_s, kept = self._operands(xs, w, b, y, 64)
        self.pool.write(at_s, np.array([0, c, 1, 0, p, 1, o * p, p], np.int32))  # (numpy_conv's (1, O, P) product)
        mode = EP_ROWS if b is not None else EP_ACT if act is not None else EP_NONE  # act(y + b[channel])
        kern.pool.check(kern._sgemm_ep(1, o, p, c, i32(at_w), i32(at_x), i32(at_y), i32(at_s),
                                       i32(kern._gemm_scratch.at), i32(at_b), mode, ACTS[act]), "conv2d (1x1)")
        return self._keep(self.pool.read(at_y, y), kept)

    def _operands(self, xs, w, b, y, extra: int) -> tuple[int, int, int, int, int, Block | None]:
        """A call's operands in the pool's memory: x (C-contiguous parts one after another: their concatenation
        along channels for one image) where an earlier conv's output kept there holds them in that order (_keep),
        else written into the per-call block, as are w and b where the pool's memory does not keep them
        (_constant); room for y (a Block of its own where it is to be kept) and `extra` bytes in the per-call block
        -> the addresses of x, w, b (0: none), y and the extra bytes, and y's own Block (None: none)."""
        at_w = self._constant(w)
        at_b = 0 if b is None else self._constant(b)
        copied = [a for a, at in ((w, at_w), (b, at_b)) if at is None]
        at_x = self._resident_run(xs)
        x_bytes = 0 if at_x is not None else sum(x.nbytes for x in xs)
        kept = self._out_block(y)
        y_bytes = 0 if kept is not None else y.nbytes
        at = self.kern._io_at(_align(x_bytes) + sum(_align(a.nbytes) for a in copied) + _align(y_bytes) + extra)
        if at_x is None:
            at_x = at
            for x in xs:
                self.pool.write(at, x)
                at += x.nbytes
            at = at_x + _align(x_bytes)
        for a in copied:
            self.pool.write(at, a)
            at_w, at_b = (at, at_b) if a is w else (at_w, at)
            at += _align(a.nbytes)
        at_y = kept.at if kept is not None else at
        return at_x, at_w, at_b, at_y, at + _align(y_bytes), kept

    # A conv's output read back from the pool is kept there too while its array lives, and the array made read-only
    # (backend arrays are never written in place; this makes it so): the next conv that reads it (YOLOv8s: most
    # of its inputs, ~80 of the ~100 MB a forward copied in) reads the pool's copy, not a fresh one. An array made
    # writeable again by anyone is copied in as any other.

    def _out_block(self, y: np.ndarray) -> Block | None:
        if y.nbytes < RESIDENT_MIN_BYTES or self._resident_bytes + y.nbytes > RESIDENT_MAX_BYTES:
            return None
        try:
            return Block(self.pool.arena, y.nbytes)
        except MemoryError:
            return None

    def _keep(self, y: np.ndarray, block: Block | None) -> np.ndarray:
        if block is not None:
            y.flags.writeable = False
            key = id(y)
            self._resident[key] = (weakref.ref(y, lambda _, k=key: self._drop(k)), block)
            self._resident_bytes += block.nbytes
        return y

    def _drop(self, key: int):
        hit = self._resident.pop(key, None)
        if hit is not None:
            self._resident_bytes -= hit[1].nbytes

    def _resident_run(self, xs) -> int | None:
        """The pool's address of xs' first element where each part lies in a kept output's copy right after the
        one before it (one part, or the halves of a kept output split along channels), else None."""
        start = at = None
        for x in xs:
            owner = x.base if isinstance(x.base, np.ndarray) else x
            hit = self._resident.get(id(owner))
            if hit is None or hit[0]() is not owner or not x.flags.c_contiguous:
                return None
            if owner.flags.writeable:  # (made writeable: it may have been written since)
                self._drop(id(owner))
                return None
            part = hit[1].at + (addr(x) - addr(owner))
            if at is not None and part != at:
                return None
            start = part if start is None else start
            at = part + x.nbytes
        return start

    def _constant(self, a: np.ndarray) -> int | None:
        """The pool's address of a copy of `a` (a conv's weight, its Winograd transform, a bias) kept in the pool's
        memory from a's second call on while it lives (cpu_matmul.derived_copy: backend arrays are never written
        in place), or None: copy it in with the call (its first, memory the caller shares, or a pool that cannot
        grow for it). A YOLOv8s forward copied ~117 MB of weights and transforms into the pool a call."""
        block = derived_copy(a, "pool", self._place, second=True)
        return block.at if block else None

    def _place(self, a: np.ndarray) -> Block | bool:
        try:
            block = Block(self.pool.arena, max(a.nbytes, 1))
        except MemoryError:
            return False  # (kept as the answer: no grow tried again for this array)
        self.pool.write(block.at, np.ascontiguousarray(a))
        return block

    # ---------------------------------------------------------------------------------------- attention
    def attention(self, q, k, v, mask, scale, causal):
        b1, b2, l, d = q.shape
        s, dv = k.shape[2], v.shape[3]
        if b1 * b2 * l * s * (d + dv) < POOL_MIN_MACS or not (l and s):
            return self.side.attention(q, k, v, mask, scale, causal)
        base = np.empty((b1, l, b2, dv), F32)
        out = base.transpose(0, 2, 1, 3)
        q, k, v = _dense(q), _dense(k), _dense(v)
        if mask is not None:
            mask = _dense(np.broadcast_to(mask, (b1, b2, l, s)))
        params = np.zeros(29, np.int32)
        at_q, at_k, at_v, at_m, at_o, at_p = self._io([q, k, v, mask, base, params])
        ms = (0, 0, 0) if mask is None else _strides(mask)
        bits = int(np.array(scale, F32).view(np.uint32))
        params[:] = [i32(at_q), i32(at_k), i32(at_v), 0 if mask is None else i32(at_m), i32(at_o), 0, b1, b2, l, s,
                     d, dv, int(bool(causal)), i32(bits), *_strides(q), *_strides(k), *_strides(v), *ms,
                     *_strides(out)]
        for a, at in ((q, at_q), (k, at_k), (v, at_v), (mask, at_m)):
            if a is not None:
                self.kern._stage(a, _span(a), at + _span(a)[1])
        if self._run(self._attention, params, at_p, self._attention_scratch_floats, 5, "attention", 2) != 0:
            raise ValueError("ember: attention kernel refused its parameters")
        self.pool.read(at_o, base)
        return out

    # ---------------------------------------------------------------------------------------- rows
    def _rows_call(self, fn, x2, y2, w, b, arg, channels):
        if fn is self._layer_norm or arg not in POOL_ROW_ACTS or x2.size < POOL_MIN_ELEMENTS:
            side_fn = self.side._layer_norm if fn is self._layer_norm else self.side._bias_act
            return self.side._rows_call(side_fn, x2, y2, w, b, arg, channels)
        # in place (bias_act's out=x): the rows go in and come back with their strides; else the result is written
        # contiguous in the pool and copied into y2 (whose gaps between rows, if any, are not the kernel's)
        same = addr(x2) == addr(y2) and x2.strides == y2.strides
        x2 = x2 if same else _dense(x2)
        yc = None if same else np.empty(y2.shape, F32)
        params = np.zeros(10, np.int32)
        at_x, at_y, at_w, at_b, at_p = self._io([x2, yc, w, b, params])
        at_y = at_x if same else at_y
        params[:] = [i32(at_x), i32(at_y), 0 if w is None else i32(at_w), 0 if b is None else i32(at_b),
                     x2.shape[0], x2.shape[1], x2.strides[0] // 4, (y2 if same else yc).strides[0] // 4, arg, channels]
        n, low = _span(x2)
        self.kern._stage(x2, (n, low), at_x + low)
        for a, at in ((w, at_w), (b, at_b)):
            if a is not None:
                self.pool.write(at, np.ascontiguousarray(a, F32))
        self.pool.write(at_p, params)
        self.pool.check(fn(i32(at_p)), "row kernel")
        if same:
            self.pool.read_raw(at_x + low, n, addr(x2) + low)
        elif y2.flags.c_contiguous:
            self.pool.read(at_y, y2)
        else:
            y2[...] = self.pool.read(at_y, yc)


def _one_batch_dim(x: np.ndarray) -> np.ndarray:
    """x (..., R, C) as (prod(...), R, C): a view where its batch dims step through memory as one dim does (a
    contiguous stack, a transposed or broadcast one), else of a contiguous copy (a few hundred KB for attention's
    (B, heads) stacks: less than the ~0.2 ms of a pool call per sentence it saves)."""
    dims = [(d, s) for d, s in zip(x.shape[:-2], x.strides[:-2]) if d > 1]  # (a dim of one has any stride)
    if any(s != s2 * d2 for (_, s), (d2, s2) in zip(dims, dims[1:])):
        x = np.ascontiguousarray(x)
        dims = [(d, s) for d, s in zip(x.shape[:-2], x.strides[:-2]) if d > 1]
    batch, step = math.prod(d for d, _ in dims), dims[-1][1] if dims else 0
    return np.lib.stride_tricks.as_strided(x, (batch,) + x.shape[-2:], (step,) + x.strides[-2:], writeable=False)


def _es(x, axis) -> int:
    return x.strides[axis] // 4


def _dense(x: np.ndarray) -> np.ndarray:
    """x, or a contiguous copy where the memory its elements lie in is much larger than itself (a slice of a
    larger array's rows or columns) or its strides are not whole floats (the kernels count in floats)."""
    if any(s % 4 for s in x.strides) or _span(x)[0] > 2 * x.nbytes + 4096:
        return np.ascontiguousarray(x)
    return x


def _span(x: np.ndarray) -> tuple[int, int]:
    """(bytes, offset of the lowest byte from x's first element) of the memory x's elements lie in: a transpose
    spans its own bytes, a broadcast fewer."""
    low = sum(min(0, (d - 1) * s) for d, s in zip(x.shape, x.strides) if d)
    high = sum(max(0, (d - 1) * s) for d, s in zip(x.shape, x.strides) if d) + x.itemsize
    return (high - low if x.size else 0), low


class _Mirror:
    """A layer's KV cache in the shared memory: the copy of a pair of numpy buffers (k and v)."""

    def __init__(self, pool, kc: np.ndarray, vc: np.ndarray):
        self.kref, self.vref = weakref.ref(kc), weakref.ref(vc)
        self.k, self.v = Block(pool.arena, kc.nbytes), Block(pool.arena, vc.nbytes)
        self.cap = kc.shape[2]


class _Mirrored:
    """A plan's KV caches mirrored in the shared memory (`_mirrors`, one _Mirror a layer): copied in where a
    mirror is not known to equal its cache (`written`, the cache's count of writes by others, changed), and each
    step's new rows copied back."""

    def _sync(self, caches, written) -> bool:
        """Copy a layer's cache in where the mirror is not known to equal it; -> whether a mirror was made anew
        (a cache grown into new buffers: the plan's cache fields and the rows-back table change with it)."""
        everything = written is None or written != self._written
        fresh = False
        for i, (kc, vc, _, _) in enumerate(caches):
            m = self._mirrors[i]
            if m is None or m.kref() is not kc or m.vref() is not vc:
                m = self._mirrors[i] = _Mirror(self._pool, kc, vc)
                fresh = True
            elif not everything:
                continue
            self._pool.write(m.k.at, np.ascontiguousarray(kc))
            self._pool.write(m.v.at, np.ascontiguousarray(vc))
        self._written = written
        if fresh:
            self._rows_table = None
        return fresh

    @staticmethod
    def _slots(caches) -> np.ndarray:
        """int32 (layers, 2): each layer's (slot, length) this step."""
        return np.array([c[2:] for c in caches], np.int32).reshape(-1, 2)

    def _rows_back(self, caches, slots: np.ndarray):
        """The step's new rows (slot of every head), back into the model's caches: one call copies them all
        (web/pool.js copyOutRows; Gemma 3 270M has 36 rows a token, Whisper tiny 48), listed in a table of (from,
        bytes, to, layer) made once for these mirrors and caches, each row moved to its layer's slot as it is
        copied (slots: int32 (layers, 2) of (slot, length)). In the page a table rewritten each step in numpy
        cost ~0.25 ms a token."""
        if self._rows_table is None:
            rows = []
            for layer, (m, (kc, vc, _, _)) in enumerate(zip(self._mirrors, caches)):
                heads, hd = kc.shape[1], kc.shape[3]
                for h in range(heads):
                    off = h * m.cap * hd * 4
                    rows += [(i32(m.k.at + off), hd * 4, i32(addr(kc) + off), layer),
                             (i32(m.v.at + off), hd * 4, i32(addr(vc) + off), layer)]
            # (the caches held with the table: no buffer it lists is freed while it is used)
            self._rows_table = (np.array(rows, np.int32).reshape(-1, 4), [c[:2] for c in caches])
        table = self._rows_table[0]
        if len(table):
            self._pool.read_rows(table, slots)


class PoolDecodePlan(_Mirrored, DecodePlan):
    """decode.c's plan on the pool: its layers in the shared memory (placed once), the KV caches mirrored there."""

    def __init__(self, kern: PoolKernels, spec: dict):
        self._pool = kern.pool
        super().__init__(kern, spec)
        self._mirrors: list = [None] * self.n_layers
        self._written = self._rows_table = None
        self._scratch_block = None
        io = 4 * (self.plan.size + 2 + len(spec.get("ropes", [0])) * spec["head_dim"] + self.dim)
        self._io_bytes = _align(io) + 4096

    def _blocked_copies(self, weights):
        # the blocked copy is the one placed, in place of the contiguous copy of the input-major rows placing took:
        # no memory beyond that, so no bound; each made as it is placed, and only its shared copy kept
        return (blocked(data) for data, type_id, rows, cols in weights if type_id == -1)

    def _vector(self, a) -> int:
        return i32(self._hold_block(np.ascontiguousarray(a, np.float32)).at)

    def _weight(self, data, type_id) -> tuple[int, int]:
        if type_id == -2:  # a blocked copy made for this plan: placed, and the Block kept rather than the array
            block = Block(self._pool.arena, data.nbytes)
            self._pool.write(block.at, data)
            self._keep.append(block)
            return i32(block.at), 0
        held = self._hold_block(data)
        return i32(held.at), (data.stride if isinstance(data, SharedRows) else data.shape[1]) if type_id > 0 else 0

    def _kind(self, data, type_id) -> int:
        return _kernel_type(data, type_id)

    def _hold_block(self, a):
        self._keep.append(a)  # (placed copies live while the array does)
        return a if isinstance(a, SharedRows) else self._pool.place(a)

    def step(self, x: np.ndarray, rope: np.ndarray, caches, written=None) -> np.ndarray:
        pool, kern = self._pool, self._kern
        if self._sync(caches, written):
            self._layers[:, L_KCACHE:L_CAPACITY + 1] = [(i32(m.k.at), i32(m.v.at), m.cap) for m in self._mirrors]
        slots = self._slots(caches)
        self._layers[:, L_SLOT:L_LENGTH + 1] = slots  # (every layer's fields in one numpy write)
        length = int(slots[:, 1].max()) if len(slots) else 0
        if length > self._scratch_rows:  # grown by doubling, as the caches are
            rows = max(length, 2 * self._scratch_rows, 256)
            self._scratch_block = None
            self._scratch_block = Block(pool.arena, kern.decode_scratch_bytes(self.plan, rows))
            self._scratch_rows = rows
        rope = np.ascontiguousarray(rope, np.float32)
        at = kern._io_at(self._io_bytes + _align(rope.nbytes))
        at_f, at_x = at + _align(self.plan.nbytes), at + _align(self.plan.nbytes) + 64
        at_r = at_x + _align(x.nbytes)
        pool.write(at, self.plan)
        pool.write(at_f, self.fparams)
        pool.write(at_x, x)
        pool.write(at_r, rope)
        rc = pool.check(kern._decode(i32(at), i32(at_f), i32(at_x), i32(at_r), i32(self._scratch_block.at)),
                        "decode step")
        if rc != 0:
            raise ValueError("ember: decode plan: a layer this build of the kernels cannot run")
        pool.read(at_x, x)
        self._rows_back(caches, slots)
        return x


class PoolXattnPlan(_Mirrored, XattnPlan):
    """decode_xattn.c's plan (Whisper's decoder step) on the pool: its weights, norms and biases placed in the
    shared memory once, the self-attention caches mirrored there (_Mirrored), the encoder's keys and values placed
    while their arrays live (they are not written: a new utterance makes new ones). The head (a tied embedding:
    51,864 x 384 floats for tiny.en, 80 MB read a token) is placed too, and `logits` runs the GEMM's one-row product
    on it, its columns split between the threads: the same call, so the same bits, as the model's matmul makes on
    this thread (gemm.c's gemv never fuses a multiply-add)."""

    def __init__(self, kern: PoolFloatKernels, spec: dict):
        self._pool, self._pk = kern.pool, kern.kern
        super().__init__(kern, spec)
        self._mirrors: list = [None] * self.n_layers
        self._written = self._rows_table = None
        self._scratch_block = None
        head = spec.get("head")
        self._head = None  # (its block, vocab): (vocab, dim) float32 rows
        if head is not None and head.dtype == F32 and head.flags.c_contiguous and head.shape[1:] == (self.dim,):
            self._keep.append(head)
            self._head = (self._pool.place(head), head.shape[0])
            self._head_strides = np.array([0, self.dim, 1, 0, 1, self.dim, head.shape[0], head.shape[0]], np.int32)

    def _vec(self, a) -> int:
        if a is None:
            return 0
        a = np.ascontiguousarray(a, np.float32)
        self._keep.append(a)  # (placed copies live while the array does)
        return i32(self._pool.place(a).at)

    def _weight(self, data, type_id, cols) -> tuple[int, int]:
        data = np.ascontiguousarray(data)  # (input-major rows that are a slice of wider ones: placed contiguous)
        self._keep.append(data)
        return i32(self._pool.place(data).at), data.shape[1] if type_id == -1 else cols

    def step(self, x: np.ndarray, caches, cross, written=None) -> np.ndarray:
        pool = self._pool
        self._sync(caches, written)
        keys = 0
        for row, m, (kc, _, slot, n), (xk, xv) in zip(self._layers, self._mirrors, caches, cross):
            xkb, xvb = pool.place(xk), pool.place(xv)
            row[_L_CACHE:] = [i32(m.k.at), i32(m.v.at), kc.shape[2], slot, n, i32(xkb.at), i32(xvb.at), xk.shape[2]]
            keys = max(keys, n, xk.shape[2])
        if keys > self._scratch_keys:
            self._scratch_keys = max(keys, 2 * self._scratch_keys, 512)
            self._scratch_block = None
            self._scratch_block = Block(pool.arena, self._kern.side.xattn_decode_scratch_bytes(self.plan,
                                                                                               self._scratch_keys))
        at = self._pk._io_at(_align(self.plan.nbytes) + 64 + _align(x.nbytes))
        at_f, at_x = at + _align(self.plan.nbytes), at + _align(self.plan.nbytes) + 64
        pool.write(at, self.plan)
        pool.write(at_f, self.fparams)
        pool.write(at_x, x)
        rc = pool.check(pool.exports.ember_xattn_decode(i32(at), i32(at_f), i32(at_x), i32(self._scratch_block.at)),
                        "decoder step")
        if rc != 0:
            raise ValueError("ember: xattn decode plan: a layer this build of the kernels cannot run")
        pool.read(at_x, x)
        self._rows_back(caches, self._slots(caches))
        return x

    def logits(self, x: np.ndarray) -> np.ndarray | None:
        if self._head is None:
            return None
        pool, (block, vocab) = self._pool, self._head
        y = np.empty(vocab, F32)
        at_x = self._pk._io_at(_align(x.nbytes) + _align(y.nbytes) + 64)
        at_y, at_s = at_x + _align(x.nbytes), at_x + _align(x.nbytes) + _align(y.nbytes)
        pool.write(at_x, np.ascontiguousarray(x, F32))
        pool.write(at_s, self._head_strides)  # x (1, dim) @ head^T (dim, vocab): B column-major, as the model's
        rc = self._pk._sgemm_exact(1, 1, vocab, self.dim, i32(at_x), i32(block.at), i32(at_y), i32(at_s),
                                   i32(self._pk._gemm_scratch.at), 0)
        pool.check(rc, "output projection")
        return pool.read(at_y, y)
