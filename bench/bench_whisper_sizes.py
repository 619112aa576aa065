"""Whisper base vs tiny.en on the same espeak-ng clips, natively (the Python API on the CPU, what `ember whisper`
does after loading) and in the page (the app in Debian's Chromium on the CPU, through its model picker): seconds
per clip (best of --runs natively; the page's own `ms`, the run without the load) and the word error rate
against the text espeak-ng spoke. Ratios within one run; the machine may be loaded, so read base/tiny.en.

    python bench/bench_whisper_sizes.py [--runs 2] [--no-page] [--json]

Figures go to stdout as a table (and --json as one object). Language: detected (base), English (tiny.en).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))

CLIPS = ["The quick brown fox jumps over the lazy dog. It was a sunny morning in the small village.",
         "Please call Stella and ask her to bring these things with her from the store.",
         "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her brother.",
         "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def wer(ref: str, hyp: str) -> tuple[int, int]:
    """(word edits, reference words): Levenshtein over words after lowercasing and dropping punctuation."""
    r, h = words(ref), words(hyp)
    row = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev, row[0] = row[0], i
        for j, hw in enumerate(h, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (rw != hw))
    return row[-1], len(r)


def make_clips(tmp: Path) -> list[Path]:
    out = []
    for i, text in enumerate(CLIPS):
        raw, wav = tmp / f"c{i}-raw.wav", tmp / f"c{i}.wav"
        subprocess.run(["espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
        subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)], check=True)
        out.append(wav)
    return out


def native(demos, clips, runs):
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe
    out = {}
    for d in demos:
        model, _, tok = load_whisper(d["files"]["config.json"].parent)
        rows = []
        for clip in clips:
            best, text = float("inf"), None
            for _ in range(runs):
                t0 = time.perf_counter()
                r = transcribe(model, tok, str(clip), timestamps=True)
                best, text = min(best, time.perf_counter() - t0), r["text"].strip()
            rows.append({"s": best, "text": text, "language": r["language"]})
        out[d["id"]] = rows
    return out


def page(demos, clips):
    from playwright.sync_api import sync_playwright
    from web_app import site_page
    out = {}
    with sync_playwright() as pw, site_page(pw, {"whisper": demos}) as (app, _):
        for d in demos:
            app.page.select_option("#picker-whisper .demo", d["id"])
            rows = []
            for clip in clips:
                app.page.eval_on_selector("#transcript", "e => { delete e.dataset.json; }")
                app.page.set_input_files("#audio-file", str(clip))
                r = app.wait_result("#transcript", timeout_s=900)
                if r is None:
                    raise SystemExit(f"page: {app.message()}")
                rows.append({"s": r["ms"] / 1000, "text": r["text"], "language": r["language"],
                             "heap_mib": r["wasm_memory_bytes"] / 2**20})
            out[d["id"]] = rows
    return out


def summary(results):
    out = {}
    for where, per_model in results.items():
        for model, rows in per_model.items():
            edits = sum(wer(ref, r["text"])[0] for ref, r in zip(CLIPS, rows))
            n = sum(len(words(ref)) for ref in CLIPS)
            out[f"{where} {model}"] = {"s_per_clip": round(sum(r["s"] for r in rows) / len(rows), 2),
                                       "wer": round(edits / n, 4), "languages": sorted({r["language"] for r in rows})}
        ids = list(per_model)
        if len(ids) == 2:
            a, b = (out[f"{where} {i}"] for i in ids)
            out[f"{where} base/tiny.en time"] = round(b["s_per_clip"] / a["s_per_clip"], 2)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--no-page", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from ember.wasm.tools import whisper
    demos = whisper.demos(extra=True)
    if len(demos) != 2:
        raise SystemExit("needs Whisper tiny.en and base in ember's cache (ember.models.whisper.fetch)")
    with tempfile.TemporaryDirectory(prefix="ember-clips-") as tmp:
        clips = make_clips(Path(tmp))
        results = {"native": native(demos, clips, a.runs)}
        if not a.no_page:
            results["page"] = page(demos, clips)
    res = summary(results)
    res["texts"] = {f"{w} {m}": [r["text"] for r in rows] for w, pm in results.items() for m, rows in pm.items()}
    print(json.dumps(res) if a.json else "\n".join(f"{k}: {v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
