"""Whisper tiny.en (an 18 s espeak-ng clip; float32 and q8_0), YOLOv8s (bus.jpg) and the Llama demo (32 greedy
tokens, as bench_web) on the CPU: Pyodide under
Node with the wasm SIMD kernels against native CPython (one BLAS thread, and the default threads), in one run,
and where the page's time goes: inside the kernels (ctypes calls included) vs the rest (Python, numpy, copies).

    python bench/bench_wasm_models.py [--rounds 3] [--models whisper,whisper-q8_0,yolo] [--einsum] [--relaxed]

Rounds interleave the engines (this VM slows under sustained load); a figure is the best round. The page
itself (Chromium, the worker) is bench/bench_web.py; this one isolates the engine from the app.
Results go to stdout and bench/results/wasm_models.json. Goal: page / native <= 3x.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from pyodide_runner import PyodideSession  # noqa: E402

SPEECH = ("The quick brown fox jumps over the lazy dog. When the sun rises over the hills, the farmers walk out "
          "to the fields and begin their work. Every student who entered the old library that morning was asked "
          "to sign the register at the door, and then the student who entered last closed it behind him.")

# Runs natively and in Pyodide: the models, one timed call per model, and a kernel-time counter.
ENGINE = r'''
import time
import numpy as np
import ember
from ember.backends import cpu_matmul

MODELS = {}

def setup(whisper_dir, yolo_file, llama_dir, names):
    from ember.models.llama.load import load_llama
    from ember.models.whisper.load import load_whisper
    from ember.models.yolo.load import load_model
    for name in names:
        if name == "llama":
            MODELS[name] = load_llama(llama_dir)
        if name.startswith("whisper"):
            m, _, tok = load_whisper(whisper_dir)
            if name == "whisper-q8_0":
                from ember.quant import quantize
                quantize(m, "q8_0")
            MODELS[name] = (m, tok)
        if name == "yolo":
            MODELS[name] = load_model(yolo_file)

def call(name, wav, png):
    from ember.models.whisper.transcribe import transcribe
    from ember.models.yolo.predict import detect
    if name == "llama":  # bench_web's: greedy, 32 tokens
        from ember.models.common.generate import SamplingParams, generate
        m, tok = MODELS[name]
        return list(generate(m, tok.encode("The for statement", bos=True), 32, SamplingParams(0.0, 0, 0.9, 1.0, 0),
                             tok.eos_ids))
    if name.startswith("whisper"):
        m, tok = MODELS[name]
        return transcribe(m, tok, wav, timestamps=True)["text"]  # the page's options
    return [[round(v, 2) for v in d["box"]] + [d["class"]] for d in detect(MODELS[name], png)]

def kernel_clock():
    """Wrap the loaded kernels' entry points with a timer: -> a list whose [0] sums their seconds."""
    k = cpu_matmul.wasm_kernels()
    spent = [0.0]
    if k is None:
        return spent
    def timed(f):
        def run(*args):
            t = time.perf_counter()
            try:
                return f(*args)
            finally:
                spent[0] += time.perf_counter() - t
        return run
    for attr in ("_sgemm", "_sgemm_batched", "_silu", "_gelu", "_exp_rowmax"):
        setattr(k, attr, timed(getattr(k, attr)))
    return spent

def timed_call(name, wav, png, warm):
    if warm:
        call(name, wav, png)  # first run: V8 tiers up the kernels, caches fill
    spent = kernel_clock()
    t = time.perf_counter()
    out = call(name, wav, png)
    total = time.perf_counter() - t
    cpu_matmul.use_wasm_kernels()  # unwrap
    return total, spent[0], out
