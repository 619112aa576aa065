"""The page's kernel pool, from Python: the CPU backend's C kernels on every core the browser lends the page.

Pyodide has no threads, so ember brings its own: web/pool.js instantiates `cpu_pool_kernels.wasm` (the kernels of
cpu_kernels/*.c with pool.c: parallel.h's rows split between threads) in N - 1 Web Workers and in this (the
Pyodide) worker, all over one shared WebAssembly.Memory, and hands this worker `emberPool` (a JS object). The pool's
memory is not Pyodide's: a kernel's operands are copied in, its results copied out, and weights are placed in it
once (`Pool.place`, kept while their array lives; a GGUF's quantized blocks go there straight from the file:
`SharedRows`). cpu_pool_kernels.py runs the kernels on it; cpu_matmul.pool_kernels() says whether it is in use.

`load()` answers (Pool, "") where the page has a pool of 2 threads or more, else (None, why not): not under
Pyodide, no pool offered (threads: 1, or the page is not cross-origin isolated: web/pool.js says which), a module
that does not match the side module's SIMD variant, or a pool that lost a worker (PoolError, once, then why).
"""
from __future__ import annotations

import bisect
import contextlib
import sys
import weakref
from pathlib import Path

import numpy as np

from ..errors import EmberError

POOL_MODULE = Path(__file__).with_name("cpu_pool_kernels.wasm")
POOL_RELAXED_MODULE = Path(__file__).with_name("cpu_pool_kernels_relaxed.wasm")
GROW_BYTES = 16 << 20  # the shared memory grows by at least this much (a grow costs ~a page fault per page)
ALIGN = 64


class PoolError(EmberError, RuntimeError):
    """A job of the page's kernel pool did not complete: a worker died, was terminated, or stopped answering."""


# ============================================================================ the shared memory's allocator

