"""ONNX: ember.onnx vs onnxruntime in the same run.

    python bench/bench_onnx.py [--repeat 3] [--skip-conformance]

1. Conformance: the official node tests (tests/onnx_node_cases.py), pass counts for ember on each
   device and for onnxruntime, through the same harness.
2. Latency: YOLOv8s best_fp16.onnx on CPU, ember and onnxruntime interleaved, best of --repeat,
   reported as the ratio ember / onnxruntime (this VM is noisy: only the ratio means anything).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def conformance(devices):
    import onnxruntime as ort

    import onnx_node_cases as cases
    names = cases.tensor_cases(cases.cases_dir())
    print(f"ONNX node tests: {len(names)} tensor-valued cases (onnx {__import__('onnx').__version__})")

    def ort_session(m):
        so = ort.SessionOptions()
        so.log_severity_level = 4
        return ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
    for label, kw in [(f"ember {d}", {"device": d}) for d in devices] + \
                     [(f"onnxruntime {ort.__version__}", {"device": "cpu", "make_session": ort_session})]:
        t = time.perf_counter()
        fails = cases.score(names=names, **kw)
        print(f"  {label:22s} {len(names) - len(fails):5d} pass  ({time.perf_counter() - t:.0f} s)")


def latency(repeat):
    import onnxruntime as ort

    from ember.models.yolo.fetch import ensure_file
    from ember.onnx import InferenceSession
    path = str(ensure_file("best_fp16.onnx"))
    x = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
    ours, ref = InferenceSession(path), ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {"images": x}
    best = {"ember": float("inf"), "onnxruntime": float("inf")}
    for _ in range(repeat):  # interleaved, so both see the same load on this machine
        for name, s in (("ember", ours), ("onnxruntime", ref)):
            t = time.perf_counter()
            s.run(None, feeds)
            best[name] = min(best[name], time.perf_counter() - t)
    print(f"YOLOv8s 640x640 on CPU, best of {repeat}: ember {best['ember'] * 1e3:.0f} ms, "
          f"onnxruntime {best['onnxruntime'] * 1e3:.0f} ms, ratio {best['ember'] / best['onnxruntime']:.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--devices", default="cpu,webgpu")
    p.add_argument("--skip-conformance", action="store_true")
    a = p.parse_args()
    import ember
    if not a.skip_conformance:
        conformance([d for d in a.devices.split(",") if d in ember.devices()])
    latency(a.repeat)


if __name__ == "__main__":
    main()
