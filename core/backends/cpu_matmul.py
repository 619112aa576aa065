"""The CPU matmul kernel every numpy hot path calls (`mm`): BLAS's np.matmul natively; under Pyodide,
which has no BLAS, the WebAssembly SIMD128 GEMM (cpu_wasm_kernels.py) when it loads, on every thread of the page's
kernel pool for large products where the page has one (cpu_pool.py, `pool_kernels()`), else float32
einsum (its kernels beat np.matmul's fallback loop there ~1.5-6x, same bits).

Shared by the numpy backend (matmul, attention), its convolution (numpy_conv.py) and ember.quant's
slab-wise quantized matmul, so the BLAS / kernels / einsum switch is made in one place.
`matmul_path()` says which one runs here and why (`ember info`, the page's device note).
"""
from __future__ import annotations

import math
import sys
import weakref

import numpy as np

from .. import settings
from . import cpu_native_kernels, cpu_pool, cpu_wasm_kernels

NO_BLAS = sys.platform == "emscripten"
# Deterministic mode: float32 matmuls, GELU, SiLU and attention's exponentials run in the page's C kernels with the
# page's reduction order everywhere (natively: those sources built for this machine, cpu_page_kernels.py; in the page:
# the plain SIMD128 module, whose multiply-add is never fused), so the page and the desktop give the same bits.
# EMBER_DETERMINISTIC=1 at start, or set_deterministic().
_deterministic = [bool(settings.get("EMBER_DETERMINISTIC"))]
_page: list = []  # [(kernels or None, reason)]: the deterministic kernels once loaded
_EINSUM_ITER_MAX = (1 << 31) - 1  # numpy's einsum iterator (batch x M x K x N) counts in intp: 32-bit in wasm
_F32 = np.dtype(np.float32)
# batch x M x K x N below which einsum's call (~10 us) beats the kernels' ~50-70 us of ctypes and pointer
# overhead under Pyodide: einsum does 32^3 in ~70 us there (bench/bench_wasm_kernels.py measures both)
_KERNEL_MIN_MNK = 1 << 15
_kernels: list = []  # [(WasmKernels or None, reason)] once loaded: loading is deferred to the first matmul
_native: list = []  # [(NativeKernels or None, reason)] once built or loaded: at the first quantized matmul
_pool: list = []  # [(PoolKernels or None, reason)] once looked up


def wasm_kernels():
    """The loaded WebAssembly kernels under Pyodide, or None (matmul_path() says why)."""
    if not _kernels:
        _kernels.append(cpu_wasm_kernels.load() if NO_BLAS else (None, "not running under Pyodide"))
    return _kernels[0][0]


def pool_kernels():
    """The page's kernel pool (cpu_pool_kernels.PoolKernels: the kernels on 2 threads or more) under Pyodide where
    the page started one, else None (pool_status() says why)."""
    if not _pool:
        _pool.append(_load_pool())
    kernels = _pool[0][0]
    if kernels is not None and kernels.pool.broken:  # a lost worker: this thread alone from then on
        _pool[0] = (None, kernels.pool.broken)
        return None
    return kernels


def _load_pool():
    if not NO_BLAS:
        return None, "native kernels use their own threads"
    side = wasm_kernels()
    if side is None:
        return None, f"no wasm kernels ({_kernels[0][1]})"
    pool, why = cpu_pool.get()
    if pool is None:
        return None, why
    relaxed = _kernels[0][1].startswith("wasm-simd128+relaxed")
    if (pool.variant == "relaxed") != relaxed:
        return None, f"the pool's module is the {pool.variant} build and this thread's the other one (their bits differ)"
    from .cpu_pool_kernels import PoolKernels
    return PoolKernels(pool, side), ""


def pool_threads() -> tuple[int, str]:
    """(threads the page's kernels run on, why 1 when it is 1)."""
    k = pool_kernels()
    return (k.pool.threads, "") if k is not None else (1, _pool[0][1])


