"""ember.ray on a local Ray cluster: items/s with 1 and 2 actors against a plain loop, and Ray's per-item
overhead, in one run.

    python bench/bench_ray.py [--clips 8] [--overhead-items 500] [--repeats 2] [--cpus 2] [--json]

1. Throughput: Whisper tiny.en (`Transcriber`, the bundled model) on --clips espeak-ng sentences, one per
   batch: a plain loop over `Transcriber()` in this process, then `map_batches` with 1 and with 2 actors.
   A Ray job's wall time includes starting its actors and loading the model in each, so every Ray figure is
   measured at n and 2n items and the *marginal* rate n / (t(2n) - t(n)) is what the actors sustain; the
   wall time at n is reported too. Scaling = marginal items/s with 2 actors / with 1.
2. Overhead: a trivial `Embedder(embed_fn=...)` (no model), one row per batch, 1 actor: Ray's marginal
   seconds per item (n to 4n rows) minus the plain loop's. The plain loops run before and after the Ray
   jobs (the better of the two counts) with as many BLAS threads as one actor has (--loop-threads 1). What a map_batches row costs beyond the model's own work.
The machine's other load moves every figure; the ratios within one run are what to read.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SENTENCES = ["the quick brown fox jumps over the lazy dog", "ember runs the same models on many machines",
             "a batch of recordings becomes a table of text", "each actor loads the model once",
             "speech in, words out, one row at a time", "ray schedules the batches across the cluster",
             "the bundled model is whisper tiny english", "parquet files hold the results"]


def make_clips(folder: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        raw, out = folder / "raw.wav", folder / f"{i:03d}.wav"
        subprocess.run(["espeak-ng", "-w", str(raw), SENTENCES[i % len(SENTENCES)]], check=True)
        subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out)], check=True)
        paths.append(str(out))
    return paths


def lengths(texts):  # the overhead workload: no model at all
    return np.array([[len(t)] for t in texts], np.float32)


def blas_threads(n: int):
    """BLAS limited to n threads (what Ray gives a 1-CPU actor: OMP_NUM_THREADS=1), via threadpoolctl."""
    import contextlib
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(n)


def ray_seconds(ray, cls, rows, actors, kwargs, repeats) -> float:
    """Best of `repeats` wall times of one map_batches job over `rows` (actor startup included)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        ray.data.from_items(rows).map_batches(cls, fn_constructor_kwargs=kwargs, batch_size=1,
                                              compute=ray.data.ActorPoolStrategy(size=actors)).take_all()
        best = min(best, time.perf_counter() - t)
    return best


def marginal(ray, cls, rows, actors, kwargs, repeats, factor=2) -> tuple[float, float]:
    """(wall seconds for rows, marginal seconds per item from rows to rows * factor)."""
    t1 = ray_seconds(ray, cls, rows, actors, kwargs, repeats)
    t2 = ray_seconds(ray, cls, rows * factor, actors, kwargs, repeats)
    return t1, max(t2 - t1, 1e-9) / (len(rows) * (factor - 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--overhead-items", type=int, default=500, help="rows of the overhead job (then 4x as many)")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--loop-threads", type=int, default=1, help="BLAS threads of the plain loop (an actor has 1)")
    ap.add_argument("--repeats", type=int, default=2, help="best of this many runs per Ray figure")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import ray

    from ember.ray import Embedder, Transcriber
    tmp = Path(tempfile.mkdtemp(prefix="ember-bench-ray-"))
    try:
        paths = make_clips(tmp, a.clips)
        rows = [{"path": p} for p in paths]
        tr, em = Transcriber(), Embedder(embed_fn=lengths)
        texts = [{"text": f"item {i}"} for i in range(a.overhead_items)]
        tr({"path": np.array(paths[:1])})                                   # warm-up

        def loop_seconds():  # per item: (Whisper, trivial embed_fn), one row per call as the actors get them
            with blas_threads(a.loop_threads):
                return _loop_seconds()

        def _loop_seconds():
            t = time.perf_counter()
            for p in paths:
                tr({"path": np.array([p])})
            whisper = (time.perf_counter() - t) / len(paths)
            t = time.perf_counter()
            for r in texts:
                em({"text": np.array([r["text"]])})
            return whisper, (time.perf_counter() - t) / len(texts)
        before = loop_seconds()

        ray.init(num_cpus=a.cpus, include_dashboard=False, _temp_dir=str(tmp / "ray"), log_to_driver=False,
                 logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        weights = Transcriber.share()
        res = {"clips": a.clips, "cpus": a.cpus}
        for k in (1, 2):
            wall, per = marginal(ray, Transcriber, rows, k, {"model": weights}, a.repeats)
            res[f"ray_{k}_actor_wall_s"] = wall
            res[f"ray_{k}_actor_items_per_s"] = 1 / per
        res["scaling_2_vs_1"] = res["ray_2_actor_items_per_s"] / res["ray_1_actor_items_per_s"]
        _, per_tiny = marginal(ray, Embedder, texts, 1, {"embed_fn": lengths}, a.repeats, factor=4)
        ray.shutdown()
        after = loop_seconds()                   # the loop again: best of before and after the Ray runs
        loop_s, loop_tiny_s = min(before[0], after[0]), min(before[1], after[1])
        res["loop_items_per_s"] = 1 / loop_s
        res["overhead_ms_per_item"] = (per_tiny - loop_tiny_s) * 1e3
        res["loop_tiny_ms_per_item"] = loop_tiny_s * 1e3
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"Whisper tiny.en, {a.clips} clips, one per batch, local cluster of {a.cpus} CPUs")
    print(f"  plain loop (this process)  {res['loop_items_per_s']:6.2f} items/s   ({a.loop_threads} BLAS thread(s))")
    for k in (1, 2):
        print(f"  ray, {k} actor{'s' if k > 1 else ' '}             {res[f'ray_{k}_actor_items_per_s']:6.2f} items/s "
              f"marginal   ({res[f'ray_{k}_actor_wall_s']:.1f} s wall for {a.clips}, startup included)")
    print(f"  scaling 2 actors / 1        {res['scaling_2_vs_1']:6.2f}x")
    print(f"Ray per-item overhead (trivial embed_fn, 1 actor, {a.overhead_items} -> {4 * a.overhead_items} rows): "
          f"{res['overhead_ms_per_item']:.2f} ms/item (plain loop: {res['loop_tiny_ms_per_item']:.3f} ms/item)")


if __name__ == "__main__":
    sys.exit(main())
