"""Whisper in the page against native, one thread each, in one run: tiny.en on an ~18 s espeak-ng clip (the page's
default, deterministic mode, and with {deterministic: false}), native default and deterministic; the page's real-time
factor for tiny.en and base; VAD on a clip that is half silence (page and native); the page's transcript against
native deterministic mode's.

    python bench/bench_whisper_page.py [--rounds 2] [--no-base]

Native runs with one BLAS thread (threadpoolctl) and EMBER_NUM_THREADS=1; the page's worker is one thread. Each
figure is the best of --rounds runs after a warm-up, page and native interleaved per round. Uses Debian's Chromium
via Playwright, as the e2e tests do.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))


def write_wav(path: Path, samples: np.ndarray) -> Path:
    import wave
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-base", action="store_true")
    args = ap.parse_args(argv)
    import os
    os.environ["EMBER_NUM_THREADS"] = "1"
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    from playwright.sync_api import sync_playwright

    from bench_whisper import make_clip
    from ember.backends.cpu_matmul import set_deterministic
    from ember.models.whisper.audio import load_audio
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe
    from ember.wasm.tools import whisper as tool
    from web_app import site_page

    tmp = Path(tempfile.mkdtemp(prefix="bench-whisper-page-"))
    clip = make_clip(tmp)
    speech = load_audio(clip)
    half = np.concatenate([np.zeros(speech.size // 2, np.float32), speech[:speech.size // 2],
                           np.zeros(speech.size // 2, np.float32), speech[speech.size // 2:]])  # half silence
    half_wav = write_wav(tmp / "half.wav", half)
    seconds, half_s = speech.size / 16000, half.size / 16000
    demos = tool.demos(extra=not args.no_base)
    folders = {d["id"]: d["files"]["config.json"].parent for d in demos}

    def best(f, n):
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = f()
            out.append(time.perf_counter() - t0)
        return min(out), r

    native, page, texts = {}, {}, {}
    models = {}
    for det in (False, True):
        set_deterministic(det)
        m, _, tok = load_whisper(folders["whisper-tiny.en"])
        models[det] = (m, tok)
    set_deterministic(False)
    with sync_playwright() as pw, site_page(pw, {"whisper": demos}) as (app, server):
        p = app.page
        p.set_default_timeout(3_600_000)
        p.evaluate("""async () => { const m = await import('./ember.js');
            window.__e = await m.createEmber({device: 'cpu'}); await window.__e.loadModel('whisper', 'demo'); }""")

        def in_page(wav: Path, opts: dict):
            data = list(wav.read_bytes())
            return p.evaluate("""async ([bytes, opts]) => { const e = window.__e;
                const buf = new Uint8Array(bytes).buffer; const t0 = performance.now();
                const r = await e.transcribe(buf, opts); return [(performance.now() - t0) / 1000, r.text]; }""",
                              [data, opts])

        in_page(clip, {})  # warm-up
        for _ in range(args.rounds):
            for det in (False, True):
                set_deterministic(det)
                m, tok = models[det]
                t, r = best(lambda: transcribe(m, tok, str(clip), timestamps=True), 1)
                key = "native_deterministic" if det else "native"
                native[key] = min(native.get(key, 1e9), t)
                texts[key] = r["text"].strip()
            set_deterministic(True)
            m, tok = models[True]
            t, _ = best(lambda: transcribe(m, tok, half, timestamps=True, vad=True), 1)
            native["vad_half_silent"] = min(native.get("vad_half_silent", 1e9), t)
            set_deterministic(False)
            for key, wav, opts in (("page", clip, {}), ("page_not_deterministic", clip, {"deterministic": False}),
                                   ("vad_half_silent", half_wav, {"vad": True}),
                                   ("no_vad_half_silent", half_wav, {})):
                t, text = in_page(wav, opts)
                page[key] = min(page.get(key, 1e9), t)
                texts[key] = text
        if not args.no_base and "whisper-base" in folders:
            p.evaluate("async () => window.__e.loadModel('whisper', 'base')")
            in_page(clip, {"language": "en"})
            page["base"] = min(in_page(clip, {"language": "en"})[0] for _ in range(args.rounds))
    report = {"clip_seconds": round(seconds, 2), "half_silent_seconds": round(half_s, 2), "threads": 1,
              "native_s": {k: round(v, 3) for k, v in native.items()},
              "page_s": {k: round(v, 3) for k, v in page.items()},
              "page_over_native": round(page["page"] / native["native"], 2),
              "page_over_native_deterministic": round(page["page"] / native["native_deterministic"], 2),
              "deterministic_cost_native": round(native["native_deterministic"] / native["native"], 2),
              "page_rtf": {"tiny.en": round(page["page"] / seconds, 3),
                           "tiny.en_vad_half_silent": round(page["vad_half_silent"] / half_s, 3),
                           "tiny.en_half_silent_without_vad": round(page["no_vad_half_silent"] / half_s, 3),
                           **({"base": round(page["base"] / seconds, 3)} if "base" in page else {})},
              "page_text_equals_native_deterministic": texts["page"] == texts["native_deterministic"],
              "texts": texts}
    print(json.dumps(report, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "whisper_page.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
