"""ember.nn.parallel: tensor parallelism for Linear layers across GPUs (Megatron-style, as Candle's multi-GPU Llama).

A ShardGroup is an ordered list of devices, one shard per device, driven from one process:

    group = ShardGroup(["cuda:0", "cuda:1"])
    up = ColumnParallelLinear(mlp.gate_up_proj, group, segments=(h, h), gather_output=False)
    down = RowParallelLinear(mlp.down_proj, group, input_is_parallel=True)
    g, u = [p.chunk(2, -1) for p in up(x)] ...           # elementwise work stays on each shard
    y = down([F.silu(g) * u for g, u in parts])           # one all-reduce per block

- Column-parallel: W (out, in) is split by output rows; shard r computes its slice of the output
  from the full input. `segments` splits a fused weight (q|k|v, gate|up) per segment so every
  shard gets matching rows of each. The output stays sharded (`gather_output=False`, feeding a
  row-parallel layer) or is concatenated on the first device.
- Row-parallel: W is split by input columns; shard r multiplies its slice of the input, the partial
  products are summed by an all-reduce, and the bias is added once.

The all-reduce uses NCCL through cupy.cuda.nccl when the group is several distinct CUDA GPUs and
NCCL loads; otherwise it sums through the first device (any backend, e.g. `ShardGroup(["cpu"] * 4)`
simulates four shards on the cpu backend, which is how the sharding math is tested without GPUs).
A group of one device is a no-op: the layers reduce to a plain Linear. Inference only: shards are
plain tensors, outside autograd and state_dict.
"""
from __future__ import annotations

from ..device import device as _device
from . import functional as F
from .module import Module