class Arena:
    """First-fit allocation of byte ranges at or above `base` in a memory that grows at its end: `grow(end)` makes
    the memory at least `end` bytes long and returns its size (-1 when it cannot). Offsets are ALIGN-aligned."""

    def __init__(self, base: int, size: int, grow):
        self._grow, self.top = grow, size  # the memory's current size
        base = -(-base // ALIGN) * ALIGN
        self._free_at, self._free_len = [base], [size - base]  # sorted starts of free ranges, and lengths
        self._used: dict[int, int] = {}

    def alloc(self, nbytes: int) -> int:
        n = max(ALIGN, -(-int(nbytes) // ALIGN) * ALIGN)
        for i, length in enumerate(self._free_len):
            if length >= n:
                at = self._free_at[i]
                if length == n:
                    del self._free_at[i], self._free_len[i]
                else:
                    self._free_at[i] += n
                    self._free_len[i] -= n
                self._used[at] = n
                return at
        # grow: the last free range, if it ends at the top, is extended
        last_free = self._free_at and self._free_at[-1] + self._free_len[-1] == self.top
        start = self._free_at[-1] if last_free else self.top
        want = start + n
        grown = self._grow(max(want, self.top + max(GROW_BYTES, self.top // 8)))
        if grown < want:  # (short of room for the generous step: just what is needed)
            grown = self._grow(want)
        if grown < want:
            raise MemoryError(f"ember: the kernel pool's shared memory cannot grow to {want / 2**20:.0f} MiB "
                              f"(it holds {self.used_bytes() / 2**20:.0f} MiB)")
        if last_free:
            self._free_len[-1] += grown - self.top
        else:
            self._free_at.append(self.top)
            self._free_len.append(grown - self.top)
        self.top = grown
        return self.alloc(n)

    def free(self, at: int):
        n = self._used.pop(at)
        i = bisect.bisect(self._free_at, at)
        self._free_at.insert(i, at)
        self._free_len.insert(i, n)
        if i + 1 < len(self._free_at) and at + n == self._free_at[i + 1]:  # merge with the next
            self._free_len[i] += self._free_len.pop(i + 1)
            del self._free_at[i + 1]
        if i > 0 and self._free_at[i - 1] + self._free_len[i - 1] == at:  # and the previous
            self._free_len[i - 1] += self._free_len.pop(i)
            del self._free_at[i]

    def used_bytes(self) -> int:
        return sum(self._used.values())


class Block:
    """nbytes of the shared memory at `at`, freed when the Block is collected."""

    __slots__ = ("at", "nbytes", "__weakref__")

    def __init__(self, arena: Arena, nbytes: int):
        self.at, self.nbytes = arena.alloc(nbytes), int(nbytes)
        weakref.finalize(self, arena.free, self.at)


def addr(a: np.ndarray) -> int:
    """a's address in Pyodide's heap."""
    return a.__array_interface__["data"][0]


def i32(address: int) -> int:
    """An address as the signed 32-bit int a wasm export takes (the same bits past 2 GiB)."""
    return ((address + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


# ============================================================================ the pool

class Pool:
    """The JS pool this worker calls (web/pool.js attachPool): its threads, its memory's allocator, copies between
    Pyodide's heap and the shared memory, weights placed once."""

    def __init__(self, js_pool):
        self.js = js_pool
        self.threads = int(js_pool.threads)
        self.variant = str(js_pool.variant)
        self.exports = js_pool.exports
        self._copy_in, self._copy_out = js_pool.copyIn, js_pool.copyOut
        self.arena = Arena(int(js_pool.arenaBase), int(js_pool.bytes()), lambda end: int(js_pool.grow(end)))
        self._placed: dict[int, tuple] = {}  # id(array) -> (weakref to it, Block)
        self.broken = ""  # why jobs no longer run in parallel (PoolError told once)

    # ---------------------------------------------------------------- copies

    def write(self, at: int, a: np.ndarray):
        """a (C-contiguous) into the shared memory at byte `at`."""
        if a.nbytes:
            self._copy_in(addr(a), a.nbytes, at)

    def read(self, at: int, out: np.ndarray) -> np.ndarray:
        """out (C-contiguous) filled from the shared memory at byte `at`."""
        if out.nbytes:
            self._copy_out(at, out.nbytes, addr(out))
        return out

    def write_raw(self, ptr: int, nbytes: int, at: int):
        """nbytes of Pyodide's heap at `ptr` into the shared memory at `at`."""
        self._copy_in(ptr, nbytes, at)

    def read_raw(self, at: int, nbytes: int, ptr: int):
        """nbytes from the shared memory at `at` to Pyodide's heap at `ptr`."""
        self._copy_out(at, nbytes, ptr)

    def read_rows(self, rows: np.ndarray, slots: np.ndarray):
        """Copies out of the shared memory listed as rows of (at, nbytes, ptr, layer), int32 (n, 4) C-contiguous,
        each moved at both ends by nbytes times slots[layer, 0] (slots: int32 (layers, 2) C-contiguous)."""
        self.js.copyOutRows(addr(rows), len(rows), addr(slots), len(slots))

    def place(self, a: np.ndarray) -> Block:
        """The shared copy of an array that is not written while it lives (weights: QTensor blocks, the layers a
        decode plan reads), made at its first use and freed with it."""
        hit = self._placed.get(id(a))
        if hit is not None and hit[0]() is a:
            return hit[1]
        c = np.ascontiguousarray(a)
        block = Block(self.arena, max(c.nbytes, 1))
        self.write(block.at, c)
        key = id(a)
        self._placed[key] = (weakref.ref(a, lambda _, k=key: self._placed.pop(k, None)), block)
        return block

    # ---------------------------------------------------------------- state

    def check(self, rc: int, what: str) -> int:
        """rc of a kernel call: PARALLEL_LOST raises PoolError (and the pool runs on this thread alone from
        then on); other values are returned."""
        if rc != -2:
            return rc
        st = self.state()
        why = f"worker {st['lost']} of the kernel pool was lost mid-job" if st["broken"] == 1 else \
            f"no worker of the kernel pool completed a chunk for {st['timeout_ms']} ms"
        self.broken = why
        raise PoolError(f"ember: {what}: {why}; the page computes on one thread from now on (reload it for the "
                        f"pool again)")

    def state(self) -> dict:
        """The control words: active (threads a job uses), ready (workers in their loop), lost (a lost worker's
        index or 0), broken (0, 1: a worker lost, 2: none answered), jobs (run in parallel), timeout_ms."""
        st = self.js.state()
        return {k: int(getattr(st, k)) for k in ("active", "ready", "lost", "broken", "jobs", "timeout_ms")}


    def rows_from_file(self, f, offset: int, nbytes: int, row_bytes: int, type_id: int = 0) -> "SharedRows":
        """nbytes of an open file from `offset` as SharedRows of row_bytes each, read into the shared memory without
        a copy in Pyodide's heap: straight from the JS array of a file in Pyodide's in-memory FS (the page's model
        files), else through a small reused buffer. Blocks of a GGML type with a bytes layout (BYTES_LAYOUT) are
        expanded into it where they lie (q8dot.c's ember_q8_expand, from the last block back)."""
        layout = BYTES_LAYOUT.get(type_id)
        if layout is not None and (row_bytes % layout[1] or nbytes % row_bytes):
            layout = None
        stride = row_bytes // layout[1] * layout[2] if layout else row_bytes
        block = Block(self.arena, nbytes // row_bytes * stride if layout else nbytes)
        if not self._file_in(f, offset, nbytes, block.at):
            buf = np.empty(min(nbytes, READ_BYTES), np.uint8)
            for done in range(0, nbytes, buf.size):
                part = buf[:min(buf.size, nbytes - done)]
                f.seek(offset + done)
                if f.readinto(memoryview(part)) != part.size:
                    raise OSError(f"ember: {getattr(f, 'name', 'file')}: shorter than its header says")
                self.write(block.at + done, part)
        if layout is None:
            return SharedRows(self, block, 0, (nbytes // row_bytes, row_bytes))
        if int(self.exports.ember_q8_expand(type_id, nbytes // layout[1], i32(block.at), i32(block.at))) != 0:
            raise PoolError(f"ember: the kernel pool's module has no bytes layout for GGML type {type_id}")
        return SharedRows(self, block, 0, (nbytes // row_bytes, row_bytes), (layout[0], stride))

    def _file_in(self, f, offset, nbytes, at) -> bool:
        try:
            import pyodide_js
            node = pyodide_js.FS.lookupPath(f.name).node
        except Exception:  # noqa: BLE001 - not a file of Pyodide's FS (a test's mount): read it instead
            return False
        return bool(self.js.fileIn(node, offset, nbytes, at))


READ_BYTES = 4 << 20  # rows_from_file's buffer where it reads

# GGML type -> (q8dot.c's bytes layout of it, a GGML block's bytes, a bytes block's): Q5_0 as f16 d | 32 bytes q.
# The pool's products read its levels as they are (V8 made Q5_0's 5th-bit decoding cost more than the dot itself:
# Gemma 3's Q5_0 products 11 -> 15 GMAC/s a thread in Chromium) and give Q5_0's bits; 34 / 22 of the bytes.
BYTES_LAYOUT = {6: (256 + 6, 22, 34)}


def _q5_0_blocks(stored: np.ndarray) -> np.ndarray:
    """Q5_0B blocks (rows, n 34) back as GGML's Q5_0 (rows, n 22): d | 5th bits (u32, bit j of level j) | nibbles
    (levels j and j + 16 in byte j)."""
    b = stored.reshape(-1, 34)
    q = b[:, 2:]
    qh = ((q >> 4).astype(np.uint32) << np.arange(32, dtype=np.uint32)).sum(axis=1, dtype=np.uint32)
    out = np.concatenate([b[:, :2], qh.astype("<u4").view(np.uint8).reshape(-1, 4),
                          (q[:, :16] & 0xF) | (q[:, 16:] << 4)], axis=1)
    return out.reshape(stored.shape[0], -1)


_UNPACK = {BYTES_LAYOUT[6][0]: _q5_0_blocks}  # a bytes layout's id -> its GGML blocks back

_POOL: list = []  # [(Pool or None, reason)] once looked up
_PLACING: list = []  # a weights_in_pool() is open


@contextlib.contextmanager
def weights_in_pool():
    """Within it, quantized weights that formats read from files (GGUF) go straight into the page's kernel pool,
    as SharedRows, and nowhere else: for a model loaded for the CPU (a WebGPU device reads its weights from the
    host's arrays). A no-op where there is no pool."""
    _PLACING.append(True)
    try:
        yield
    finally:
        _PLACING.pop()


def placing():
    """The Pool that quantized weights read now go to (inside weights_in_pool() with a pool in use), or None."""
    if not _PLACING:
        return None
    from .cpu_matmul import pool_kernels
    k = pool_kernels()
    return k.pool if k is not None else None


class SharedRows:
    """A quantized weight's uint8 rows (rows, row_bytes) held in the kernel pool's shared memory only: the pool's
    kernels read them where they are (`at`); anything else gets a copy in Pyodide's heap (np.asarray(rows),
    rows[ids] for some rows, rows.numpy()), and a row slice is a view. Immutable, like the QTensor holding it."""

    __slots__ = ("pool", "block", "offset", "shape", "layout", "_heap", "__weakref__")
    dtype = np.dtype(np.uint8)
    ndim = 2

    def __init__(self, pool: Pool, block: Block, offset: int, shape: tuple[int, int], layout=None):
        self.pool, self.block, self.offset, self.shape = pool, block, offset, (int(shape[0]), int(shape[1]))
        self.layout = layout  # None: GGML's blocks as the file has them; else (kernel type id, bytes a row) of a
        self._heap = None     # bytes layout (BYTES_LAYOUT), which the pool's kernels read in place of the type's

    def kernel_type(self, type_id: int) -> int:
        """The type id the pool's kernels take for these rows of GGML type `type_id`."""
        return self.layout[0] if self.layout else type_id

    @property
    def stride(self) -> int:
        """Bytes from one stored row to the next."""
        return self.layout[1] if self.layout else self.shape[1]

    @property
    def at(self) -> int:
        return self.block.at + self.offset

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def size(self) -> int:
        return self.nbytes

    def __len__(self):
        return self.shape[0]

    def numpy(self) -> np.ndarray:
        """A copy in Pyodide's heap (GGML's blocks)."""
        if self.layout:
            return _UNPACK[self.layout[0]](self.pool.read(self.at, np.empty((self.shape[0], self.stride), np.uint8)))
        return self.pool.read(self.at, np.empty(self.shape, np.uint8))

    def heap(self) -> np.ndarray:
        """A copy in Pyodide's heap kept with these rows: for a page whose pool stopped (the thread's own
        kernels read the heap)."""
        if self._heap is None:
            self._heap = self.numpy()
        return self._heap

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def reshape(self, *shape):
        return self.numpy().reshape(*shape)

    def tobytes(self) -> bytes:
        return self.numpy().tobytes()

    def __getitem__(self, index):
        """rows[a:b] -> a view (SharedRows); rows[ids] (ints, an integer array) -> a numpy copy of those rows."""
        if isinstance(index, slice) and index.step in (None, 1):
            start, stop, _ = index.indices(self.shape[0])
            stop = max(start, stop)
            return SharedRows(self.pool, self.block, self.offset + start * self.stride, (stop - start, self.shape[1]),
                              self.layout)
        ids = np.asarray(index)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ember: SharedRows take a row slice or row ids, not {index!r}")
        flat = ids.reshape(-1)
        out = np.empty((flat.size, self.stride), np.uint8)
        for i, r in enumerate(flat.tolist()):
            if not -self.shape[0] <= r < self.shape[0]:
                raise IndexError(f"ember: row {r} is out of range for {self.shape[0]} rows")
            self.pool.read(self.at + (r % self.shape[0]) * self.stride, out[i])
        if self.layout:
            out = _UNPACK[self.layout[0]](out)
        return out.reshape(*ids.shape, self.shape[1])

    def __reduce__(self):  # a pickled or deep-copied weight leaves the pool: it is a plain array then
        return (np.asarray, (self.numpy(),))

    def __repr__(self):
        return f"SharedRows(shape={self.shape}, at={self.at}{', layout=%r' % (self.layout,) if self.layout else ''})"


def load() -> tuple[Pool | None, str]:
    """(Pool, "") where this worker has a kernel pool of 2 threads or more, else (None, why not)."""
    if sys.platform != "emscripten":
        return None, "not running under Pyodide (native kernels use their own threads)"
    try:
        import js
    except ImportError:
        return None, "no JavaScript host"
    pool = getattr(js, "emberPool", None)
    if pool is None:
        return None, "no kernel pool was started (this page or runner passes none)"
    threads = int(getattr(pool, "threads", 1) or 1)
    if threads < 2 or getattr(pool, "exports", None) is None:
        return None, str(getattr(pool, "reason", "") or "threads: 1")
    return Pool(pool), ""


def get() -> tuple[Pool | None, str]:
    """The pool (looked up once) and why there is none."""
    if not _POOL:
        _POOL.append(load())
    return _POOL[0]


def reset():
    """Look the pool up again at the next get() (tests, and a page that attached one after import)."""
    _POOL.clear()
