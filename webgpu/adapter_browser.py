"""The browser GPU adapter: WebGPU through `navigator.gpu` from Pyodide (same interface as
adapter_native.NativeAdapter; read that docstring for the contract).

WebGPU in the page is promise-based. Synchronous calls (creating the device at first use,
`.numpy()`) suspend Python on the promise through JSPI (`pyodide.ffi.run_sync`), which works
in Chromium when the Python code runs under `runPythonAsync`. Without JSPI, create the
backend first with `await ember.webgpu.init_async()` and read results with
`await backend.to_numpy_async(x)` (Tensor.numpy_async).

Copies never convert element by element: uploads hand `queue.writeBuffer` a Uint8Array view of
the wasm heap at the array's address (rebuilt right before each use, since memory growth
detaches old views); readbacks copy the mapped range into the numpy array with `assign_to`.
"""
from __future__ import annotations

import numpy as np

from .adapter_choice import software_reason
from .adapter_native import _BATCH, AdapterError, BindGroups

# WebGPU limit names as the JS API spells them -> the names the backend reads
_LIMITS = {"maxBufferSize": "max-buffer-size", "maxStorageBufferBindingSize": "max-storage-buffer-binding-size",
           "maxStorageBuffersPerShaderStage": "max-storage-buffers-per-shader-stage",
           "maxComputeWorkgroupStorageSize": "max-compute-workgroup-storage-size",
           "maxComputeInvocationsPerWorkgroup": "max-compute-invocations-per-workgroup",
           "maxComputeWorkgroupsPerDimension": "max-compute-workgroups-per-dimension"}


def _js():
    import js
    from pyodide.ffi import run_sync, to_js
    return js, run_sync, to_js


def _obj(d):
    js, _, to_js = _js()
    return to_js(d, dict_converter=js.Object.fromEntries)


def _sync(promise, what):
    from pyodide.ffi import can_run_sync, run_sync
    if not can_run_sync():
        raise AdapterError(f"ember: webgpu {what} needs to wait for the GPU, and this page cannot block "
                           f"(no JSPI, or not inside runPythonAsync): use `await ember.webgpu.init_async()` "
                           f"before first use and `await tensor.numpy_async()` to read results")
    return run_sync(promise)