'''


def inputs(tmp: Path) -> tuple[Path, Path]:
    from PIL import Image

    from ember.models.yolo.fetch import ensure_file
    raw, wav, png = tmp / "raw.wav", tmp / "speech.wav", tmp / "bus.png"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), SPEECH], check=True)
    subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)], check=True)
    with Image.open(ensure_file("bus.jpg")) as im:
        im.convert("RGB").save(png)
    return wav, png


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="whisper,whisper-q8_0,yolo,llama")
    p.add_argument("--einsum", action="store_true", help="also time Pyodide without the kernels (slow)")
    p.add_argument("--relaxed", action="store_true",
                   help="Node with --experimental-wasm-relaxed-simd, so the page loads the relaxed module as Chromium does")
    a = p.parse_args(argv)
    names = a.models.split(",")
    from threadpoolctl import threadpool_limits

    from ember.models.whisper.fetch import ensure_tiny_en
    from ember.models.yolo.fetch import ensure_demo_model
    whisper_dir = ensure_tiny_en()
    yolo_file = ensure_demo_model()
    ns: dict = {}
    exec(ENGINE, ns)
    llama_dir = ROOT / "models" / "llama" / "demo"
    ns["setup"](str(whisper_dir), str(yolo_file), str(llama_dir), names)
    best: dict[tuple[str, str], tuple[float, float]] = {}
    outputs: dict[tuple[str, str], object] = {}

    def keep(engine, name, total, kernels, out):
        if total < best.get((engine, name), (1e9,))[0]:
            best[(engine, name)] = (total, kernels)
        outputs[(engine, name)] = out

    with tempfile.TemporaryDirectory() as tmp:
        wav, png = inputs(Path(tmp))
        mounts = {"/whisper": whisper_dir, "/yolo": Path(yolo_file).parent, "/llama": llama_dir, "/in": Path(tmp)}
        node_args = ("--experimental-wasm-relaxed-simd",) if a.relaxed else ()
        with PyodideSession(packages=("numpy", "pillow"), mounts=mounts, node_args=node_args) as s:
            s.run(ENGINE + f'\nsetup("/whisper", "/yolo/{Path(yolo_file).name}", "/llama", {names!r})\n'
                  'import builtins; builtins._ember_bench = (MODELS, timed_call)\n', timeout=600)
            engines = ["page kernels"] + (["page einsum"] if a.einsum else [])
            for r in range(a.rounds):
                for name in names:
                    for threads, engine in ((1, "native 1 thread"), (None, "native default")):
                        with threadpool_limits(threads, "blas"):
                            keep(engine, name, *ns["timed_call"](name, str(wav), str(png), warm=r == 0))
                    for engine in engines:
                        if engine == "page einsum" and r > 0:
                            continue
                        got = s.run(f'''
import builtins, os
from ember.backends import cpu_matmul
MODELS, timed_call = builtins._ember_bench
os.environ["EMBER_WASM_KERNELS"] = "{'0' if engine == 'page einsum' else '1'}"
cpu_matmul.use_wasm_kernels()
result = [*timed_call({name!r}, "/in/{wav.name}", "/in/{png.name}", {r == 0}), cpu_matmul.matmul_path()]
os.environ.pop("EMBER_WASM_KERNELS")
cpu_matmul.use_wasm_kernels()
''', timeout=1800)["result"]
                        keep(engine, name, *got[:3])
    report = {}
    print(f"seconds per run, best of {a.rounds} interleaved rounds (machine shared: ratios within this run)")
    print(f"{'model':14s}{'native 1 thr':>14s}{'native dflt':>13s}{'page':>9s}{'page/1thr':>11s}{'page/dflt':>11s}"
          f"{'in kernels':>12s}  same output")
    for name in names:
        n1, nd = best[("native 1 thread", name)][0], best[("native default", name)][0]
        pk, kern = best[("page kernels", name)]
        same = outputs[("page kernels", name)] == outputs[("native 1 thread", name)]
        report[name] = {"native_1_thread_s": n1, "native_default_s": nd, "page_kernels_s": pk,
                        "page_in_kernels_s": kern, "page_over_native_1_thread": pk / n1,
                        "page_over_native_default": pk / nd, "same_output": same}
        if ("page einsum", name) in best:
            report[name]["page_einsum_s"] = best[("page einsum", name)][0]
        print(f"{name:14s}{n1:13.2f}s{nd:12.2f}s{pk:8.2f}s{pk / n1:10.1f}x{pk / nd:10.1f}x"
              f"{100 * kern / pk:10.0f}%  {same}")
    out = ROOT / "bench" / "results" / "wasm_models.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rounds": a.rounds, "models": report}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
