"""A decoded token through an encoder-decoder's decoder layers (Whisper's) in one call of the CPU kernels
(cpu_kernels/decode_xattn.c): the CPU's kernel for the registry's `xattn_decoder_plan` op.

A model describes its layers once (models/whisper/fused_decode.py: numpy arrays and ints, no backend names);
`XattnPlan` lays them out as the intptr_t record decode_xattn.c reads, and `step` runs one token: x (dim,) in
place, where each layer's self-attention cache row goes and the encoder's keys and values it attends to.

spec = {"dim", "heads", "head_dim", "hidden": ints, "act": "gelu" | "gelu_tanh" | "relu" | "silu", "eps",
"scale": floats, "norm": (weight, bias) of the final LayerNorm or None, "layers": [{"ln1", "ln2", "ln3":
(weight, bias) float32 (dim,) (either may be None), "q", "k", "v", "o", "xq", "xo", "fc1", "fc2": (data, type,
rows, cols, bias or None)}], "head": the output projection's float32 (vocab, dim) or absent}, a weight's data
float32 (rows, cols) (type 0) or input-major (cols, rows) rows of floats (type -1). The head is the model's: here
`logits` leaves it to the model's own matmul; the page's kernel pool runs it (cpu_pool_kernels.PoolXattnPlan).
"""
from __future__ import annotations

import numpy as np

from . import cpu_matmul
from .cpu_decode import _addr
from .cpu_float_kernels import ACTS, kernels

_H = ("layers", "dim", "heads", "head_dim", "hidden", "act", "unused", "norm_w", "norm_b")
_W = 6  # data, type, rows, cols, lead, bias
_NORMS = ("ln1", "ln2", "ln3")
_WEIGHTS = ("q", "k", "v", "o", "xq", "xo", "fc1", "fc2")
_L_CACHE = 2 * len(_NORMS) + _W * len(_WEIGHTS)
L_FIELDS = _L_CACHE + 8  # k cache, v cache, capacity, slot, length, cross k, cross v, cross length


def describe(be=None) -> str:
    k = kernels()
    return "composed (no compiled kernels here)" if k is None else \
        "cpu_kernels/decode_xattn.c ember_xattn_decode" + (" (native)" if k.native else " (wasm)")


class XattnPlan:
    """The decoder layers of one model, laid out for decode_xattn.c (the plan keeps the arrays alive). Natively an
    input-major weight whose values are all halves (a float16 checkpoint's) is read as halves (type -2): the same
    bits from half the bytes a token; the page's plans keep float32 (its heap holds one copy of each weight)."""
    halves = True

    def __init__(self, kern, spec: dict):
        self._kern, self.spec = kern, spec
        layers = spec["layers"]
        self.n_layers, self.dim = len(layers), int(spec["dim"])
        self._keep = []
        norm_w, norm_b = spec.get("norm") or (None, None)
        plan = np.zeros(len(_H) + L_FIELDS * len(layers), np.intp)
        plan[:len(_H)] = [len(layers), spec["dim"], spec["heads"], spec["head_dim"], spec["hidden"],
                          ACTS[spec["act"]], 1, self._vec(norm_w), self._vec(norm_b)]
        self._layers = plan[len(_H):].reshape(len(layers), L_FIELDS)
        for row, layer in zip(self._layers, layers):
            for i, name in enumerate(_NORMS):
                w, b = layer[name] or (None, None)
                row[2 * i], row[2 * i + 1] = self._vec(w), self._vec(b)
            for j, name in enumerate(_WEIGHTS):
                data, type_id, rows, cols, bias = layer[name]
                if type_id == -1 and not (data.ndim == 2 and data.strides[1] == 4 and data.strides[0] % 4 == 0) or \
                        type_id == 0 and not data.flags.c_contiguous or data.dtype != np.float32:
                    raise ValueError("ember: xattn decode plan: a weight whose layout decode_xattn.c does not read")
                if type_id == -1 and self.halves and not cpu_matmul.NO_BLAS:
                    half = cpu_matmul.half_copy(data)
                    data, type_id = (data, type_id) if half is None else (half, -2)
                address, lead = self._weight(data, type_id, cols)
                at = 2 * len(_NORMS) + _W * j
                row[at:at + _W] = [address, type_id, rows, cols, lead, self._vec(bias)]
        self.plan = plan
        self.fparams = np.array([spec["eps"], spec["scale"]], np.float32)
        self._scratch = np.empty(0, np.uint8)
        self._scratch_keys = -1

    def _vec(self, a) -> int:
        """The address of a float32 (n,) array the plan reads (a norm's weight, a bias), or 0 for None."""
        if a is None:
            return 0
        a = np.ascontiguousarray(a, np.float32)
        self._keep.append(a)
        return _addr(a)

    def _weight(self, data, type_id, cols) -> tuple[int, int]:
        """(address, lead) of a weight: lead is the values from one input's row to the next (input-major), or cols.
        cpu_pool_kernels.PoolXattnPlan places them in the page's kernel pool instead (its `_vec`, `_weight`)."""
        self._keep.append(data)
        return _addr(data), data.strides[0] // data.itemsize if type_id < 0 else cols

    def step(self, x: np.ndarray, caches, cross, written=None) -> np.ndarray:
        """x (dim,) float32 through every layer and the final norm, in place. caches: per layer (k buffer, v
        buffer, slot, length), buffers float32 (1, heads, capacity, head_dim) C-contiguous; cross: per layer (k,
        v) float32 (1, heads, keys, head_dim) C-contiguous. written: a count of the writes made to the caches by
        others (the pool's plan keeps copies of them; here it is not needed)."""
        keys = 0
        for row, (kc, vc, slot, n), (xk, xv) in zip(self._layers, caches, cross):
            row[_L_CACHE:] = [_addr(kc), _addr(vc), kc.shape[2], slot, n, _addr(xk), _addr(xv), xk.shape[2]]
            keys = max(keys, n, xk.shape[2])
        if keys > self._scratch_keys:
            self._scratch_keys = max(keys, 2 * self._scratch_keys, 512)
            self._scratch = np.empty(self._kern.xattn_decode_scratch_bytes(self.plan, self._scratch_keys), np.uint8)
        if self._kern.xattn_decode(self.plan, self.fparams, x, self._scratch) != 0:
            raise ValueError("ember: xattn decode plan: a layer this build of the kernels cannot run")
        return x

    def logits(self, x: np.ndarray) -> np.ndarray | None:
        """x (dim,) float32, a step's output -> the head's logits (vocab,) float32 (x @ head^T, as the model's matmul
        gives them) where this plan computes them, else None (the model's own matmul: here)."""
        return None


def decoder_plan(be, spec: dict | None) -> XattnPlan | None:
    """An XattnPlan for spec where compiled kernels run here and take its weights, else None (the model then runs
    its layers op by op)."""
    kern = kernels()
    if spec is None or kern is None or spec["act"] not in ACTS or spec["dim"] % 8 or spec["head_dim"] % 8 or \
            spec["hidden"] % 8 or spec["heads"] * spec["head_dim"] != spec["dim"]:
        return None
    for layer in spec["layers"]:
        for name in _WEIGHTS:
            data, type_id, _, cols, bias = layer[name]
            if type_id not in (0, -1) or data.dtype != np.float32 or cols % 8 or \
                    bias is not None and bias.dtype != np.float32:
                return None
    if cpu_matmul.NO_BLAS:
        from .cpu_pool_kernels import PoolFloatKernels, PoolXattnPlan
        if isinstance(kern, PoolFloatKernels):  # the page's kernel pool
            return PoolXattnPlan(kern, spec)
    return XattnPlan(kern, spec)
