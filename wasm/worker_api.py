"""The Python side of the web app's worker: load a model from files already in Pyodide's file system,
run it, and hand results back as plain dicts with the same fields as the CLI's `--json`.

web/worker.js fetches the weights, writes them under /models/<tool>/<key>/, then calls `load(...)` and
the `run_*` coroutines through `pyodide.runPythonAsync`, so that WebGPU reads can suspend via JSPI.
Long runs `await asyncio.sleep(0)` between steps (tokens, segments): that lets the worker's event loop
deliver a cancel message, which sets the flag that `cancelled()` reads. The module runs unchanged in
CPython (tests/test_web_worker_api.py drives it there against the CLI's own functions).
"""
from __future__ import annotations

import asyncio
import os
import time

import numpy as np
from ember.errors import EmberError

TOOLS = ("whisper", "llama", "yolo")
_MODELS: dict[str, dict] = {}   # tool -> {"model", "tokenizer", "source", "device"}
_CANCEL = {"flag": False}


class WorkerError(EmberError, ValueError):
    """A request the worker cannot serve; `code` tells the page which human message to show."""

    def __init__(self, message: str, code: str = "error"):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------- device

async def pick_device(name: str) -> dict:
    """Make `name` ("auto", "webgpu" or "cpu") usable; -> {"device", "reason", "adapter", "kernels"}. A missing
    WebGPU adapter is not an error: the answer says "cpu" and why, and the page shows it. "auto" also takes
    the CPU when the only adapter is a software renderer (SwiftShader, llvmpipe: slower than the CPU
    backend); "webgpu" uses any adapter that works. "kernels" is the CPU's matmul path:
    "wasm-simd128+relaxed", "wasm-simd128 (why not relaxed)", or "einsum (why the SIMD kernels are not used)"."""
    from ember.backends.cpu_matmul import matmul_path
    return {**await _pick_device(name), "kernels": matmul_path()}


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


# ---------------------------------------------------------------------------- loading

def _one_file(folder: str, suffixes: tuple[str, ...], tool: str) -> str:
    found = sorted(n for n in os.listdir(folder) if n.lower().endswith(suffixes))
    if not found:
        raise WorkerError(f"ember: no {' / '.join(suffixes)} file among {sorted(os.listdir(folder))} for {tool}",
                          "unsupported_file")
    return os.path.join(folder, found[0])


def load(tool: str, folder: str, device: str = "cpu") -> dict:
    """Load `tool`'s model from the files in `folder`; -> {"tool", "device", "parameters", "bytes"}, and for
    YOLO "task" ("detect" | "pose") and "classes" (the label of each class index)."""
    if tool not in TOOLS:
        raise WorkerError(f"ember: unknown tool {tool!r}; expected one of {TOOLS}", "bad_request")
    _MODELS.pop(tool, None)  # free the old model before the new one claims memory
    try:
        if tool == "whisper":
            from ember.models.whisper.load import load_whisper
            model, _, tokenizer = load_whisper(folder, device=device)
        elif tool == "llama":  # -- gemma3 (issue 23): Gemma 3 GGUF or a Llama source, by what the files say
            from .gemma_api import load_text_model
            model, tokenizer = load_text_model(folder, device)
            if tokenizer is None:
                raise WorkerError(f"ember: no tokenizer beside the Llama model in {sorted(os.listdir(folder))}; "
                                  f"add tokenizer.json (or tokenizer.bin for llama2.c)", "unsupported_file")
        else:
            from ember.models.yolo.load import load_model
            model = load_model(_one_file(folder, (".safetensors", ".onnx", ".pt"), tool), device=device)
            tokenizer = None
    except MemoryError:
        raise WorkerError(f"ember: the {tool} model does not fit in this browser's memory", "out_of_memory") from None
    except (ValueError, KeyError, OSError, TypeError) as e:
        if isinstance(e, WorkerError):
            raise
        msg = str(e) if str(e).startswith("ember") else f"ember: {type(e).__name__}: {e}"
        raise WorkerError(msg, "bad_model") from None
    from .gemma_api import weight_sizes  # quantized weights count too (gemma3, issue 23)
    n_params, n_bytes = weight_sizes(model)
    _MODELS[tool] = {"model": model, "tokenizer": tokenizer, "device": device}
    info = {"tool": tool, "device": device, "parameters": n_params, "bytes": n_bytes}
    if tool == "yolo":  # what it detects: the page says so (the demo knows two classes only)
        info.update(task=model.cfg.task, classes=[model.cfg.label(i) for i in range(model.cfg.nc)])
    if tool == "whisper":  # the page offers a multilingual model's languages (token order: Whisper's own)
        table = tokenizer.config.special.lang_to_id
        info.update(multilingual=bool(tokenizer.config.multilingual),
                    languages=[t[2:-2] for t, _ in sorted(table.items(), key=lambda kv: kv[1])]
                    if tokenizer.config.multilingual else ["en"])
    if tool == "llama":  # issue 23: what the page shows of the model's memory beside its weights
        from .gemma_api import kv_cache_bytes
        info.update(context=int(model.config.max_seq_len),
                    kv_2k_bytes=kv_cache_bytes(model.config, 2048) if hasattr(model.config, "layer_types") else None)
    return info


