"""The ONNX tool: `ember.loadModel("onnx", url | file)` then `ember.run(feeds)` in web/ember.js, as
onnxruntime-web's InferenceSession: any .onnx file (plus its external-data files) run by ember.onnx; and
`ember.runDecoder(ids, opts, onToken)`: greedy generation through a decoder exported with its KV cache as inputs
and outputs (ember.onnx.decoder), one token a step, streamed.

Tensors cross the worker boundary as {"type": onnxruntime-web's type name, "dims": [...], "bytes":
little-endian element bytes}: the page wraps them in the typed array of that type, so a feed or a
result is one copy each way.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

from . import WorkerError, checkpoint, one_file

FILES = [["model.onnx"]]  # a hub folder's model; a nameless Blob takes this name too
BESIDE: dict = {}
PACKAGES = ()
BUNDLES = ""
# onnxruntime-web's tensor type names <-> numpy (float16 travels as its bits, as ort-web's Uint16Array)
TYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int8": np.int8, "uint8": np.uint8,
         "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
         "uint64": np.uint64, "bool": np.bool_}
NAME_OF = {np.dtype(v): k for k, v in TYPES.items()}
_STATE: dict = {}  # "session"


def demos(extra: bool = True) -> list[dict]:
    return []  # the user's own file: no demo


def load(folder: str, device: str) -> dict:
    """The .onnx file in `folder` (external-data files beside it are read now too); -> "inputs", "outputs"
    ([{name, type, shape}]) and "opsets". Unsupported operators are a "bad_model" error that lists them,
    before anything runs."""
    from ember.onnx import InferenceSession
    from ember.onnx.decoder import Decoder
    _STATE.clear()
    t0 = time.perf_counter()
    sess = InferenceSession(one_file(folder, (".onnx",), "no .onnx file among these"), device=device)
    _STATE["session"] = sess
    try:  # a decoder export with KV inputs: runDecoder generates through it
        _STATE["decoder"] = Decoder(sess)
        decoder = bool(_STATE["decoder"].pasts)
    except ValueError:
        decoder = False
    return {"inputs": [_arg(a) for a in sess.get_inputs()], "outputs": [_arg(a) for a in sess.get_outputs()],
            "opsets": dict(sess.opsets), "decoder": decoder, "load_ms": round((time.perf_counter() - t0) * 1000, 1),
            "producer": sess.model.producer_name, "metadata": sess.get_modelmeta()}


def _arg(a) -> dict:
    return {"name": a.name, "type": a.type, "shape": a.shape}


def _feed(name: str, t) -> np.ndarray:
    from ember.onnx.tensor_data import native
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


async def run(feeds, opts: dict, on_partial=None, on_progress=None) -> dict:
    """feeds {name: {type, dims, bytes}}, opts {"outputs": names or None} -> {"outputs": {name: {type, dims,
    bytes}}, "ms"}. opts {"generate": {"ids": [...], "max_new_tokens", "eos_token_id"}} with feeds the decoder's
    other inputs (an encoder's output ...) -> {"tokens", "ms", "tokens_per_s", "stopped"}, each token to
    on_partial(token, n_tokens, tokens_per_s) as it comes."""
    sess = _STATE.get("session")
    if sess is None:
        raise WorkerError("ember: no ONNX model loaded yet; call loadModel('onnx', ...) first", "not_loaded")
    if opts.get("generate") is not None:
        return await _generate(feeds or {}, opts["generate"], on_partial)
    if not isinstance(feeds, dict):
        raise WorkerError("ember: ONNX feeds must be {name: {type, dims, bytes}}", "bad_request")
    arrays = {k: _feed(k, v) for k, v in feeds.items()}
    known = {a.name for a in sess.get_inputs()}
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise WorkerError(f"ember: unknown inputs {unknown}; the model takes {sorted(known)}", "bad_request")
    output_names = opts.get("outputs")
    t0 = time.perf_counter()
    try:
        outs = sess.run(output_names, arrays)
    except ValueError as e:
        raise WorkerError(str(e), "bad_request") from None
    names = list(output_names) if output_names else [o.name for o in sess.get_outputs()]
    return {"outputs": {n: _result(v) for n, v in zip(names, outs)},
            "ms": round((time.perf_counter() - t0) * 1000, 1)}


async def _generate(feeds, spec: dict, on_partial) -> dict:
    dec = _STATE.get("decoder")
    if dec is None or not dec.pasts:
        raise WorkerError("ember: this model is not a decoder with past_key_values inputs (input_ids, "
                          "past_key_values.<i>.key / .value -> logits, present.<i>.key / .value)", "bad_model")
    if not isinstance(feeds, dict):
        raise WorkerError("ember: the decoder's other feeds must be {name: {type, dims, bytes}}", "bad_request")
    try:
        ids = [int(i) for i in spec.get("ids") or []]
        limit = int(spec.get("max_new_tokens", 24))
        eos = spec.get("eos_token_id")
        eos = set() if eos is None else {int(eos)} if isinstance(eos, (int, float)) else {int(e) for e in eos}
    except (TypeError, ValueError):
        raise WorkerError("ember: generate needs ids (token ids), max_new_tokens and eos_token_id as numbers",
                          "bad_request") from None
    if not ids or not 1 <= limit <= 100_000:
        raise WorkerError("ember: generate needs at least one prompt id and 1..100000 new tokens", "bad_request")
    extra = {k: _feed(k, v) for k, v in feeds.items()}
    dec.reset()
    t0 = time.perf_counter()
    out, stopped = [], "length"
    try:
        logits = dec.step(np.asarray([ids], np.int64), extra)
        for _ in range(limit):
            tok = int(np.argmax(logits[0, -1]))
            out.append(tok)
            rate = len(out) / max(time.perf_counter() - t0, 1e-9)
            if on_partial is not None:
                on_partial(tok, len(out), round(rate, 2))
            if tok in eos:
                stopped = "eos"
                break
            await checkpoint()
            logits = dec.step(np.asarray([[tok]], np.int64), extra)
    except asyncio.CancelledError:
        stopped = "cancelled"
    except ValueError as e:
        raise WorkerError(str(e), "bad_request") from None
    s = time.perf_counter() - t0
    return {"tokens": out, "ms": round(s * 1000, 1), "tokens_per_s": round(len(out) / max(s, 1e-9), 2),
            "stopped": stopped}
