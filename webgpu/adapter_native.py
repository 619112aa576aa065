"""The native GPU adapter: WebGPU through the `wgpu` package (wgpu-native; Vulkan/Metal/D3D12).

An adapter is the whole surface the backend touches, so the backend runs unchanged over
wgpu-py here and over `navigator.gpu` in a Pyodide page (adapter_browser.py). The interface:

  info, limits (dict, WebGPU names), features (set of str)
  details (vendor, architecture, device, description, ...), software (why it is a software renderer, or None)
  buffer(nbytes) -> handle              storage buffer usable as copy source/destination
  meta(words: np.uint32 array) -> handle small read-only parameter buffer (cached by the caller)
  release(handle)                       a buffer the pool no longer keeps
  write(handle, np_array)               upload a C-contiguous array at offset 0
  read(handle, nbytes) -> np.uint8 array   synchronous readback (flushes pending work)
  read_async(handle, nbytes)             awaitable readback
  pipeline(wgsl) -> handle              compile a compute pipeline (entry point `main`)
  dispatch(pipeline, handles, groups)    record one dispatch; handles bind to bindings 0..n-1
  flush()                               submit the recorded dispatches
  wait()                                flush and block until the GPU is idle

Dispatches are recorded into one command encoder and submitted in batches: per-op submits
are the dominant overhead for small ops. A write must not overtake recorded work that still
reads a recycled buffer, so `write` flushes first.
"""
from __future__ import annotations

import numpy as np

from .adapter_choice import software_reason
from ember.device import DeviceError

_BATCH = 128  # dispatches per submit: bounds the encoder's size without per-op submits
_GROUPS_MAX = 1024  # bind groups kept for reuse


class BindGroups:
    """Bind groups made once per pipeline and buffers (a decoded token repeats the last one's), for both adapters.
    An entry holds the pipeline and buffers it names, so no id in a key is reused while it is cached; clear() when
    a buffer is released (no cached group may name a freed or destroyed one)."""

    def __init__(self):
        self._cache = {}  # (id(pipeline), *ids of buffers) -> (bind group, pipeline, buffers)

    def get(self, pipeline, handles, make):
        """The bind group of pipeline over handles, make() the first time."""
        key = (id(pipeline), *map(id, handles))
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= _GROUPS_MAX:
                self._cache.clear()
            hit = self._cache[key] = (make(), pipeline, tuple(handles))
        return hit[0]

    def clear(self):
        self._cache.clear()

    def __len__(self):
        return len(self._cache)


class AdapterError(DeviceError):
    """No usable GPU adapter, or the device was lost."""