def loaded(tool: str) -> dict:
    if tool not in _MODELS:
        raise WorkerError(f"ember: no {tool} model loaded yet; load one first", "not_loaded")
    return _MODELS[tool]


# ---------------------------------------------------------------------------- cancel

def cancel() -> None:
    _CANCEL["flag"] = True


async def _checkpoint() -> None:
    """Yield to the worker's event loop (a cancel message can arrive), then stop if one did."""
    await asyncio.sleep(0)
    if _CANCEL["flag"]:
        raise asyncio.CancelledError()


# ---------------------------------------------------------------------------- tools

def _samples(audio) -> np.ndarray:
    """WAV bytes (decoded and resampled by ember as the CLI does) or float32 16 kHz samples."""
    from ember.models.whisper.transcribe import load_input
    if isinstance(audio, (bytes, bytearray, memoryview)) and bytes(audio[:4]) == b"RIFF":
        return load_input(bytes(audio))
    if isinstance(audio, (bytes, bytearray, memoryview)):
        if len(audio) % 4:
            raise WorkerError("ember: audio must be a WAV file or float32 samples at 16 kHz "
                              f"(got {len(audio)} bytes, not a multiple of 4)", "unsupported_file")
        audio = np.frombuffer(audio, dtype=np.float32)
    samples = np.asarray(audio, dtype=np.float32)
    if samples.ndim != 1 or samples.size == 0:
        raise WorkerError(f"ember: audio must be mono samples, got shape {samples.shape}", "unsupported_file")
    if not np.isfinite(samples).all():
        raise WorkerError("ember: audio samples contain NaN or infinity", "unsupported_file")
    return samples


