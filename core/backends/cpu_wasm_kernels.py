"""The CPU backend's WebAssembly SIMD128 kernels, for Pyodide (whose numpy has no BLAS).

`cpu_wasm_kernels.wasm` beside this file is a Pyodide side module built from `cpu_kernels/*.c` by
`python -m ember.wasm.kernels.build` (clang-19 + lld-19) and shipped as package data, so a `pip install` needs no
compiler and the wheel stays py3-none-any; CI rebuilds it and fails when the bytes differ from the
committed file (tests/test_wasm_kernels_build.py). Pyodide's `ctypes.CDLL` loads it (emscripten's
dlopen), and the kernels compute in place on numpy's buffers through `arr.ctypes.data`.

`load()` says whether the kernels can be used here and why not: not under Pyodide, switched off
with EMBER_WASM_KERNELS=0, a browser without WebAssembly SIMD, or a module that fails to load. Where the
browser validates relaxed SIMD it loads `cpu_wasm_kernels_relaxed.wasm` instead (the same kernels with
the GEMM micro-kernel's multiply-add as f32x4.relaxed_madd, a fused FMA: 1.3-1.5x its GFLOP/s in
Node 20, a median 1.2x in Chromium 156, bench/bench_wasm_kernels.py --relaxed [--chromium]), and the
plain module when that one fails to load.
"""
from __future__ import annotations

import ctypes
import math
import os
import sys
from pathlib import Path

import numpy as np

from .. import settings

MODULE = Path(__file__).with_name("cpu_wasm_kernels.wasm")
RELAXED_MODULE = Path(__file__).with_name("cpu_wasm_kernels_relaxed.wasm")  # the same, built with relaxed SIMD
_F32 = np.dtype(np.float32)

# The smallest module using a SIMD instruction (a function returning v128.const 0), the probe
# wasm-feature-detect uses: a browser without SIMD128 refuses to validate it.
_SIMD_PROBE = bytes([0x00, 0x61, 0x73, 0x6D, 0x01, 0x00, 0x00, 0x00,    # magic, version 1
                     0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7B,          # type: () -> v128
                     0x03, 0x02, 0x01, 0x00,                            # one function of that type
                     0x0A, 0x16, 0x01, 0x14, 0x00, 0xFD, 0x0C] + [0] * 16 + [0x0B])  # v128.const 0

# The same with a relaxed instruction: () -> v128 computing f32x4.relaxed_madd(0, 0, 0). Node 20 validates
# it only with --experimental-wasm-relaxed-simd; Chromium >= 114 does by default.
_RELAXED_PROBE = bytes([0x00, 0x61, 0x73, 0x6D, 0x01, 0x00, 0x00, 0x00,
                        0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7B,
                        0x03, 0x02, 0x01, 0x00,
                        0x0A, 0x3D, 0x01, 0x3B, 0x00] + ([0xFD, 0x0C] + [0] * 16) * 3  # three v128.const 0
                       + [0xFD, 0x85, 0x02, 0x0B])                                    # f32x4.relaxed_madd


