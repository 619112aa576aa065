"""A decoded token through a stack of transformer layers in one call of the CPU kernels (cpu_kernels/decode.c):
the CPU's kernel for the registry's `decoder_plan` op (ember.kernels).

A model describes its layers once (models/common/fused_decode.py, `model_spec`: numpy arrays and ints, no backend
names); `DecodePlan` lays them out as the intptr_t record decode.c reads, and `step` runs one token: x (dim,)
in place, the rotary tables of its position, and where each layer's cache row goes. The native kernels
(cpu_native_kernels.py) or the page's wasm ones run it, whichever the CPU backend has; without either there is
no plan and the model runs its layers op by op (the composed path, which decode.c follows step for step).

spec = {"dim", "heads", "kv_heads", "head_dim", "hidden": ints, "act": "gelu_tanh" | "silu", "eps", "scale":
floats, "norm_final": the final RMSNorm's float32 (dim,) or absent, "layers": [{"norm_attn", "norm_attn_post", "norm_ffn", "norm_ffn_post", "norm_q", "norm_k": float32 (n,)
or None, "q", "k", "v", "o", "gate", "up", "down": (data, type, rows, cols), "rope": int}]}, a weight's type a
GGML id of a q8dot.c type (data: its uint8 blocks (rows, row_bytes)), 0 (float32 (rows, cols)) or -1 (float32
stored input-major: data is (cols, rows), rows of floats that may be a slice of wider ones). A plan re-lays the
input-major ones in blocks of 16 outputs (`blocked`, type -2: what decode.c streams fastest, the same bits) where
EMBER_BLOCKED_WEIGHT_BYTES allows the copy.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import cpu_matmul
from .cpu_matmul import BLOCK, adopt_derived, blocked, blocked_arena, derived

_H = ("layers", "dim", "heads", "kv_heads", "head_dim", "hidden", "act", "unused", "final_norm")
_W = 5  # data, type, rows, cols, row bytes
_NORMS = ("norm_attn", "norm_attn_post", "norm_ffn", "norm_ffn_post", "norm_q", "norm_k")
_WEIGHTS = ("q", "k", "v", "o", "gate", "up", "down")
L_ROPE = len(_NORMS) + _W * len(_WEIGHTS)
L_KCACHE, L_VCACHE, L_CAPACITY, L_SLOT, L_LENGTH = range(L_ROPE + 1, L_ROPE + 6)
L_FIELDS = L_ROPE + 6
ACTS = {"gelu_tanh": 0, "silu": 1}
_BITS = np.dtype(np.intp).itemsize * 8


def _addr(a: np.ndarray) -> int:
    """a's address as an intp (a wasm32 heap past 2 GiB has addresses >= 2**31: the same bits, negative)."""
    p = a.__array_interface__["data"][0]
    return p - (1 << _BITS) if p >= 1 << (_BITS - 1) else p


def kernels():
    """The compiled kernels that run plans here (native, the page's kernel pool, or its wasm module), or None."""
    if not cpu_matmul.NO_BLAS:
        return cpu_matmul.native_kernels()
    return cpu_matmul.pool_kernels() or cpu_matmul.wasm_kernels()


def _stacked(data):
    """(matrix, first block): the input-major matrix whose columns the weight `data` is a slice of (the stacked
    q, k, v) and the block of 16 its first column starts, -1 where it starts inside one; (data, 0) for a weight
    that is no such slice."""
    whole = data.base
    if not (isinstance(whole, np.ndarray) and whole.ndim == 2 and whole.flags.c_contiguous
            and whole.shape[0] == data.shape[0] and whole.strides == data.strides):
        return data, 0
    col = (data.__array_interface__["data"][0] - whole.__array_interface__["data"][0]) // 4
    return whole, col // BLOCK if col % BLOCK == 0 else -1