class NativeAdapter:
    kind = "native"

    def __init__(self, power_preference="high-performance", backend=None):
        try:
            import wgpu
        except ImportError as e:
            raise AdapterError(f"ember: webgpu needs the `wgpu` package (pip install wgpu): {e}") from e
        self._wgpu = wgpu
        tried = []
        adapter = None
        try:
            if backend is None:
                adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
            else:  # an explicit backend ("vulkan", "metal", "d3d12", "gl"): pick by its name, hardware first
                found = []
                for a in wgpu.gpu.enumerate_adapters_sync():
                    tried.append(f"{a.info['device']} ({a.info['backend_type']})")
                    if a.info["backend_type"].lower() == backend.lower():
                        found.append(a)
                found.sort(key=lambda a: software_reason(dict(a.info)) is not None)  # (stable: driver order)
                adapter = found[0] if found else None
        except Exception as e:  # wgpu raises plain RuntimeErrors when no driver is present
            tried.append(f"request_adapter({power_preference!r}) failed: {e}")
        if adapter is None:
            raise AdapterError("ember: no WebGPU adapter found; tried: "
                               + ("; ".join(tried) or f"wgpu request_adapter(power_preference={power_preference!r})")
                               + ". On Linux install a Vulkan driver (Debian: mesa-vulkan-drivers for lavapipe).")
        self.adapter = adapter
        self.features = set(adapter.features)
        want = [f for f in ("shader-f16",) if f in self.features]
        lim = adapter.limits
        keys = ("max-buffer-size", "max-storage-buffer-binding-size", "max-storage-buffers-per-shader-stage",
                "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup")
        self.device = adapter.request_device_sync(required_features=want,
                                                  required_limits={k: lim[k] for k in keys})
        self.limits = dict(self.device.limits)
        info = adapter.info
        self.info = f"{info['device']} ({info['backend_type']}, {info['adapter_type']})"
        self.details = {k: info.get(k, "") for k in ("vendor", "architecture", "device", "description",
                                                     "backend_type", "adapter_type")}
        self.software = software_reason(self.details)  # None for hardware; `auto` skips software adapters
        self._queue = self.device.queue
        self._enc = self._pass = None  # the open command encoder and its compute pass
        self._groups = BindGroups()
        self._pending = 0
        self._usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self._probe = self.buffer(16)

    def _lost(self, what, e):
        return AdapterError(f"ember: webgpu {what} failed on {self.info} (device lost?): {e}; "
                            f"tensors on 'cpu' keep working, move data there with .to('cpu') before this point")

    # -- resources ------------------------------------------------------------------------------
    def buffer(self, nbytes):
        try:
            return self.device.create_buffer(size=nbytes, usage=self._usage)
        except Exception as e:
            raise self._lost(f"allocating {nbytes} bytes", e) from e

    def meta(self, words):
        try:
            return self.device.create_buffer_with_data(data=words, usage=self._wgpu.BufferUsage.STORAGE)
        except Exception as e:
            raise self._lost("allocating a parameter buffer", e) from e

    def release(self, handle):
        # wgpu-py frees the buffer when its last reference (ours, a cached bind group's or a pending command's) goes
        self._groups.clear()

    def pipeline(self, wgsl):
        module = self.device.create_shader_module(code=wgsl)
        return self.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})

    # -- transfers ------------------------------------------------------------------------------
    def write(self, handle, arr):
        self.flush()
        try:
            self._queue.write_buffer(handle, 0, arr)
        except Exception as e:
            raise self._lost("upload", e) from e

    def read(self, handle, nbytes):
        self.flush()
        try:
            data = self._queue.read_buffer(handle, 0, nbytes)
        except Exception as e:
            raise self._lost("readback", e) from e
        return np.frombuffer(data, dtype=np.uint8)

    async def read_async(self, handle, nbytes):
        return self.read(handle, nbytes)

    # -- work -----------------------------------------------------------------------------------
    def dispatch(self, pipeline, handles, groups):
        try:
            self._record(pipeline, handles, groups)
        except Exception as e:
            self._enc, self._pass, self._pending = None, None, 0
            raise self._lost("dispatch", e) from e

    def _record(self, pipeline, handles, groups):
        # one compute pass holds every dispatch until the submit (WebGPU orders a pass's dispatches, each its own
        # usage scope), and a bind group is made once for a pipeline and its buffers (a decoded token repeats
        # the last one's): fewer calls into wgpu a dispatch
        if self._pass is None:
            self._enc = self.device.create_command_encoder()
            self._pass = self._enc.begin_compute_pass()
        bg = self._groups.get(pipeline, handles, lambda: self.device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[{"binding": i, "resource": {"buffer": h}} for i, h in enumerate(handles)]))
        p = self._pass
        p.set_pipeline(pipeline)
        p.set_bind_group(0, bg)
        p.dispatch_workgroups(*groups)
        self._pending += 1
        if self._pending >= _BATCH:
            self.flush()

    def wait(self):
        """Submit pending work and block until the GPU has finished it."""
        self.flush()
        # a tiny readback waits for everything queued before it (wgpu-py 0.32's
        # on_submitted_work_done_sync fails with a cffi signature error)
        self.read(self._probe, 4)

    def flush(self):
        if self._enc is not None:
            enc, p, self._enc, self._pass, self._pending = self._enc, self._pass, None, None, 0
            try:
                p.end()
                self._queue.submit([enc.finish()])
            except Exception as e:
                raise self._lost("submit", e) from e
