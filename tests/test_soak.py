"""Memory stays flat over many runs of one model in one process (the hostile-input soak): the RSS after the first
runs (caches, allocator pools and lazily built tables settle) may not keep growing. CI runs a short soak per
model; EMBER_SOAK=1 runs the full one (1,000 Llama generations, 50 Whisper transcriptions, 60 YOLO runs) and
EMBER_SOAK_REPORT=path writes the series as JSON (docs/hostile-input.md holds the figures)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FULL = os.environ.get("EMBER_SOAK") == "1"
RUNS = {"llama": 1000 if FULL else 100, "whisper": 50 if FULL else 4, "yolo": 60 if FULL else 5}
GROWTH_MIB = 24  # allowed growth from the end of warm-up to the last run


@pytest.mark.parametrize("model", sorted(RUNS))
def test_rss_stays_flat(model):
    runs = RUNS[model]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    r = subprocess.run([sys.executable, str(Path(__file__).parent / "soak_rss.py"), model, str(runs)],
                       capture_output=True, text=True, timeout=3000, check=False, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    series = json.loads(r.stdout.strip().splitlines()[-1])
    warm = series[max(runs // 5, 2) - 1]  # after the first fifth, and at least two runs (a weight's copies for its
    # kernels, blocked or transformed, are made at its second product: the second run's one-time growth)
    report = os.environ.get("EMBER_SOAK_REPORT")
    if report:
        table = json.loads(Path(report).read_text()) if Path(report).exists() else {}
        table[model] = {"runs": runs, "first": series[0], "after_warmup": warm, "last": series[-1],
                        "max": max(series)}
        Path(report).write_text(json.dumps(table, indent=1))
    assert series[-1] - warm < GROWTH_MIB, f"{model}: RSS {warm} MiB after warm-up, {series[-1]} MiB after {runs} runs"
    assert max(series) - warm < 2 * GROWTH_MIB, f"{model}: RSS peaked at {max(series)} MiB (after warm-up {warm})"
