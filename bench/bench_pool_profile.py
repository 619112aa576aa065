"""Where each page tool's time goes with the kernel pool (Pyodide under Node, the pool on worker_threads): inside the
pool's kernels (the part its threads divide) and everything else (numpy, Python, copies: one thread). The share
inside on one thread, p, bounds what N threads can give (Amdahl: 1 / ((1 - p) + p / N)); the pool's own speed-up
on 2 threads is measured too. Shares are ratios of times in one process, so a loaded machine skews them less than
the wall-clock ratios of bench_web_threads.py.

    python bench/bench_pool_profile.py [--tools gemma,whisper,yolo,embed | chat] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_web_threads import FOLDER_OF, NEW_TOKENS, PROMPT, SENTENCES, TOOL_OF, build  # noqa: E402
from pyodide_runner import PyodideSession  # noqa: E402

CODE = r'''
import time, js
from ember.backends import cpu_matmul, cpu_pool_kernels
from ember.backends.cpu_pool import weights_in_pool
from ember.wasm import tools as T
spent = [0.0]
def timed(fn):
    def call(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t0
    return call
for cls, names in ((cpu_pool_kernels.PoolKernels, ("q8_matmul", "qmatmul", "_call", "attention_blocks", "_unary")),
                   (cpu_pool_kernels.PoolFloatKernels, ("conv2d", "conv3x3_winograd", "attention", "_rows_call")),
                   (cpu_pool_kernels.PoolDecodePlan, ("step",)), (cpu_pool_kernels.PoolXattnPlan, ("step", "logits"))):
    for name in names:  # (a float kernel's call too small for the pool runs on this thread inside it: counted)
        setattr(cls, name, timed(getattr(cls, name)))

def drive(coro):
    try:
        while True:
            coro.send(None)
    except StopIteration as done:
        return done.value

TOOL, FOLDER = {tool!r}, {folder!r}
mod = T.get({tool_module!r})
with weights_in_pool():
    mod.load(FOLDER, "cpu")
INPUT = {{"gemma": {prompt!r}, "chat": {prompt!r}, "whisper": open("/hub/speech.wav", "rb").read(),
          "yolo": open("/hub/bus.png", "rb").read(), "embed": {sentences!r}}}[TOOL]
OPTS = {{"temperature": 0, "max_new_tokens": {new_tokens}}} if TOOL in ("gemma", "chat") else {{}}
out = {{}}
for active in (1, 2, 1, 2):
    js.emberPool.setActive(active)
    drive(mod.run(INPUT, dict(OPTS)))  # warm
    spent[0] = 0.0
    t0 = time.perf_counter()
    drive(mod.run(INPUT, dict(OPTS)))
    total = time.perf_counter() - t0
    best = out.get(active)
    if best is None or total < best[0]:
        out[active] = (total, spent[0])
result = {{"total_1": out[1][0], "pool_1": out[1][1], "total_2": out[2][0], "pool_2": out[2][1],
           "status": cpu_matmul.pool_status()}}
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default="gemma,whisper,yolo,embed")
    ap.add_argument("--boost", action="store_true", help="this run's autogroup at nice -20 "
                    "(bench_web_threads.py says why)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    tools = a.tools.split(",")
    if a.boost:
        from bench_web_threads import boost
        boost(["self"])
    res = {}
    with tempfile.TemporaryDirectory(prefix="ember-pool-profile-") as tmp:
        site, hub = build(Path(tmp), tools)
        models = site / "models"
        for tool in tools:
            folder = next(models.glob(FOLDER_OF[tool]))
            code = CODE.format(tool=tool, folder=f"/models/{folder.name}", tool_module=TOOL_OF[tool], prompt=PROMPT,
                               sentences=SENTENCES, new_tokens=NEW_TOKENS)
            with PyodideSession(packages=("numpy", "pillow"), threads=2, mounts={"/models": models, "/hub": hub}) as s:
                r = s.run(code, timeout=3600)["result"]
            p = r["pool_1"] / r["total_1"]
            r.update(pool_share_1=round(p, 3), pool_speedup_2=round(r["pool_1"] / r["pool_2"], 2),
                     total_speedup_2=round(r["total_1"] / r["total_2"], 2),
                     **{f"amdahl_{n}": round(1 / ((1 - p) + p / n), 2) for n in (2, 4, 8)})
            res[tool] = r
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"{'tool':8s} {'total 1':>8s} {'in pool':>8s} {'share p':>8s} {'pool 2/1':>9s} {'total 2/1':>9s}   "
          "Amdahl bound at 2 / 4 / 8 threads")
    for t, r in res.items():
        print(f"{t:8s} {r['total_1']:8.2f} {r['pool_1']:8.2f} {r['pool_share_1']:8.3f} {r['pool_speedup_2']:9.2f} "
              f"{r['total_speedup_2']:9.2f}   {r['amdahl_2']} / {r['amdahl_4']} / {r['amdahl_8']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
