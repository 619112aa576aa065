"""The Python side of the web app's worker: `handle(op, args)` answers web/worker.js's three requests,
"device" (pick WebGPU or the CPU), "load" and "run", for every tool in ember.wasm.tools alike, with plain
dicts whose fields are the CLI's `--json`.

worker.js fetches a model's files, writes them under /models/<tool>/<key>/, then calls handle("load", {tool,
folder, device}) and handle("run", {tool, input, opts, on_partial, on_progress}) through
`pyodide.runPythonAsync`, so that WebGPU reads can suspend via JSPI. A tool's run awaits
tools.checkpoint() between steps (tokens, segments): that lets the worker's event loop deliver a cancel
message, which sets the flag checkpoint() reads. The module runs unchanged in CPython (tests/test_web_worker_api.py
drives it there against the CLI's own functions).
"""
from __future__ import annotations

import asyncio
import contextlib

from ember.backends.cpu_pool import PoolError

from . import tools
from .tools import WorkerError, cancel  # noqa: F401  (cancel: worker.js calls worker_api.cancel())


# ---------------------------------------------------------------------------- device

async def pick_device(name: str, probe: bool = False) -> dict:
    """Make `name` ("auto", "webgpu" or "cpu") usable; -> {"device", "reason", "adapter", "kernels", "auto",
    "threads", "threads_reason"}. A missing WebGPU adapter is not an error: the answer says "cpu" and why, and the
    page shows it. "auto" also takes the CPU when the only adapter is a software renderer (SwiftShader, llvmpipe:
    slower than the CPU backend); "webgpu" uses any adapter that works. "kernels" is the CPU's matmul path:
    "wasm-simd128+relaxed", "wasm-simd128 (why not relaxed)", or "einsum (why the SIMD kernels are not used)";
    "threads" the threads its kernels run on (the page's kernel pool), and "threads_reason" why 1 when it is.
    "auto": {"device", "reason"}, what "auto" picks here (the page notes a remembered manual choice that differs),
    or None where that is not known: for "cpu" the adapter is asked only with `probe` (never natively)."""
    from ember.backends.cpu_matmul import matmul_path, pool_threads
    picked = await _pick_device(name)
    if name == "auto":
        auto = {"device": picked["device"], "reason": picked["reason"]}
    elif name == "webgpu" and picked["device"] == "webgpu":
        sw = _webgpu_software()
        auto = {"device": "cpu", "reason": f"{sw}, slower than ember's CPU backend"} if sw else {"device": "webgpu", "reason": ""}
    elif name == "webgpu":
        auto = {"device": "cpu", "reason": picked["reason"]}
    else:
        auto = await _auto_from_adapter() if probe else None
    threads, why = pool_threads()
    return {**picked, "kernels": matmul_path(), "auto": auto, "threads": threads, "threads_reason": why}


def _webgpu_software() -> str | None:
    import ember
    return ember.device("webgpu").backend.adapter.software


async def _auto_from_adapter() -> dict | None:
    """What "auto" would pick, from the browser's adapter alone (no GPU device is created); None natively."""
    import sys
    if sys.platform != "emscripten":
        return None
    import js
    from pyodide.ffi import can_run_sync

    from ember.webgpu.adapter_choice import software_reason
    if not getattr(js.navigator, "gpu", None):
        return {"device": "cpu", "reason": "this browser has no WebGPU (navigator.gpu is missing)"}
    if not can_run_sync():
        return {"device": "cpu", "reason": "this browser lacks JavaScript Promise Integration (JSPI)"}
    adapter = await js.navigator.gpu.requestAdapter()
    if adapter is None:
        return {"device": "cpu", "reason": "the browser offers no WebGPU adapter"}
    info = getattr(adapter, "info", None)
    details = {k: str(getattr(info, k, "") or "") for k in ("vendor", "architecture", "device", "description")}
    details["fallback"] = bool(getattr(info, "isFallbackAdapter", False) or getattr(adapter, "isFallbackAdapter", False))
    sw = software_reason(details)
    return {"device": "cpu", "reason": f"{sw}, slower than ember's CPU backend"} if sw else {"device": "webgpu", "reason": ""}


async def _pick_device(name: str) -> dict:
    import ember
    if name == "cpu":
        return {"device": "cpu", "reason": "", "adapter": ""}
    if name not in ("webgpu", "auto"):
        raise WorkerError(f"ember: unknown device {name!r}; expected 'auto', 'webgpu' or 'cpu'", "bad_request")
    import sys
    if sys.platform == "emscripten":
        from pyodide.ffi import can_run_sync
        if not can_run_sync():  # the models read GPU results synchronously (sampling, NMS on the host)
            return {"device": "cpu", "adapter": "",
                    "reason": "this browser lacks JavaScript Promise Integration (JSPI), which "
                              "ember needs to read WebGPU results synchronously"}
    try:
        import ember.webgpu as wg
        await wg.init_async()
        be = ember.device("webgpu").backend
        adapter = be.description
        if name == "auto" and be.adapter.software is not None:
            return {"device": "cpu", "adapter": adapter,
                    "reason": f"{be.adapter.software}, slower than ember's CPU backend; choose WebGPU to force it"}
        x = ember.arange(4, dtype=ember.float32, device="webgpu")
        if float((x * 2).sum().item()) != 12.0:  # a device that computes wrong is worse than none
            raise RuntimeError("a test reduction returned a wrong value")
        return {"device": "webgpu", "reason": "", "adapter": adapter}
    except Exception as e:  # noqa: BLE001 - any failure means "no usable WebGPU here"
        return {"device": "cpu", "reason": str(e).replace("ember: ", "")[:300], "adapter": ""}