class DecodePlan:
    """The layers of one model, laid out for decode.c (weights by address: the plan keeps the arrays alive).
    cpu_pool_kernels.PoolDecodePlan lays them out in the page's kernel pool instead (its `_vector`, `_weight`)."""

    def __init__(self, kern, spec: dict):
        self._kern, self.spec = kern, spec
        layers = spec["layers"]
        self.n_layers, self.dim = len(layers), int(spec["dim"])
        self.final_norm = spec.get("norm_final") is not None
        self._keep = []
        plan = np.zeros(len(_H) + L_FIELDS * len(layers), np.intp)
        final = spec.get("norm_final")
        plan[:len(_H)] = [len(layers), spec["dim"], spec["heads"], spec["kv_heads"], spec["head_dim"], spec["hidden"],
                          ACTS[spec["act"]], 0, 0 if final is None else self._vector(final)]
        self._layers = plan[len(_H):].reshape(len(layers), L_FIELDS)
        blocks = self._blocked_copies([layer[name] for layer in layers for name in _WEIGHTS])
        for row, layer in zip(self._layers, layers):
            for i, name in enumerate(_NORMS):
                if layer[name] is not None:
                    row[i] = self._vector(layer[name])
            for j, name in enumerate(_WEIGHTS):
                data, type_id, rows, cols = layer[name]
                if type_id == -1 and blocks is not None:
                    data, type_id = next(blocks), -2
                at, lead = self._weight(data, type_id)
                row[len(_NORMS) + _W * j: len(_NORMS) + _W * (j + 1)] = [at, self._kind(data, type_id), rows, cols,
                                                                         lead]
            row[L_ROPE] = layer["rope"]
        self.plan = plan
        self.fparams = np.array([spec["eps"], spec["scale"]], np.float32)
        self._scratch = np.empty(0, np.uint8)
        self._scratch_rows = -1
        self._buffers = [None] * len(layers)  # per layer weak references to the (k, v) buffers its row points at

    def _blocked_copies(self, weights):
        """The blocked copies (type -2) of the input-major float32 weights among `weights`' (data, type, rows, cols),
        in their order, or None where they would take the blocked copies past EMBER_BLOCKED_WEIGHT_BYTES (the
        weights stay input-major: a second copy of them is the price)."""
        major = [w[0] for w in weights if w[1] == -1]
        # a copy a matrix: the stacked q, k, v (gate, up) the plan reads slices of, where each starts at a block
        # (a prompt's products of the whole matrix, gemm_native.c's, then read the same copy)
        places = [_stacked(data) for data in major]
        off = {id(m) for m, first in places if first < 0}  # (a matrix with a slice off the blocks: copied by slices)
        places = [(data, 0) if id(m) in off else (m, first) for data, (m, first) in zip(major, places)]
        units = list({id(m): m for m, _ in places}.values())
        shapes = [(-(-m.shape[1] // BLOCK), m.shape[0], BLOCK) for m in units]
        # one array: numpy asks the kernel to back a large one with huge pages (in 4 KB pages, as separate
        # 0.3-0.9 MB arrays, the stories15M shape's layers streamed at ~2/3 the rate of its 37 MB head). Copies
        # that products made before (a prompt's) move into it: one copy of a weight, not two
        made = [derived(m, "blocked") for m in units]
        total = sum(int(np.prod(shape)) for shape in shapes)
        arena = blocked_arena(total, sum(c.nbytes for c in made if c is not None)) if units else None
        if arena is None:
            return None
        copies, at = {}, 0
        for m, shape, old in zip(units, shapes, made):
            n = int(np.prod(shape))
            view = arena[at:at + n].reshape(shape)
            if old is None:
                blocked(m, view)
            else:
                view[...] = old
            adopt_derived(m, "blocked", view)
            copies[id(m)] = view
            at += n
        return iter(copies[id(m)][first:first + -(-data.shape[1] // BLOCK)]
                    for data, (m, first) in zip(major, places))

    def _vector(self, a) -> int:
        """The address of a float32 (n,) array the plan reads (a norm's weight)."""
        return _addr(self._hold(np.ascontiguousarray(a, np.float32)))

    def _weight(self, data, type_id) -> tuple[int, int]:
        """(address, lead) of a weight: lead is the bytes of a row of blocks, or for input-major float32 the
        leading dimension in floats."""
        data = self._hold(data, strided=type_id == -1)
        return _addr(data), data.shape[1] if type_id > 0 else data.strides[0] // 4 if type_id == -1 else 0

    def _kind(self, data, type_id) -> int:
        """The type id decode.c takes for a weight of type `type_id` (the kernel pool's plan: its rows' layout)."""
        return type_id

    def _hold(self, a, strided=False):
        """Keep `a` alive as long as the plan reads it: C-contiguous, or (strided) rows of contiguous floats."""
        if not (a.flags.c_contiguous or strided and a.ndim == 2 and a.strides[1] == a.itemsize
                and a.strides[0] % a.itemsize == 0):
            raise ValueError("ember: decode plan: a weight whose layout decode.c does not read")
        self._keep.append(a)
        return a

    def step(self, x: np.ndarray, rope: np.ndarray, caches, written=None) -> np.ndarray:
        """x (dim,) float32 through every layer, in place; rope (kinds, head_dim) float32: [cos | sin] halves of
        the token's rotary angles per kind; caches: per layer (k buffer, v buffer, slot, length) with the buffers
        float32 (1, kv_heads, capacity, head_dim) C-contiguous numpy arrays. written: a count of the writes made
        to the caches by others (the pool's plan keeps copies of them; here it is not needed)."""
        held = self._buffers
        for i, (kc, vc, _, _) in enumerate(caches):
            if held[i] is None or held[i][0]() is not kc or held[i][1]() is not vc:  # (a cache grows by new buffers)
                held[i] = (weakref.ref(kc), weakref.ref(vc))  # (a dead one is never taken for a new one)
                row = self._layers[i]
                row[L_KCACHE], row[L_VCACHE], row[L_CAPACITY] = _addr(kc), _addr(vc), kc.shape[2]
        if caches:  # every layer's row and length at once (~0.3 ms a token as 30 rows' field writes)
            self._layers[:, L_SLOT:L_LENGTH + 1] = [c[2:] for c in caches]
        length = max((c[3] for c in caches), default=0)
        if length > self._scratch_rows:  # grown by doubling, as the caches are
            rows = max(length, 2 * self._scratch_rows, 256)
            self._scratch = np.empty(self._kern.decode_scratch_bytes(self.plan, rows), np.uint8)
            self._scratch_rows = rows
        rope = np.ascontiguousarray(rope, np.float32)
        if self._kern.decode(self.plan, self.fparams, x, rope, self._scratch) != 0:
            raise ValueError("ember: decode plan: a layer this build of the kernels cannot run")
        return x


def describe(be=None) -> str:
    k = kernels()
    if k is None:
        return "composed (no compiled kernels here)"
    where = "native" if not cpu_matmul.NO_BLAS else "wasm" if k is cpu_matmul.wasm_kernels() else k.describe()
    return f"cpu_kernels/decode.c ember_decode ({where})"


def decoder_plan(be, spec: dict | None) -> DecodePlan | None:
    """A DecodePlan for spec where compiled kernels run here and take its weights, else None (the model then runs
    its layers op by op)."""
    kern = kernels()
    pool = cpu_matmul.NO_BLAS and kern is not None and kern is not cpu_matmul.wasm_kernels()  # the kernel pool's
    if spec is None or kern is None or not (pool or hasattr(kern, "decode")) or spec["act"] not in ACTS:
        return None
    for layer in spec["layers"]:
        for name in _WEIGHTS:
            data, type_id, rows, cols = layer[name]
            if type_id > 0 and kern.act_bytes(type_id, 1, cols) < 0 or \
                    type_id <= 0 and (data.dtype != np.float32 or cols % 8):
                return None
    if pool:
        from .cpu_pool_kernels import PoolDecodePlan
        return PoolDecodePlan(kern, spec)
    return DecodePlan(kern, spec)