class BrowserAdapter:
    kind = "browser"

    def __init__(self, power_preference="high-performance", _device=None):
        js, _, _ = _js()
        if _device is None:
            adapter, device = _sync(_request(power_preference), "device creation")
        else:
            adapter, device = _device
        self._finish(js, adapter, device)

    @classmethod
    async def create(cls, power_preference="high-performance"):
        return cls(power_preference, _device=await _request(power_preference))

    def _finish(self, js, adapter, device):
        self.adapter, self.device, self._js = adapter, device, js
        self.features = {f for f in ("shader-f16",) if device.features.has(f)}
        self.limits = {ours: int(getattr(device.limits, theirs)) for theirs, ours in _LIMITS.items()}
        info = getattr(adapter, "info", None)
        self.info = (f"{info.vendor} {info.architecture} {info.description}".strip() if info else "browser") + " (navigator.gpu)"
        self.details = {k: str(getattr(info, k, "") or "") for k in ("vendor", "architecture", "device", "description")}
        self.details["backend_type"] = "navigator.gpu"
        # GPUAdapterInfo.isFallbackAdapter (Chrome 136+), earlier GPUAdapter.isFallbackAdapter
        self.details["fallback"] = bool(getattr(info, "isFallbackAdapter", False) or getattr(adapter, "isFallbackAdapter", False))
        self.software = software_reason(self.details)
        self._queue = device.queue
        self._usage = js.GPUBufferUsage.STORAGE | js.GPUBufferUsage.COPY_SRC | js.GPUBufferUsage.COPY_DST
        self._enc = self._pass = None  # the open command encoder and its compute pass
        self._groups = BindGroups()
        self._pending = 0
        import pyodide_js
        from pyodide.ffi import create_proxy
        self._module = pyodide_js._module
        self.lost = None
        device.lost.then(create_proxy(self._on_lost))

    def _on_lost(self, info):
        self.lost = f"{info.reason}: {info.message}"

    def _check(self, what):
        if self.lost is not None:
            raise AdapterError(f"ember: webgpu {what} failed: the page's GPU device was lost ({self.lost}); "
                               f"tensors on 'cpu' keep working")

    # -- resources ------------------------------------------------------------------------------
    def buffer(self, nbytes):
        self._check("allocation")
        return self.device.createBuffer(_obj({"size": nbytes, "usage": self._usage}))

    def meta(self, words):
        # parameter buffers are fresh and never rewritten, so writeBuffer may run before pending work
        h = self.device.createBuffer(_obj({"size": max(words.nbytes, 16), "usage": self._usage}))
        self._queue.writeBuffer(h, 0, self._heap_view(np.ascontiguousarray(words)))
        return h

    def pipeline(self, wgsl):
        module = self.device.createShaderModule(_obj({"code": wgsl}))
        from pyodide.ffi import can_run_sync, run_sync
        if can_run_sync():  # the page reports shader errors asynchronously; surface them here
            errors = [f"line {m.lineNum}: {m.message}" for m in run_sync(module.getCompilationInfo()).messages
                      if m.type == "error"]
            if errors:
                raise AdapterError("ember: WGSL compile error: " + "; ".join(errors))
        return self.device.createComputePipeline(_obj({"layout": "auto",
                                                       "compute": {"module": module, "entryPoint": "main"}}))

    # -- transfers ------------------------------------------------------------------------------
    def _heap_view(self, arr):
        # a fresh view each time: wasm memory growth detaches earlier ArrayBuffer views
        return self._js.Uint8Array.new(self._module.HEAPU8.buffer, arr.ctypes.data, arr.nbytes)

    def write(self, handle, arr):
        self.flush()
        arr = np.ascontiguousarray(arr)
        self._queue.writeBuffer(handle, 0, self._heap_view(arr))

    def _stage(self, handle, nbytes):
        js = self._js
        self.flush()
        staging = self.device.createBuffer(_obj({"size": nbytes,
                                                 "usage": js.GPUBufferUsage.MAP_READ | js.GPUBufferUsage.COPY_DST}))
        enc = self.device.createCommandEncoder()
        enc.copyBufferToBuffer(handle, 0, staging, 0, nbytes)
        self._queue.submit(_obj([enc.finish()]))
        return staging

    def _take(self, staging, nbytes):
        out = np.empty(nbytes, np.uint8)
        self._js.Uint8Array.new(staging.getMappedRange()).assign_to(out)
        staging.unmap()
        staging.destroy()
        return out

    def read(self, handle, nbytes):
        self._check("readback")
        staging = self._stage(handle, nbytes)
        _sync(staging.mapAsync(self._js.GPUMapMode.READ), "readback")
        return self._take(staging, nbytes)

    async def read_async(self, handle, nbytes):
        self._check("readback")
        staging = self._stage(handle, nbytes)
        await staging.mapAsync(self._js.GPUMapMode.READ)
        return self._take(staging, nbytes)

    # -- work -----------------------------------------------------------------------------------
    def release(self, handle):
        self._groups.clear()  # (a cached bind group must not name a destroyed buffer)
        handle.destroy()  # free GPU memory now rather than at the proxy's garbage collection

    def dispatch(self, pipeline, handles, groups):
        # one compute pass holds every dispatch until the submit, and a bind group is made once for a pipeline and
        # its buffers, as adapter_native.py does: each call into the page's WebGPU crosses from Python to JS
        self._check("dispatch")
        if self._pass is None:
            self._enc = self.device.createCommandEncoder()
            self._pass = self._enc.beginComputePass()
        bg = self._groups.get(pipeline, handles, lambda: self.device.createBindGroup(_obj({
            "layout": pipeline.getBindGroupLayout(0),
            "entries": [{"binding": i, "resource": {"buffer": h}} for i, h in enumerate(handles)]})))
        p = self._pass
        p.setPipeline(pipeline)
        p.setBindGroup(0, bg)
        p.dispatchWorkgroups(*groups)
        self._pending += 1
        if self._pending >= _BATCH:
            self.flush()

    def wait(self):
        self.flush()
        _sync(self._queue.onSubmittedWorkDone(), "synchronize")

    def flush(self):
        if self._enc is not None:
            enc, p, self._enc, self._pass, self._pending = self._enc, self._pass, None, None, 0
            p.end()
            self._queue.submit(_obj([enc.finish()]))


async def _request(power_preference):
    js, _, _ = _js()
    gpu = getattr(js.navigator, "gpu", None)
    if gpu is None:
        raise AdapterError("ember: no WebGPU in this page (navigator.gpu is missing); tried navigator.gpu. "
                           "Chromium needs a secure context (https or localhost) and, headless, --enable-unsafe-webgpu")
    adapter = await gpu.requestAdapter(_obj({"powerPreference": power_preference}))
    if adapter is None:
        raise AdapterError(f"ember: navigator.gpu.requestAdapter(powerPreference={power_preference!r}) "
                           f"returned no adapter; tried navigator.gpu")
    feats = [f for f in ("shader-f16",) if adapter.features.has(f)]
    lim = adapter.limits
    req = {k: int(getattr(lim, k)) for k in _LIMITS}
    device = await adapter.requestDevice(_obj({"requiredFeatures": feats, "requiredLimits": req}))
    return adapter, device
