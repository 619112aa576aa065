"""Kernel descriptors: a WGSL or CUDA kernel's source with its launch rules, as a kernel-registry entry
(ember.kernels) or an ember.custom_op names it. Base layer: the WebGPU backend declares its own fused kernels with
these and runs any of them through its `custom_kernel` primitive; users build them as ember.WGSL / ember.CUDA."""
from __future__ import annotations

from .errors import CustomOpError


class WGSL:
    """A WebGPU compute kernel for one custom op.

    `source` (a string, or a callable returning one, read on first compile) holds `fn main` with
    `@compute @workgroup_size(workgroup_size)` and any helpers. ember prepends the bindings and helpers:
      prm: array<u32>      binding 0: [0] output element count, then `params(...)` (ints as u32 bits,
                           floats as f32 bits: read them with bitcast<f32>(prm[k]))
      out: array<OT>       binding 1, the output, contiguous; store with `out[i] = to_out(v)` (f32 -> OT with
                           the output dtype's rounding)
      in0, in1 ...         bindings 2, 3 ...: the inputs, contiguous, element types T0, T1 ... (read as f32(in0[i]));
                           a None input is bound to a one-element dummy buffer; L0, L1 ... the types to
                           multiply them in (f16 for float16 with the backend's f16 compute, else f32)
      flat_id(wid, nwg, lid), WG (= 256), f_inf(), f_nan(), is_nan()   the shared helpers (webgpu/common.wgsl)
    `params(*inputs, **attrs)` gives the scalars after prm[0]; `grid(out_shape, *inputs, **attrs)` the
    workgroup counts (default: one thread per output element, `workgroup_size` per group, 2-D past 65535
    groups, so `flat_id` indexes it when workgroup_size is 256). Both see each input's `shape` (None for a
    None input). With `views=True` the inputs are bound as they are, strided views of their buffers, and
    `params`/`grid` also see each one's `strides` and `offset` (in elements) to address them; else every
    input is made contiguous first. `writes` numbers the inputs the kernel also writes in place (bound
    read_write, e.g. a KV cache the op appends a row to; pending reads of them run first); such inputs must
    be views of a buffer the caller owns (`views=True`), as the composed form writes them with copy_into.
    """

    backend = "webgpu"

    def __init__(self, source, workgroup_size=256, params=None, grid=None, views=False, writes=()):
        self._source, self.workgroup_size, self.params, self.grid = source, int(workgroup_size), params, grid
        self.views, self.writes = bool(views), tuple(int(i) for i in writes)
        if self.writes and not self.views:
            raise CustomOpError("ember: a WGSL kernel that writes its inputs needs views=True (a contiguous copy "
                                "would take the write)")
        self.op = None  # set by custom_op: names the op in compile and binding errors

    def source(self):
        s = self._source() if callable(self._source) else self._source
        if not isinstance(s, str):
            raise CustomOpError(f"ember: custom op {self.op!r}: WGSL source must be a str, got {type(s).__name__}")
        self._source = s  # read once (the registry's kernels read a packaged file)
        return s


class CUDA:
    """A CUDA kernel for one custom op: `source` holds `extern "C" __global__ void name(...)` with arguments
    (T* out, const T* in0, ..., long long n, then `params(*inputs, **attrs)` as int / float scalars), inputs
    contiguous; compiled by NVRTC (cupy.RawKernel) on first use. `block` threads per block;
    `grid(out_shape, *inputs, **attrs)` blocks (default: one thread per output element)."""

    backend = "cuda"

    def __init__(self, source, name, block=256, params=None, grid=None):
        self._source, self.name, self.block, self.params, self.grid = source, name, int(block), params, grid
        self.op = None

    def source(self):
        if callable(self._source):
            self._source = self._source()  # read once
        return self._source