def pool_status() -> str:
    """'<n> threads' when the page's kernel pool is in use, else '1 thread (why)'."""
    n, why = pool_threads()
    return f"{n} threads" if n > 1 else f"1 thread ({why})"


def use_pool():
    """Look the page's kernel pool up again (after the page attaches one, or in the tests); returns pool_status()."""
    _pool.clear()
    cpu_pool.reset()
    return pool_status()


def native_kernels():
    """The compiled kernels outside the browser (cpu_native_kernels.py: built with this machine's C compiler at
    the first call), or None (native_kernels_status() says why)."""
    if not _native:
        _native.append(cpu_native_kernels.load())
    return _native[0][0]


def native_kernels_status() -> str:
    """What native_kernels() found: 'native avx2, 2 threads (<library>)', or why there are none."""
    native_kernels()
    return _native[0][1]


def deterministic() -> bool:
    return _deterministic[0]


def set_deterministic(on: bool = True) -> bool:
    """Switch deterministic mode (see _deterministic); returns the previous setting."""
    was, _deterministic[0] = _deterministic[0], bool(on)
    return was


def page_kernels():
    """The kernels the page computes floats with, or None: in deterministic mode the plain SIMD128 module (in the
    page) or its sources built natively (cpu_page_kernels.py); otherwise the page's loaded module, natively None."""
    if not _deterministic[0]:
        return wasm_kernels() if NO_BLAS else None
    if not _page:
        if NO_BLAS:
            _page.append(cpu_wasm_kernels.load(cpu_wasm_kernels.MODULE))
        else:
            from . import cpu_page_kernels
            _page.append(cpu_page_kernels.load())
        if _page[0][0] is None:
            raise RuntimeError(f"ember: deterministic mode needs the page's kernels: {_page[0][1]}")
    return _page[0][0]


def use_wasm_kernels(path=None):
    """(Re)load the kernels, from `path` instead of the shipped module when given; returns matmul_path().
    For the page's settings and the tests (a broken module must fall back to einsum with its reason)."""
    _kernels.clear()
    _pool.clear()  # the pool follows the side module's variant
    if NO_BLAS:
        _kernels.append(cpu_wasm_kernels.load(path))
    return matmul_path()


def matmul_path() -> str:
    """'blas' natively; under Pyodide 'wasm-simd128+relaxed', 'wasm-simd128 (why not relaxed)', or
    'einsum (why the kernels are not used)'."""
    if _deterministic[0]:
        page_kernels()
        return f"deterministic: {_page[0][1]}"
    if not NO_BLAS:
        return "blas"
    wasm_kernels()
    kernels, why = _kernels[0]
    return why if kernels is not None else f"einsum ({why})"