# ncclDataType_t codes (nccl.h) for ember dtypes; ncclSum = 0
_NCCL_DTYPE = {"uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
_NCCL_SUM = 0


class ShardGroup:
    def __init__(self, devices):
        self.devices = [_device(d) for d in devices]
        if not self.devices:
            raise ValueError("ember: ShardGroup needs at least one device")
        self.world_size = len(self.devices)
        self._comms = None  # NCCL communicators, one per GPU, made on first all-reduce

    def __repr__(self):
        return f"ShardGroup({[str(d) for d in self.devices]})"

    def split(self, n: int, what: str) -> int:
        if n % self.world_size:
            raise ValueError(f"ember: {what} of size {n} does not split evenly over {self.world_size} devices")
        return n // self.world_size

    # -- collectives ---------------------------------------------------------------------------------
    def broadcast(self, x):
        """One copy of x per device."""
        return [x.to(d) for d in self.devices]

    def scatter(self, x, dim: int = -1):
        """x split into world_size equal chunks along dim, chunk r on device r."""
        n = self.split(x.shape[dim], f"dim {dim} of input {tuple(x.shape)}")
        return [c.to(d) for c, d in zip(x.split(n, dim), self.devices)]

    def gather(self, parts, dim: int = -1):
        """The shards concatenated along dim, on the first device."""
        from ..ops_movement import cat
        return parts[0] if len(parts) == 1 else cat([p.to(self.devices[0]) for p in parts], dim)

    def all_reduce(self, parts):
        """parts[r] on device r, equal shapes -> their sum, one copy on every device."""
        if len(parts) != self.world_size:
            raise ValueError(f"ember: all_reduce got {len(parts)} parts for {self.world_size} devices")
        if self.world_size == 1:
            return list(parts)
        if self._nccl_ready():
            return self._nccl_all_reduce(parts)
        total = parts[0]
        for p in parts[1:]:
            total = total + p.to(self.devices[0])
        return [total.to(d) for d in self.devices]

    def _nccl_ready(self) -> bool:
        if self._comms is not None:
            return True
        if any(d.type != "cuda" for d in self.devices) or len({d.index for d in self.devices}) != self.world_size:
            return False
        try:
            from cupy.cuda import nccl
            if not getattr(nccl, "available", False):
                return False
            self._comms = nccl.NcclCommunicator.initAll([d.index for d in self.devices])
        except Exception:  # no NCCL library: the summing fallback is still correct, only slower
            return False
        return True

    def _nccl_all_reduce(self, parts):
        from cupy.cuda import nccl
        code = _NCCL_DTYPE.get(parts[0].dtype.name)
        if code is None:
            raise TypeError(f"ember: all_reduce over NCCL does not support {parts[0].dtype.name}")
        outs = []
        nccl.groupStart()  # one process drives every GPU: the per-device calls form one group
        try:
            for comm, p, dev in zip(self._comms, parts, self.devices):
                be = dev.backend
                with be._device, be._stream:
                    x = be.contiguous(p._data)
                    y = be.xp.empty_like(x)
                    comm.allReduce(x.data.ptr, y.data.ptr, x.size, code, _NCCL_SUM, be._stream.ptr)
                outs.append(p._new(y))  # (p lives on dev)
        finally:
            nccl.groupEnd()
        return outs


class ColumnParallelLinear(Module):
    def __init__(self, linear, group: ShardGroup, segments=None, gather_output: bool = True):
        super().__init__()
        out_f = linear.weight.shape[0]
        segments = (out_f,) if segments is None else tuple(int(s) for s in segments)
        if sum(segments) != out_f:
            raise ValueError(f"ember: segments {segments} do not add up to out_features {out_f}")
        n = [group.split(s, f"output segment of {type(linear).__name__}") for s in segments]
        self.group, self.gather_output = group, gather_output
        self.in_features, self.out_features = linear.weight.shape[1], out_f
        w, b = linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
        self.shards = []  # [(weight (out/world, in), bias (out/world,) | None)], shard r on device r
        for r, d in enumerate(group.devices):
            ws = _cat_segments(w, segments, n, r)
            bs = None if b is None else _cat_segments(b, segments, n, r)
            self.shards.append((ws.contiguous().to(d), None if bs is None else bs.contiguous().to(d)))

    def forward(self, x):
        """x: one tensor (copied to every device) or per-device copies -> (..., out) or its shards."""
        xs = x if isinstance(x, (list, tuple)) else self.group.broadcast(x)
        ys = [F.linear(xi, w, b) for xi, (w, b) in zip(xs, self.shards)]  # (..., out/world) each
        return self.group.gather(ys, -1) if self.gather_output else ys


def _cat_segments(w, segments, n, r):
    """Shard r's rows of each segment of a fused weight (q|k|v) concatenated: (sum(n), ...)."""
    from ..ops_movement import cat
    parts, start = [], 0
    for size, k in zip(segments, n):
        parts.append(w[start + r * k:start + (r + 1) * k])
        start += size
    return parts[0] if len(parts) == 1 else cat(parts, 0)


class RowParallelLinear(Module):
    def __init__(self, linear, group: ShardGroup, input_is_parallel: bool = False):
        super().__init__()
        out_f, in_f = linear.weight.shape
        k = group.split(in_f, f"in_features of {type(linear).__name__}")
        self.group, self.input_is_parallel = group, input_is_parallel
        self.in_features, self.out_features = in_f, out_f
        w = linear.weight.detach()
        self.shards = [w[:, r * k:(r + 1) * k].contiguous().to(d) for r, d in enumerate(group.devices)]  # (out, in/world)
        self.bias = None if linear.bias is None else linear.bias.detach().to(group.devices[0])

    def forward(self, x):
        """x: (..., in) on any device, or its shards (..., in/world) per device -> (..., out) on device 0."""
        xs = x if self.input_is_parallel else self.group.scatter(x, -1)
        parts = [F.linear(xi, w) for xi, w in zip(xs, self.shards)]  # partial sums (..., out)
        y = self.group.all_reduce(parts)[0]
        return y if self.bias is None else y + self.bias
