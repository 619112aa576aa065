"""The page's ONNX API, Python side: `ember.loadModel("onnx", url|file)` then `ember.run(feeds)` in
web/ember.js land here through web/worker.js (its "onnx-load" / "onnx-run" messages).

Tensors cross the worker boundary as {"type": onnxruntime-web's type name, "dims": [...], "bytes":
little-endian element bytes}: the page wraps them in the typed array of that type, so a feed or a
result is one copy each way. The module runs unchanged in CPython (tests/test_onnx_web_api.py).
"""
from __future__ import annotations

import numpy as np

from ember.onnx.tensor_data import native
from ember.wasm.worker_api import WorkerError

# onnxruntime-web's tensor type names <-> numpy (float16 travels as its bits, as ort-web's Uint16Array)
TYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int8": np.int8, "uint8": np.uint8,
         "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
         "uint64": np.uint64, "bool": np.bool_}
NAME_OF = {np.dtype(v): k for k, v in TYPES.items()}
_STATE: dict = {}  # "session", "device", "source"


def load(path: str, device: str = "cpu") -> dict:
    """Load the ONNX file at `path` (Pyodide's file system); -> {"inputs", "outputs", "device", "opsets"}.
    Unsupported operators are a "bad_model" error that lists them, before anything runs."""
    from ember.onnx import InferenceSession
    from ember.onnx.wire import OnnxFormatError
    _STATE.clear()
    try:
        sess = InferenceSession(path, device=device)
    except MemoryError:
        raise WorkerError("ember: the ONNX model does not fit in this browser's memory", "out_of_memory") from None
    except (OnnxFormatError, ValueError, OSError) as e:
        raise WorkerError(str(e) if str(e).startswith("ember") else f"ember: {e}", "bad_model") from None
    _STATE.update(session=sess, device=device)
    return {"device": device, "inputs": [_arg(a) for a in sess.get_inputs()],
            "outputs": [_arg(a) for a in sess.get_outputs()], "opsets": dict(sess.opsets)}


def _arg(a) -> dict:
    return {"name": a.name, "type": a.type, "shape": a.shape}


def _feed(name: str, t) -> np.ndarray:
    if not isinstance(t, dict) or "bytes" not in t:
        raise WorkerError(f"ember: feed {name!r} must be {{type, dims, bytes}}", "bad_request")
    kind = t.get("type", "float32")
    if kind not in TYPES:
        raise WorkerError(f"ember: feed {name!r}: unknown type {kind!r}; expected one of {sorted(TYPES)}",
                          "bad_request")
    dt = np.dtype(TYPES[kind]).newbyteorder("<")
    raw = bytes(t["bytes"])
    dims = [int(d) for d in t.get("dims") or [len(raw) // dt.itemsize]]
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if any(d < 0 for d in dims) or count * dt.itemsize != len(raw):
        raise WorkerError(f"ember: feed {name!r}: dims {dims} of {kind} need {count * dt.itemsize} bytes, "
                          f"got {len(raw)}", "bad_request")
    return native(np.frombuffer(raw, dt), np.dtype(TYPES[kind])).reshape(dims)


def _result(a: np.ndarray) -> dict:
    a = np.asarray(a)
    if a.dtype == object:  # ember.onnx's string tensors: typed arrays cannot carry them
        raise WorkerError("ember: the model returns a string tensor; the page's ONNX API carries numeric "
                          "typed arrays only (ember.onnx in Python returns strings)", "bad_model")
    if a.dtype not in NAME_OF:  # float8/int4 come back wide already; anything else as float32
        a = a.astype(np.float32)
    return {"type": NAME_OF[a.dtype], "dims": list(a.shape), "bytes": np.ascontiguousarray(a).astype(
        a.dtype.newbyteorder("<"), copy=False).tobytes()}


def run(feeds: dict, output_names=None) -> dict:
    """{name: {type, dims, bytes}} -> {"outputs": {name: {type, dims, bytes}}, "ms"}."""
    import time
    sess = _STATE.get("session")
    if sess is None:
        raise WorkerError("ember: no ONNX model loaded yet; call loadModel('onnx', ...) first", "not_loaded")
    arrays = {k: _feed(k, v) for k, v in dict(feeds).items()}
    known = {a.name for a in sess.get_inputs()}
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise WorkerError(f"ember: unknown inputs {unknown}; the model takes {sorted(known)}", "bad_request")
    t0 = time.perf_counter()
    try:
        outs = sess.run(output_names, arrays)
    except ValueError as e:
        raise WorkerError(str(e), "bad_request") from None
    names = list(output_names) if output_names else [o.name for o in sess.get_outputs()]
    return {"outputs": {n: _result(v) for n, v in zip(names, outs)},
            "ms": round((time.perf_counter() - t0) * 1000, 1)}


async def handle(op: str, args: dict) -> dict:
    """worker.js's entry for the ONNX messages -> {"ok": ...} or {"error": code, "message"} (never raises)."""
    from ember.wasm.worker_api import _from_js
    try:
        args = {k: _from_js(v) for k, v in dict(args).items()}
        if op == "load":
            return {"ok": load(args["path"], args.get("device", "cpu"))}
        if op == "run":
            feeds = {k: {kk: (bytes(vv) if isinstance(vv, memoryview) else vv) for kk, vv in dict(v).items()}
                     for k, v in dict(args["feeds"]).items()}
            return {"ok": run(feeds, args.get("outputs"))}
        raise WorkerError(f"ember: unknown ONNX request {op!r}", "bad_request")
    except WorkerError as e:
        return {"error": e.code, "message": str(e)}
    except MemoryError:
        return {"error": "out_of_memory", "message": "ember: out of memory in the browser running the ONNX model"}
    except Exception as e:  # noqa: BLE001 - reported to the page with its type, the worker stays alive
        msg = str(e) if str(e).startswith("ember") else f"ember: {type(e).__name__}: {e}"
        return {"error": "internal", "message": msg}