class WasmKernels:
    """The loaded module: `matmul(a, b, out)` for float32 arrays of any strides, batched and broadcast;
    `silu(x)`, `gelu(x)` (erf form); `exp_rowmax(s)` (attention's unnormalised softmax, in place);
    `qmatmul` / `qdequant` on GGML blocks, `q8_0_argmax` (greedy decoding's output row), `q8_0_topk` (sampling's
    top-k candidates) (quant.c); `q8_matmul`: llama.cpp's 8-bit-activation product (q8dot.c)."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib  # (cpu_float_kernels.py reads its float kernels from it)
        # no argtypes: Python ints go through as C ints, the cheapest call Pyodide's ctypes makes (the float
        # methods take their addresses through _ptr / _addr, which the native build of these sources replaces)
        self._ptr, self._addr = _ptr, _i32
        self._sgemm, self._sgemm_batched = lib.ember_sgemm, lib.ember_sgemm_batched
        self._sgemm_ep = getattr(lib, "ember_sgemm_ep", None)  # (the page's modules; its native build has none)
        self._scratch = np.empty(lib.ember_sgemm_scratch_floats(), _F32)  # packed A and B blocks
        self._scratch_ptr = _ptr(self._scratch)
        self._strides = np.empty(8, np.int32)  # the batched call's stride block
        self._strides_ptr = _ptr(self._strides)
        self._silu, self._gelu, self._exp_rowmax = lib.ember_silu_f32, lib.ember_gelu_f32, lib.ember_exp_rowmax_f32
        self._qmatmul, self._qdequant = lib.ember_qmatmul, lib.ember_qdequant
        self.qmatmul_types = frozenset(t for t in range(40) if lib.ember_qmatmul_supports(t))  # GGML type ids
        self._q8_0_l1, self._q8_0_argmax = lib.ember_q8_0_l1, lib.ember_q8_0_argmax
        self._q8_0_bounds, self._q8_0_rows_above = lib.ember_q8_0_bounds, lib.ember_q8_0_rows_above
        self._q8_act_bytes, self._q8_matmul = lib.ember_q8_act_bytes, lib.ember_q8_matmul
        self._argmax = lib.ember_argmax_f32
        self._decode, self._decode_scratch_bytes = lib.ember_decode, lib.ember_decode_scratch_bytes
        self._nbits_supports, self._nbits_matmul = lib.ember_nbits_supports, lib.ember_nbits_matmul
        self._act = np.empty(1 << 16, np.uint8)  # q8_matmul's activation blocks, grown on demand
        self._count = np.zeros(1, np.int32)  # rows ember_q8_0_argmax computed exactly
        self._xsum = np.empty(256, _F32)  # qmatmul's scratch, grown on demand
        self._xsum_ptr = _ptr(self._xsum)

    def qmatmul(self, x: np.ndarray, w: np.ndarray, type_id: int, out_features: int) -> np.ndarray:
        """x (m, k) float32 C-contiguous @ W.T -> (m, out_features) float32, W as uint8 GGML rows
        (out_features, row_bytes) of a type in qmatmul_types, decoded in registers (quant.c)."""
        m, k = x.shape
        y = np.empty((m, out_features), _F32)
        if self._xsum.size < m * k // 32:  # per-32 sums of x, for the types with a min: kept between calls
            self._xsum = np.empty(m * k // 32, _F32)
            self._xsum_ptr = _ptr(self._xsum)
        if not w.flags.c_contiguous:
            w = np.ascontiguousarray(w)
        if m and out_features and self._qmatmul(type_id, m, out_features, k, _ptr(w), _ptr(x), k, _ptr(y),
                                                 out_features, self._xsum_ptr) != 0:
            raise ValueError(f"ember: wasm qmatmul: no kernel for GGML type {type_id} with rows of {k}")
        return y

    def q8_matmul(self, x: np.ndarray, w: np.ndarray, type_id: int, out_features: int) -> np.ndarray:
        """x (m, k) float32 C-contiguous @ W.T -> (m, out_features) float32, W as uint8 GGML rows (out_features,
        row_bytes) C-contiguous, x quantized as llama.cpp quantizes it for W's type (q8dot.c, ember.backends.cpu_q8dot):
        the native build's bits."""
        m, k = x.shape
        size = self._q8_act_bytes(type_id, m, k)
        if size < 0:
            raise ValueError(f"ember: wasm q8 matmul: no kernel for GGML type {type_id} with rows of {k}")
        if self._act.size < size:
            self._act = np.empty(size, np.uint8)
        y = np.empty((m, out_features), _F32)
        if m and out_features:
            self._q8_matmul(type_id, m, out_features, k, _ptr(w), _ptr(x), k, _ptr(y), out_features, _ptr(self._act))
        return y

    def argmax(self, y: np.ndarray) -> int:
        """int(np.argmax(y)) for a C-contiguous float32 y of at least one element (q8dot.c's scan: numpy's in
        Pyodide is 4x slower on a 262k-entry head)."""
        return int(self._argmax(_ptr(y), y.size))

    def nbits_supports(self, bits: int, block: int) -> bool:
        return bool(self._nbits_supports(bits, block))

    def nbits_matmul(self, x, packed, scales, zeros, bits, block, n):
        """nbits.c: x (m <= 8, blocks * block) float32 C-contiguous (zeros past K) @ W.T -> (m, n) float32, W in
        onnxruntime's MatMulNBits layout (ember.ggml.nbits): the native build's bits."""
        m, blocks = x.shape[0], scales.shape[1]
        y = np.empty((m, n), _F32)
        xsum = np.empty(m * blocks * (block + 1), _F32)  # (the split rows and per-block sums)
        if self._nbits_matmul(bits, block, m, 0, n, blocks, _ptr(packed), packed.shape[1], _ptr(scales), _ptr(zeros),
                              _ptr(x), _ptr(xsum), _ptr(y), n) != 0:
            raise ValueError(f"ember: wasm nbits.c takes no {bits}-bit blocks of {block} for {m} rows")
        return y

    def decode(self, plan: np.ndarray, fparams: np.ndarray, x: np.ndarray, rope: np.ndarray, scratch: np.ndarray) -> int:
        """decode.c's ember_decode: x (dim,) float32 through the layers of `plan` (cpu_decode.py), in place."""
        return self._decode(_ptr(plan), _ptr(fparams), _ptr(x), _ptr(rope), _ptr(scratch))

    def decode_scratch_bytes(self, plan: np.ndarray, max_length: int) -> int:
        return self._decode_scratch_bytes(_ptr(plan), max_length)

    def act_bytes(self, type_id: int, m: int, k: int) -> int:
        """Bytes of q8_matmul's activation blocks for m rows of k, or -1: no kernel for the type / k."""
        return self._q8_act_bytes(type_id, m, k)

    def q8_known_answer(self) -> bool:
        """Whether q8_matmul gets a product right that is exact in integers: a Q4_1 row with d = 1, min 0 and
        levels 0..15 against four rows of integers whose block maximum is 127 (so they quantize to themselves).
        Relaxed SIMD leaves its byte dot's rounding to the engine but not its integers, and one engine (V8 11)
        got the integers wrong once a weight register fed several rows."""
        levels = np.arange(32) % 16
        block = np.zeros((1, 20), np.uint8)
        block[0, :2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
        block[0, 4:] = (levels[:16] | levels[16:] << 4).astype(np.uint8)
        x = np.array([[127 if i == 0 else (i * 37 + 11 * r) % 255 - 127 for i in range(32)] for r in range(4)],
                     np.float32)
        want = x.astype(np.int64) @ levels
        got = self.q8_matmul(x, block, 3, 1)[:, 0]
        return bool(np.array_equal(got, want.astype(np.float32)))

    def qdequant(self, w: np.ndarray, type_id: int, k: int) -> np.ndarray:
        """uint8 GGML rows (r, row_bytes) -> float32 (r, k), the values ember.quant's dequantize gives."""
        w = np.ascontiguousarray(w)
        out = np.empty((w.shape[0], k), _F32)
        if w.shape[0] and self._qdequant(type_id, w.shape[0], k, _ptr(w), _ptr(out)) != 0:
            raise ValueError(f"ember: wasm qdequant: no kernel for GGML type {type_id} with rows of {k}")
        return out

    def q8_0_l1(self, w: np.ndarray, k: int) -> np.ndarray:
        """The per-row bound q8_0_argmax reads for Q8_0 rows w (n, row_bytes) of k elements: (n,) float32,
        sum over blocks of |scale| * sum |levels| (made once per weight)."""
        w = np.ascontiguousarray(w)
        l1 = np.empty(w.shape[0], _F32)
        if self._q8_0_l1(w.shape[0], k, _ptr(w), _ptr(l1)) != 0:
            raise ValueError(f"ember: wasm q8_0_l1: rows of {k} are not whole Q8_0 blocks")
        return l1

    def q8_0_argmax(self, w: np.ndarray, l1: np.ndarray, x: np.ndarray) -> tuple[int, int]:
        """(np.argmax of qmatmul(x, w), rows computed exactly) for one float32 row x (k,) and Q8_0 rows w
        (C-contiguous) with their q8_0_l1; (-1, 0) where no bound holds (x or a scale not finite): the caller
        computes every row."""
        n, k = w.shape[0], x.shape[-1]
        x = np.ascontiguousarray(x, _F32)
        scratch = np.empty(n + k // 32 + k // 2, _F32)  # bounds, x sums, x as int16
        arg = self._q8_0_argmax(n, k, _ptr(w), _ptr(l1), _ptr(x), _ptr(scratch), _ptr(self._count))
        if arg == -1:
            raise ValueError(f"ember: wasm q8_0_argmax: no kernel for {n} rows of {k}")
        return (arg, int(self._count[0])) if arg >= 0 else (-1, 0)

    def q8_0_topk(self, w: np.ndarray, l1: np.ndarray, x: np.ndarray, top_k: int):
        """(ids, logits): every row of qmatmul(x, w) that can be among its top_k largest (a superset of them:
        ascending int64 ids, the rows' float32 values as qmatmul gives them), for one float32 row x (k,) and
        Q8_0 rows w (C-contiguous) with their q8_0_l1; None where no bound holds (x or a scale not finite)."""
        n, k = w.shape[0], x.shape[-1]
        if not 0 < top_k <= n:
            raise ValueError(f"ember: wasm q8_0_topk: top_k {top_k} is not in 1..{n}")
        x = np.ascontiguousarray(x, _F32)
        bounds = np.empty((2, n), _F32)  # lo, hi
        xq = np.empty(k, np.int16)
        rc = self._q8_0_bounds(n, k, _ptr(w), _ptr(l1), _ptr(x), _ptr(xq), _ptr(bounds), _ptr(bounds[1]))
        if rc == -1:
            raise ValueError(f"ember: wasm q8_0_topk: no kernel for {n} rows of {k}")
        if rc != 0:
            return None
        # the k-th largest lower bound: a floor under the k-th largest value (bounds[0] is scratch after this)
        floor = np.partition(bounds[0], n - top_k)[n - top_k:n - top_k + 1].copy()
        ids, y = np.empty(n, np.int32), bounds[0]
        count = self._q8_0_rows_above(n, k, _ptr(w), _ptr(bounds[1]), _ptr(floor), _ptr(x), _ptr(ids), _ptr(y))
        return ids[:count].astype(np.int64), y[:count].copy()

    def silu(self, x: np.ndarray) -> np.ndarray:
        """x * sigmoid(x) for float32 (~2 ulp exp), a fresh C-contiguous array of x's shape."""
        return self._unary(self._silu, x)

    def gelu(self, x: np.ndarray) -> np.ndarray:
        """x Phi(x) for float32 (|abs err| < 3.5e-7, the numpy path's formula), a fresh C-contiguous array."""
        return self._unary(self._gelu, x)

    def _unary(self, kernel, x):
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        if x.size:
            kernel(self._ptr(x), self._ptr(out), x.size)
        return out

    def exp_rowmax(self, s: np.ndarray) -> np.ndarray:
        """s[i] = exp(s[i] - max(s[i])) for each row of a float32 (rows, cols) array with unit column stride,
        in place; returns s."""
        if s.dtype != _F32 or s.ndim != 2 or not _unit_columns(s):
            raise ValueError(f"ember: exp_rowmax needs float32 rows with unit column stride, got {s.dtype} "
                             f"{s.shape} strides {s.strides}")
        if s.size:
            self._exp_rowmax(self._ptr(s), s.shape[0], s.shape[1], s.strides[0] >> 2)
        return s

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """a (..., M, K) @ b (..., K, N) -> (..., M, N) float32, into `out` when given (any strides)."""
        (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
        if k2 != k:
            raise ValueError(f"ember: matmul shapes {a.shape} and {b.shape} do not match (K {k} vs {k2})")
        batch = () if a.ndim == b.ndim == 2 else np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        shape = batch + (m, n)
        target = out
        if out is None or out.dtype != _F32 or out.shape != shape or not _unit_columns(out):
            target = np.empty(shape, _F32)
        if m and n:
            a, b = _element_strided(a), _element_strided(b)
            if batch and b.ndim == 2 and a.flags.c_contiguous and target.flags.c_contiguous:
                # (..., M, K) @ (K, N): one GEMM over all of a's rows (decode's rope, a linear layer)
                a, c = a.reshape(-1, k), target.reshape(-1, n)
            elif batch and math.prod(batch) == 1:  # (1, .., 1, M, K) (decode's attention): the batched loop's
                a, b, c = a.reshape(m, k), b.reshape(k, n), target.reshape(m, n)  # overhead is most of its time
            else:
                c = None if batch else target
            if c is not None:
                sa, sb = a.strides, b.strides
                self._sgemm(a.shape[0], n, k, self._ptr(a), sa[0] >> 2, sa[1] >> 2, self._ptr(b), sb[0] >> 2,
                            sb[1] >> 2, self._ptr(c), c.strides[0] >> 2, self._scratch_ptr, 0)
            else:
                if a.shape[:-2] != batch:
                    a = np.broadcast_to(a, batch + (m, k))
                if b.shape[:-2] != batch:
                    b = np.broadcast_to(b, batch + (k, n))
                self._batched(a, b, target)
        if out is not None and target is not out:
            np.copyto(out, target)
            return out
        return target

    def matmul_ep(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, bias: np.ndarray | None, mode: int,
                  act: int) -> None:
        """c (M, N) C-contiguous = a (M, K) @ b (K, N) (element strides), each panel of c then through gemm.c's
        epilogue while in L1: EP_ROWS act(c + bias[row]), EP_COLS act((c + bias[col]) + 0), EP_ACT act(c + 0),
        EP_NONE nothing (act: cpu_float_kernels.ACTS' ids): rows.c's bias_act pass over the product, the same bits."""
        (m, k), n = a.shape, b.shape[1]
        self._strides[:] = (0, a.strides[0] >> 2, a.strides[1] >> 2, 0, b.strides[0] >> 2, b.strides[1] >> 2, 0, n)
        rc = self._sgemm_ep(1, m, n, k, self._ptr(a), self._ptr(b), self._ptr(c), self._strides_ptr,
                            self._scratch_ptr, 0 if bias is None else self._ptr(bias), mode, act)
        if rc != 0:
            raise ValueError(f"ember: sgemm_ep refused its parameters (mode {mode}, act {act}): {rc}")

    def _batched(self, a, b, c):
        """One C call per matrix of the leading batch dims; the last batch dim is looped in C."""
        m, k, n = a.shape[-2], a.shape[-1], c.shape[-1]
        self._strides[:] = [s >> 2 for s in a.strides[-3:] + b.strides[-3:] + c.strides[-3:-1]]
        base = self._ptr(a), self._ptr(b), self._ptr(c)
        if c.ndim == 3:  # (np.ndindex alone costs 30 us under Pyodide)
            self._sgemm_batched(c.shape[0], m, n, k, *base, self._strides_ptr, self._scratch_ptr, 0)
            return
        for idx in np.ndindex(*c.shape[:-3]):
            pa, pb, pc = (self._addr(p + sum(i * s for i, s in zip(idx, x.strides))) for p, x in zip(base, (a, b, c)))
            self._sgemm_batched(c.shape[-3], m, n, k, pa, pb, pc, self._strides_ptr, self._scratch_ptr, 0)


# gemm.c's epilogue modes (ember_sgemm_ep): none, a bias per row of C, per column, none but the activation
EP_NONE, EP_ROWS, EP_COLS, EP_ACT = 0, 1, 2, 3
_from_buffer, _address_of = ctypes.c_char.from_buffer, ctypes.addressof


def _ptr(x: np.ndarray) -> int:
    f = x.flags  # (a writeable contiguous array's address through ctypes: ~0.8 against ~2.1 us under Pyodide)
    return _i32(_address_of(_from_buffer(x)) if f.c_contiguous and f.writeable and x.size else
                x.__array_interface__["data"][0])


def _i32(address: int) -> int:
    """A wasm32 address as the signed C int ctypes passes without argtypes: a heap grown past 2 GiB has
    addresses >= 2**31, which ctypes refuses to convert ("int too long"); the bits are the same."""
    return ((address + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _unit_columns(x: np.ndarray) -> bool:
    """C is written through (pointer, row stride) with unit column stride, element-aligned strides."""
    return x.ndim >= 2 and (x.strides[-1] == 4 or x.shape[-1] == 1) and all(s % 4 == 0 for s in x.strides)


def _element_strided(x: np.ndarray) -> np.ndarray:
    """The kernels address operands in float strides: a view whose byte strides are not multiples of 4
    (as_strided over raw bytes) is copied."""
    return x if all(s % 4 == 0 for s in x.strides) else np.ascontiguousarray(x)


def _validates(probe: bytes) -> bool | None:
    """Whether this JavaScript engine's WebAssembly.validate accepts `probe`; None outside a browser-like host."""
    try:
        import js
        from pyodide.ffi import to_js
    except ImportError:
        return None  # not a browser-like host: let the load itself tell
    return bool(js.WebAssembly.validate(to_js(probe)))


def load(path: str | os.PathLike | None = None) -> tuple[WasmKernels | None, str]:
    """(kernels, "wasm-simd128+relaxed" or "wasm-simd128 (why not relaxed)") when they run here, else
    (None, why not). `path` loads that module alone (the tests' broken or missing modules)."""
    if sys.platform != "emscripten":
        return None, "not running under Pyodide"
    if not settings.get("EMBER_WASM_KERNELS"):
        return None, "switched off by EMBER_WASM_KERNELS=0"
    if _validates(_SIMD_PROBE) is False:
        return None, "this browser has no WebAssembly SIMD128"
    if path is not None:
        return _load(path, "wasm-simd128")
    if _validates(_RELAXED_PROBE) is False:
        return _load(MODULE, "wasm-simd128 (this browser has no relaxed SIMD)")
    kernels, why = _load(RELAXED_MODULE, "wasm-simd128+relaxed")
    if kernels is not None and not kernels.q8_known_answer():
        kernels, why = None, "kernel module's byte dot products miscompute on this engine (V8 11, Node 20: a " \
                             "relaxed dot reused a register it had overwritten)"
    if kernels is not None:
        return kernels, why
    return _load(MODULE, f"wasm-simd128 (relaxed {why.removeprefix('kernel ')})")


def _load(path, name: str) -> tuple[WasmKernels | None, str]:
    if not Path(path).is_file():
        return None, f"kernel module {path} is missing from this install"
    try:
        return WasmKernels(ctypes.CDLL(str(path))), name
    except Exception as exc:  # a truncated or foreign module: dlopen's OSError, a missing symbol ...
        return None, f"kernel module {path} failed to load: {type(exc).__name__}: {exc}"