# ---------------------------------------------------------------------------- load and run

def _text(e: Exception) -> str:
    return str(e) if str(e).startswith("ember") else f"ember: {type(e).__name__}: {e}"


def load(tool: str, folder: str, device: str = "cpu") -> dict:
    """Load `tool`'s model from the files in `folder`; -> {"tool", "device", "parameters", "bytes", ...} with
    what the tool adds (tools/<tool>.py load())."""
    module = tools.get(tool)
    from ember.backends.cpu_pool import weights_in_pool
    try:
        # for the CPU, quantized weights go from the files straight into the kernel pool's memory (where the page
        # has a pool): held once, where its threads read them
        with weights_in_pool() if device == "cpu" else contextlib.nullcontext():
            info = module.load(folder, device)
    except MemoryError:
        raise WorkerError(f"ember: the {tool} model does not fit in this browser's memory", "out_of_memory") from None
    except (ValueError, KeyError, OSError, TypeError) as e:
        # the worker's folder means nothing to the person who chose the files: name them alone
        text = _text(e).replace(folder.rstrip("/") + "/", "").replace(folder, "the model's folder")
        raise WorkerError(text, getattr(e, "code", "bad_model")) from None
    return {"tool": tool, "device": device, **info}


async def run(tool: str, input, opts: dict | None = None, on_partial=None, on_progress=None) -> dict:
    """One request on `tool`'s loaded model (tools/<tool>.py run()); a cancel sent before it started is forgotten."""
    module = tools.get(tool)
    tools.reset_cancel()
    return await module.run(input, dict(opts or {}), on_partial, on_progress)


# ---------------------------------------------------------------------------- the worker's entry point

async def handle(op: str, args: dict) -> dict:
    """One request from web/worker.js -> {"ok": result} or {"error": code, "message": text}; never raises,
    so the page always gets an answer it can show."""
    try:
        args = {k: _from_js(v) for k, v in dict(args).items()}
        if op == "device":
            return {"ok": await pick_device(args["device"], bool(args.get("probe")))}
        if op == "load":
            return {"ok": load(args["tool"], args["folder"], args.get("device", "cpu"))}
        if op == "run":
            return {"ok": await run(args["tool"], args.get("input"), args.get("opts"), args.get("on_partial"),
                                    args.get("on_progress"))}
        raise WorkerError(f"ember: unknown request {op!r}", "bad_request")
    except WorkerError as e:
        return {"error": e.code, "message": str(e)}
    except PoolError as e:  # a kernel pool worker died mid-run: this run fails, the next ones run on one thread
        return {"error": "pool_lost", "message": str(e)}
    except (asyncio.CancelledError, KeyboardInterrupt):  # KeyboardInterrupt: the page's interrupt buffer
        return {"error": "cancelled", "message": "ember: cancelled"}
    except MemoryError:
        what = args.get("tool", op) if isinstance(args, dict) else op
        return {"error": "out_of_memory", "message": f"ember: out of memory in the browser while running {what}; "
                "try a smaller model or input"}
    except Exception as e:  # noqa: BLE001 - reported to the page with its type, the worker stays alive
        import traceback
        traceback.print_exc()
        return {"error": "internal", "message": _text(e)}


def handle_now(op: str, args):
    """handle(op, args) driven on the caller's stack until it first waits (most requests never do: an ONNX run, one
    image): its answer, or a task of the event loop that finishes it. worker.js calls this rather than scheduling
    handle() as a task: a task's scheduling costs ~0.4 ms a request in Chromium, most of a small model's round trip."""
    coro = handle(op, args)
    try:
        waiting = coro.send(None)
    except StopIteration as done:
        return done.value
    return asyncio.ensure_future(_finish(coro, waiting))


async def _finish(coro, waiting):
    """The rest of coroutine `coro`, which yielded `waiting` (a future it waits on, or None: asyncio.sleep(0)), run
    as a task would run it."""
    try:
        while True:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                with contextlib.suppress(Exception):  # (the coroutine reads the future's outcome itself)
                    await waiting
            try:
                waiting = coro.send(None)
            except StopIteration as done:
                return done.value
    finally:
        coro.close()


def _from_js(v):
    """Arguments from worker.js arrive as JS proxies under Pyodide: typed arrays become bytes (one copy into
    the wasm heap), objects dicts, and callbacks get their Python arguments converted to JS objects."""
    if not hasattr(v, "to_py"):
        return v
    if getattr(v, "typeof", "") == "function":
        from js import Object
        from pyodide.ffi import to_js

        def call(*a):
            v(*(to_js(x, dict_converter=Object.fromEntries) for x in a))
        return call
    if hasattr(v, "to_bytes") and getattr(v, "byteLength", None) is not None:
        return v.to_bytes()
    out = v.to_py()
    if isinstance(out, dict):
        return {k: (bytes(x) if isinstance(x, memoryview) else x) for k, x in out.items()}
    return out