def einsum_matmul(a, b):
    """a @ b by float32 einsum, for Pyodide (no BLAS). Its iterator spans batch x M x K x N, which must fit
    wasm's 32-bit intp ("iterator is too large" for a 256-token prompt times a 32000-word head), so large
    products go a block of rows at a time; numpy's own matmul loop (slower, unbounded) when a row is too big."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    per_row = math.prod(batch) * a.shape[-1] * b.shape[-1]
    if per_row * a.shape[-2] <= _EINSUM_ITER_MAX:
        return np.einsum("...ij,...jk->...ik", a, b)
    if per_row > _EINSUM_ITER_MAX:
        return np.matmul(a, b)
    rows = _EINSUM_ITER_MAX // per_row
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), np.result_type(a, b))
    for i in range(0, a.shape[-2], rows):
        out[..., i:i + rows, :] = np.einsum("...ij,...jk->...ik", a[..., i:i + rows, :], b)
    return out


_SMALL_COPY = 1 << 16  # elements: a 2-D operand this small is copied whatever the product (microseconds)


def blas_ready(a):
    """a, or a contiguous copy where its rows are not unit-stride and it is stacked or small: numpy 2's stacked
    matmul hands a matrix to BLAS only when its last axis is contiguous, and a transposed view (attention's kᵀ)
    sends the product to numpy's own loop, 10-40x slower than BLAS plus the copy ((12, 128, 32) x a (12, 32, 128)
    view: 5.5 ms vs 0.15 ms; 2-D (128, 32) x (32, 128)ᵀ: 1.7 ms vs 0.07 ms). A large 2-D transposed weight
    goes to BLAS as it is (its transposed GEMM), which a copy per call would only slow."""
    if a.ndim >= 2 and a.strides[-1] != a.itemsize and a.shape[-1] > 1 and a.shape[-2] > 1 \
            and (a.ndim > 2 or a.size <= _SMALL_COPY):
        return np.ascontiguousarray(a)
    return a


_COLUMN_MAJOR_MIN = 1 << 16  # elements: a smaller matrix is copied each time (microseconds)
_derived: dict = {}  # (what, id(owner), address, shape, strides) -> (weakref to owner, the derived array or None)


_UNMADE = object()  # a derived-copy entry for a matrix seen once, whose copy waits for its second product
_shared: dict = {}  # id(array) -> weakref: memory the caller shares (ember.from_numpy), which it may write in place


def share(a) -> None:
    """The memory of numpy array `a` is the caller's too (ember.from_numpy): it may write it in place, so no
    copy derived from it is kept (a kept one would go stale)."""
    owner = a if a.base is None else a.base
    if isinstance(owner, np.ndarray):
        _shared[id(owner)] = weakref.ref(owner, lambda _, key=id(owner): _shared.pop(key, None))


def derived_copy(b, what: str, make, second=False, needed=False):
    """make(b), made once per large matrix and kept while the array owning its memory lives (backend arrays are
    never written in place, so it stays equal). second: only from the matrix's second call on (None before), so
    an array read once (a training step's weight, an activation) never pays for a copy it does not reuse. Memory
    shared with the caller (share) keeps none: make(b) each call where the copy is `needed`, else None."""
    owner, key = _derived_key(b, what)
    if not isinstance(owner, np.ndarray):
        return None if second and not needed else make(b)
    if id(owner) in _shared and _shared[id(owner)]() is owner:
        return make(b) if needed else None
    hit = _derived.get(key)
    seen = hit is not None and hit[0]() is owner
    if seen and hit[1] is not _UNMADE:
        return hit[1]
    value = make(b) if seen or not second else _UNMADE
    _derived[key] = (weakref.ref(owner, lambda _, key=key: _derived.pop(key, None)), value)
    return None if value is _UNMADE else value


def _derived_key(b, what: str):
    owner = b if b.base is None else b.base
    return owner, (what, id(owner), b.__array_interface__["data"][0], b.shape, b.strides)


def derived(b, what: str):
    """The copy of b derived_copy made for `what`, else None."""
    owner, key = _derived_key(b, what)
    hit = _derived.get(key)
    return hit[1] if hit is not None and hit[0]() is owner and hit[1] is not _UNMADE else None


def adopt_derived(b, what: str, value) -> None:
    """`value` becomes b's copy for `what` (one made before is freed once nothing else holds it)."""
    owner, key = _derived_key(b, what)
    if isinstance(owner, np.ndarray) and id(owner) not in _shared:
        _derived[key] = (weakref.ref(owner, lambda _, key=key: _derived.pop(key, None)), value)


def _column_major_copy(b):
    """b in column-major order, one copy per large weight: natively a Linear weight is stored transposed for BLAS,
    and deterministic mode's row-vector products, one per layer and token, copied it each call (Whisper tiny.en's
    80 MB head: 49 ms a token)."""
    return np.asfortranarray(b) if b.size < _COLUMN_MAJOR_MIN else derived_copy(b, "F", np.asfortranarray,
                                                                                   needed=True)


BLOCK = 16  # outputs a block of a blocked float32 weight (matvec_f32.h's MATVEC_BLOCK)
# the outputs of a weight whose one-row products read its blocked copy: past this the input-major rows are long
# enough to stream well (stories15M's 32000-wide head: the blocked copy no faster), and the copy is large
BLOCKED_MAX_OUTPUTS = 4096
_blocked_bytes = [0]  # the blocked copies alive, in bytes (EMBER_BLOCKED_WEIGHT_BYTES bounds them)


def _release(nbytes):
    _blocked_bytes[0] -= nbytes


def blocked_arena(floats: int, replacing: int = 0) -> np.ndarray | None:
    """An array of `floats` float32 for blocked copies, counted against EMBER_BLOCKED_WEIGHT_BYTES while it lives,
    or None where it would take the copies alive past it (less `replacing` bytes of copies it takes the place of)."""
    nbytes = 4 * floats
    if _blocked_bytes[0] - replacing + nbytes > settings.get("EMBER_BLOCKED_WEIGHT_BYTES"):
        return None
    out = np.empty(floats, _F32)
    from .cpu_malloc import huge_pages
    huge_pages(out)  # (numpy's own request may be off: cpu_malloc.no_huge_page_stalls)
    _blocked_bytes[0] += nbytes
    weakref.finalize(out, _release, nbytes)
    return out


def blocked(wt: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """An input-major float32 weight (cols, rows) re-laid in blocks of BLOCK outputs, (ceil(rows / BLOCK), cols,
    BLOCK) (into `out` where given), the rows past the last zero: one contiguous stream a block where the
    input-major rows are read a short piece of every input's row at a time (decode.c's type -2; the same sums,
    so the same bits)."""
    cols, rows = wt.shape
    nb = -(-rows // BLOCK)
    out = np.empty((nb, cols, BLOCK), np.float32) if out is None else out
    full = rows // BLOCK
    out[:full] = wt[:, :full * BLOCK].reshape(cols, full, BLOCK).transpose(1, 0, 2)
    if rows > full * BLOCK:
        out[full] = 0.0
        out[full, :, :rows - full * BLOCK] = wt[:, full * BLOCK:]
    return out


def _blocked_within_budget(b):
    arena = blocked_arena(-(-b.shape[1] // BLOCK) * b.shape[0] * BLOCK)
    return None if arena is None else blocked(b, arena.reshape(-1, b.shape[0], BLOCK))


def blocked_copy(b, second=False):
    """b (in, out) float32's blocked copy for its one-row products (ember_matvec_f32_blocked) and its products of
    a few to a few hundred rows (gemm_native.c), the same bits as from b, made once per weight of at most
    BLOCKED_MAX_OUTPUTS outputs while EMBER_BLOCKED_WEIGHT_BYTES allows it, else None. The input-major loop reads
    such a weight's rows in pieces a few KB long, from memory (a decode step reads every weight once) at ~half the
    rate of one stream, and cannot split them between threads; the GEMM copied pieces of them every call.
    second: made at the weight's second product (derived_copy)."""
    if b.shape[1] > BLOCKED_MAX_OUTPUTS:
        return None
    return derived_copy(b, "blocked", _blocked_within_budget, second)


_HALF_CHECK_ROWS = 1 << 14  # values a chunk of the exactness check converts at once (a few pages, not the matrix)


def _exact_halves(b):
    """b as float16 when every value is exactly a half, else None. Natively in one pass of the CPU's conversions
    (matvec_f16.c: numpy's cast there and back took ~0.16 s of a cold Whisper request); else converted and
    checked a chunk at a time in memory order: a whole-matrix round trip held float32 and bool temporaries as large
    as b (Whisper tiny.en's tied head: 100 MB on top of its 80, the peak of a cold process)."""
    flat = b.T if b.ndim == 2 and not b.flags.c_contiguous and b.T.flags.c_contiguous else b  # memory order
    if not flat.flags.c_contiguous:
        head = b[:1]
        if not np.array_equal(head.astype(np.float16).astype(np.float32), head):  # a float32 model's: told at once
            return None
        h = b.astype(np.float16)
        return h if np.array_equal(h.astype(np.float32), b) else None
    kern = native_kernels()
    if kern is not None:  # (one pass with the CPU's conversions)
        h = kern.f16_exact_copy(flat)
        return None if h is None else h.T if flat is not b else h
    h = np.empty(flat.shape, np.float16)
    src, dst = flat.reshape(-1), h.reshape(-1)
    for i in range(0, src.size, _HALF_CHECK_ROWS):  # (a float32 model's weight is told in the first chunk)
        part = dst[i:i + _HALF_CHECK_ROWS]
        np.copyto(part, src[i:i + _HALF_CHECK_ROWS], casting="unsafe")
        if not np.array_equal(part.astype(np.float32), src[i:i + _HALF_CHECK_ROWS]):
            return None
    return h.T if flat is not b else h


def half_copy(b):
    """b (float32) as float16 when every value is exactly a half (a float16 checkpoint's weight, such as Whisper's
    tied LM head), else None; checked and made once per weight. A product that reads it gives the same bits from
    half the bytes."""
    return derived_copy(b, "f16", _exact_halves)


def _screen(b):
    """(halves, norms) for b (in, out) float32 C-contiguous: b's values as float16 (b's own where they are exact,
    half_copy's; else b rounded, in an array counted against EMBER_BLOCKED_WEIGHT_BYTES while it lives) and each
    output's norm of them, rounded up (cpu_kernels/argmax_f32.c); None where a value is past the halves' range or
    not finite, or past the budget."""
    kern, exact = native_kernels(), half_copy(b)
    if exact is not None:
        return exact, kern.f16_screen_copy(b, None)  # (its norms alone)
    arena = blocked_arena(-(-b.size // 2))
    if arena is None:
        return None
    h = arena.view(np.float16)[:b.size].reshape(b.shape)
    norms = kern.f16_screen_copy(b, h)
    return None if norms is None else (h, norms)


def screen_copy(b):
    """(halves, norms) of b (in, out) float32 for linear_argmax's screen (cpu_kernels/argmax_f32.c): b's values as
    float16 (b's own where they are exact, half_copy's, else b rounded, counted against EMBER_BLOCKED_WEIGHT_BYTES)
    and each output's norm of them, made once per weight at its second pick (derived_copy); None where there is
    none (yet, or a value is past the halves' range, or past the budget)."""
    if not b.flags.c_contiguous:
        return None
    return derived_copy(b, "f16 screen", _screen, second=True)


# products gemm_native.c takes from OpenBLAS, measured with the weights coming from memory as in a forward pass
# (bench/bench_core.py): 16..256 rows against a weight at least 128 x 128, 2^20 multiply-adds or more (1.0-1.45x
# BLAS's speed on 1 and 2 threads; MiniLM's linears 5-8% faster); fewer rows stream the weight slower than BLAS
# (0.2-0.6x), more are even at 512 and 0.9x at 1500, and a weight whose rows lie a multiple of 4 KiB apart (2048 or
# 3072 wide) loses its L2 prefetch to set conflicts (0.9-0.97x)
_GEMM_ROWS = (16, 256)
# ... and from a weight's blocked copy (one stream a panel), 2..2048 rows: MiniLM's 36 weights at 1 / 2 threads,
# 0.45-0.65x BLAS's time at 2-16 rows, 0.73-0.94 at 32-256, 0.91-0.98 at 512-1500, 0.92-1.01 at 3000
_BLOCKED_ROWS = (2, 2048)
_GEMM_MIN_SIDE, _GEMM_MIN_WORK = 128, 1 << 20


def native_gemm(a, b, bias=None, weight=False, act=0, then_matmul=False):
    """a (..., M, K) @ b (K, N) (+ bias (N,)), float32, on gemm_native.c where it beats BLAS (_GEMM_ROWS, ...) and
    takes the operands as they lie (unit column strides), natively outside deterministic mode; else None. A
    `weight` (a matrix that may be read again) is read from its blocked copy from its second product on, where
    EMBER_BLOCKED_WEIGHT_BYTES allows one (blocked_copy: the same bits; MiniLM's 36 linears 10% faster, as
    onnxruntime's pre-packed weights), which also takes more rows (_BLOCKED_ROWS) and weights whose rows lie
    4 KiB apart from BLAS. act: an activation applied as the result is stored (cpu_float_kernels.ACTS' id).
    then_matmul: the caller's answer to None is the backend's matmul of the same operands, whose own call here
    counts the weight's read: a declined call counts none (else a biased layer's first product counted two
    reads, and made its blocked copy on the first forward: ~25 MB of a cold one-window Whisper request)."""
    if NO_BLAS or _deterministic[0] or b.ndim != 2 or b.dtype != _F32 or a.dtype != _F32 or a.ndim < 2:
        return None
    k, n = b.shape
    rows = a.size // k if k else 0
    if not (_BLOCKED_ROWS[0] <= rows <= _BLOCKED_ROWS[1] and k >= _GEMM_MIN_SIDE and n >= _GEMM_MIN_SIDE
            and rows * k * n >= _GEMM_MIN_WORK):
        return None
    if bias is not None and (bias.dtype != _F32 or bias.shape != (n,) or not bias.flags.c_contiguous):
        return None
    kern = native_kernels()
    if kern is None or not kern.sgemm_width:
        return None
    a2 = a.reshape(rows, k)  # (a view where a's rows lie evenly apart, else a copy)
    if a2.strides[1] != 4 or b.strides[1] != 4 or a2.strides[0] % 4 or b.strides[0] % 4 or \
            a2.strides[0] < 0 or b.strides[0] <= 0:
        return None
    plain = _GEMM_ROWS[0] <= rows <= _GEMM_ROWS[1] and b.strides[0] % 4096  # (gemm_native.c from b as it lies)
    if weight and then_matmul and not plain:  # (it runs from a copy made before, or declines uncounted)
        wb = derived(b, "blocked")
    else:
        wb = blocked_copy(b, second=True) if weight else None
    if wb is None and not plain:
        return None
    return kern.sgemm(a2, b, bias, wb, act).reshape(a.shape[:-1] + (n,))


def mm(a, b, out=None):
    """np.matmul; under Pyodide the wasm SIMD GEMM for float32 (matrices, batched, broadcast, any strides)
    but the smallest products (on the kernel pool's threads for large ones), else float32 einsum (1.6x faster there
    than np.matmul on attention, see einsum_matmul). Natively, operands BLAS cannot take as they lie are made
    contiguous first (blas_ready). In deterministic mode every float32 product runs in the page's kernels."""
    if _deterministic[0] and a.dtype == _F32 and b.dtype == _F32 and a.ndim >= 2 and b.ndim >= 2:
        if b.ndim == 2 and a.size == a.shape[-1] and not b.flags.f_contiguous:
            # one row times a matrix sums in an order that follows B's layout (gemm.c's gemv): always the column-
            # major one, a weight's as the page stores it, whatever layout this process loaded the weight in
            b = _column_major_copy(b)
        if NO_BLAS:  # the page's pool runs the plain module's GEMM too (gemm_exact.c): the same bits, on every thread
            pool = pool_kernels()
            if pool is not None and pool.takes_matmul(a, b):
                return pool.matmul(a, b, out, exact=True)
        return page_kernels().matmul(a, b, out)  # every size: einsum's and BLAS's orders differ between builds
    if not NO_BLAS:
        return np.matmul(blas_ready(a), blas_ready(b), out=out)
    if a.dtype == _F32 and b.dtype == _F32:
        pool = pool_kernels()
        if pool is not None and a.ndim >= 2 and b.ndim >= 2 and pool.takes_matmul(a, b):
            return pool.matmul(a, b, out)
        kernels = wasm_kernels()
        if kernels is not None and a.ndim >= 2 and b.ndim >= 2 \
                and max(a.size * b.shape[-1], b.size * a.shape[-2]) >= _KERNEL_MIN_MNK:
            return kernels.matmul(a, b, out)
        return einsum_matmul(a, b) if out is None else np.einsum("...ij,...jk->...ik", a, b, out=out)
    return np.matmul(a, b, out=out)