async def run_whisper(audio, opts: dict | None = None, on_segment=None, on_progress=None) -> dict:
    """-> {"text", "language", "segments": [{"start", "end", "text", "tokens"}]} as `ember whisper --json
    --timestamps` (plus "ms", "duration", "stopped": "done" | "cancelled"). on_segment(segment) as each
    segment is decoded; on_progress({"stage": "window" | "segment", "done": seconds, "total": seconds}) before
    each 30 s window, after each segment (its end) and at the end. A cancel lands between windows and segments; the result then holds the
    segments decoded so far."""
    from ember.models.whisper.transcribe import transcribe_steps
    opts = dict(opts or {})
    m = loaded("whisper")
    _CANCEL["flag"] = False
    try:
        samples = _samples(audio)
    except ValueError as e:
        raise WorkerError(str(e), "unsupported_file") from None
    t0 = time.perf_counter()
    temps = 0.0 if opts.get("fallback") is False else (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # the CLI's default
    steps = transcribe_steps(m["model"], m["tokenizer"], samples, language=opts.get("language"),
                             timestamps=bool(opts.get("timestamps", True)), beam_size=opts.get("beam"),
                             temperature=temps)
    segs, language, stopped = [], opts.get("language"), "done"  # a cancelled run knows only a chosen language
    total, done = samples.size / 16000, 0.0  # progress in seconds of audio, never going back
    try:
        while True:
            step = next(steps)
            if step[0] == "segment":
                seg = {k: step[1][k] for k in ("start", "end", "text", "tokens")}
                segs.append(seg)
                if on_segment is not None:
                    on_segment(seg)
                stage, done = "segment", max(done, min(seg["end"], total))
            else:
                stage, done = "window", max(done, step[1])
            if on_progress is not None:
                on_progress({"stage": stage, "done": round(done, 2), "total": round(total, 2)})
            await _checkpoint()
    except StopIteration as done:
        language = done.value["language"]
    except asyncio.CancelledError:
        steps.close()
        stopped = "cancelled"
    return {"text": "".join(s["text"] for s in segs).strip(), "language": language, "segments": segs,
            "ms": round((time.perf_counter() - t0) * 1000, 1), "duration": round(samples.size / 16000, 3),
            "stopped": stopped}


async def run_llama(prompt: str, opts: dict | None = None, on_token=None) -> dict:
    """Stream a completion; -> {"prompt_tokens", "tokens", "text", "tokens_per_s", "stopped"} as
    `ember llama --json`, plus "context" (the model's context length, where "stopped": "context" ends).
    on_token(piece, n_tokens, tokens_per_s) per piece; a piece ending in U+FFFD (a character split over
    tokens, which a tokenizer's stream decoder may pass on) waits for the next one. A prompt that leaves
    no room in the context is refused with code "too_long"."""
    from ember.models.common.generate import SamplingParams, TextStream, generate
    opts = dict(opts or {})
    m = loaded("llama")
    tok = m["tokenizer"]
    _CANCEL["flag"] = False
    try:
        params = SamplingParams(float(opts.get("temperature", 0.8)), int(opts.get("top_k", 0)),
                                float(opts.get("top_p", 0.9)), float(opts.get("repetition_penalty", 1.0)),
                                None if opts.get("seed") is None else int(opts["seed"]))
    except ValueError as e:
        raise WorkerError(str(e), "bad_request") from None
    max_new = int(opts.get("max_new_tokens", 128))
    if not 1 <= max_new <= 4096:
        raise WorkerError(f"ember: max tokens must be between 1 and 4096, got {max_new}", "bad_request")
    prompt_ids = tok.encode(prompt, bos=True)
    context = int(m["model"].config.max_seq_len)
    if len(prompt_ids) >= context:
        raise WorkerError(f"ember: the prompt is {len(prompt_ids):,} tokens and this model's context length is "
                          f"{context:,} tokens (prompt and reply together); shorten the prompt", "too_long")
    stream = TextStream(generate(m["model"], prompt_ids, max_new, params, tok.eos_ids), tok)
    pieces, held, cancelled = [], "", False
    try:
        for piece in stream:
            pieces.append(piece)
            held += piece
            if held.endswith("\ufffd"):  # the start of a character whose continuation bytes come next
                continue
            if on_token is not None:
                st = stream.stats
                on_token(held, len(st.tokens), round(st.tokens_per_s, 2))
            held = ""
            await _checkpoint()
    except asyncio.CancelledError:
        stream.abort()
        cancelled = True
    st = stream.stats
    if held and on_token is not None:  # what was held back is the text's real end
        on_token(held, len(st.tokens), round(st.tokens_per_s, 2))
    return {"prompt_tokens": list(prompt_ids), "tokens": list(st.tokens), "text": "".join(pieces),
            "tokens_per_s": round(st.tokens_per_s, 2), "stopped": "cancelled" if cancelled else st.stopped,
            "context": context, "kv_cache_bytes": int(st.kv_cache_bytes)}


def _image(image):
    """Encoded image bytes (decoded by Pillow as the CLI does) or (H, W, 4) RGBA pixels from a canvas."""
    if isinstance(image, dict):  # {"rgba": bytes, "width", "height"} from ImageData
        w, h = int(image["width"]), int(image["height"])
        rgba = np.frombuffer(image["rgba"], dtype=np.uint8)
        if rgba.size != w * h * 4:
            raise WorkerError(f"ember: RGBA buffer of {rgba.size} bytes does not match {w}x{h}", "unsupported_file")
        return rgba.reshape(h, w, 4)[:, :, :3].copy()
    return bytes(image)


async def run_yolo(image, opts: dict | None = None, on_progress=None) -> dict:
    """-> {"detections": [{"class", "label", "score", "box"}] rounded as `ember yolo --json`, "ms", "width",
    "height", "input": [H, W] the model saw, "stopped": "done" | "cancelled"}. Options as the CLI's:
    conf, iou, max_det, square. on_progress({"stage", "done", "total"}) before each stage, after each of the
    model's layer groups (done fractional: 1.125 = an eighth of the model stage) and at the end; a cancel lands
    at the next of them."""
    from ember.models.yolo.cli import _rounded
    from ember.models.yolo.image import input_shape, load_image
    from ember.models.yolo.predict import CONF, IOU, MAX_DET, STAGES, detect_steps
    opts = dict(opts or {})
    m = loaded("yolo")
    _CANCEL["flag"] = False
    try:
        conf, iou = float(opts.get("conf", CONF)), float(opts.get("iou", IOU))
        max_det, square = int(opts.get("max_det", MAX_DET)), bool(opts.get("square", False))
    except (TypeError, ValueError) as e:
        raise WorkerError(f"ember: bad YOLO option ({e})", "bad_request") from None
    for name, v in (("conf", conf), ("iou", iou)):
        if not 0.0 <= v <= 1.0:
            raise WorkerError(f"ember: {name} must be between 0 and 1, got {v}", "bad_request")
    if not 1 <= max_det <= 10000:
        raise WorkerError(f"ember: max_det must be between 1 and 10000, got {max_det}", "bad_request")
    try:
        img = load_image(_image(image))
    except ValueError as e:
        raise WorkerError(str(e), "unsupported_file") from None
    t0 = time.perf_counter()
    steps = detect_steps(m["model"], img, conf, iou, max_det, square)
    dets, stopped = [], "done"
    try:
        while True:
            name, part = next(steps)
            if on_progress is not None:
                on_progress({"stage": name, "done": round(STAGES.index(name) + part, 3), "total": len(STAGES)})
            await _checkpoint()  # a cancel sent during the previous stage or layer group lands here
    except StopIteration as done:
        dets = done.value
    except asyncio.CancelledError:
        steps.close()
        stopped = "cancelled"
    ms = (time.perf_counter() - t0) * 1000
    if on_progress is not None and stopped == "done":
        on_progress({"stage": "done", "done": len(STAGES), "total": len(STAGES)})
    cfg = m["model"].cfg
    return {"detections": [_rounded(d) for d in dets], "ms": round(ms, 1), "stopped": stopped,
            "width": int(img.shape[1]), "height": int(img.shape[0]),
            "input": list(input_shape(*img.shape[:2], cfg.imgsz, square, max(cfg.strides)))}


# ---------------------------------------------------------------------------- the worker's entry point

async def handle(op: str, args: dict) -> dict:
    """One request from web/worker.js -> {"ok": result} or {"error": code, "message": text}; never raises,
    so the page always gets an answer it can show."""
    try:
        args = {k: _from_js(v) for k, v in dict(args).items()}
        # ---- the training tool (wasm/train_api.py): its data loads like a model, its runs are "train*"
        if op in ("train", "train-predict") or (op == "load" and args.get("tool") == "train"):
            from ember.wasm import train_api
            return {"ok": await train_api.handle(op, args)}
        # ---- end of the training tool
        if op == "device":
            return {"ok": await pick_device(args["device"])}
        if op == "load" and args.get("tool") != "embed":
            return {"ok": load(args["tool"], args["folder"], args.get("device", "cpu"))}
        if op == "whisper":
            return {"ok": await run_whisper(args["input"], args.get("opts"), args.get("on_partial"),
                                            args.get("on_progress"))}
        if op == "llama":
            return {"ok": await run_llama(args["input"], args.get("opts"), args.get("on_partial"))}
        if op == "yolo":
            return {"ok": await run_yolo(args["input"], args.get("opts"), args.get("on_progress"))}
        # --- semantic search (issue 19): wasm/embed_api.py serves tool "embed" ---
        if op == "embed" or (op == "load" and args.get("tool") == "embed"):
            from . import embed_api
            try:
                if op == "load":
                    return {"ok": embed_api.load(args["folder"], args.get("device", "cpu"))}
                if args.get("opts", {}).get("split"):
                    return {"ok": {"passages": embed_api.split_passages(args["input"])}}
                return {"ok": embed_api.embed(args["input"])}
            except (ValueError, KeyError, OSError) as e:
                raise WorkerError(str(e) if str(e).startswith("ember") else f"ember: {e}", "bad_model"
                                  if op == "load" else "bad_request") from None
        # --- end semantic search ---
        raise WorkerError(f"ember: unknown request {op!r}", "bad_request")
    except WorkerError as e:
        return {"error": e.code, "message": str(e)}
    except asyncio.CancelledError:
        return {"error": "cancelled", "message": "ember: cancelled"}
    except MemoryError:
        return {"error": "out_of_memory", "message": "ember: out of memory in the browser while running "
                f"{op}; try a smaller model or input"}
    except Exception as e:  # noqa: BLE001 - reported to the page with its type, the worker stays alive
        import traceback
        traceback.print_exc()
        msg = str(e) if str(e).startswith("ember") else f"ember: {type(e).__name__}: {e}"
        return {"error": "internal", "message": msg}


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
