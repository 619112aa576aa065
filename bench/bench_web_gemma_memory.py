"""Gemma 3 270M (Q4_K_M GGUF) in the page, in Debian's Chromium: its memory with the weights and a KV cache at
--context tokens (2k), whether that memory stays bounded over a long generation, and (--webgpu) whether the
page's WebGPU device (SwiftShader here: `auto` picks the CPU, so `device=webgpu` is forced) gives the CPU's
tokens, with its tokens/s.

    python bench/bench_web_gemma_memory.py [--context 2048] [--rounds 2] [--threads N] [--webgpu] [--webgpu-tokens 4] [--json]

--threads: the page's kernel threads (1: no kernel pool, the weights in Pyodide's heap; 2 or more: in the pool's
shared memory once, web/pool.js); default: the page's own choice (the cores, at most 8).

Memory, measured three ways: the wasm heap (the worker's `wasm_memory_bytes`: it only grows, so it is the peak
the Python runtime has needed), the KV cache the run held (`kv_cache_bytes`, the positions kept: a sliding layer
keeps window - 1 of them), and the peak resident set of the Chromium renderer that runs the page and its worker (/proc, sampled every
0.2 s on a thread), plus the proportional set size summed over all of Chromium's processes (shared pages once). Bounded: --rounds generations that
each fill the context to --context tokens; the heap after the last must equal the heap after the first and the
renderer's peak must not grow past the load's. The figures go to stdout (the machine may be loaded: times are noisy).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))

MiB = 2**20
FILLER = ("The river runs past the old mill and under the stone bridge, where the children of the village "
          "watch the boats go by in the long summer evenings. ")


def _read(path: str, binary: bool = False):
    p = Path(path)
    return p.read_bytes() if binary else p.read_text()


def chromium_processes() -> list[dict]:
    """Chromium processes started below this one (Playwright's driver starts the browser): pid, type, VmHWM and
    VmRSS in bytes."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(_read(f"/proc/{d}/stat").rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            todo.append(c)
            try:
                cmd = _read(f"/proc/{c}/cmdline", binary=True).replace(b"\0", b" ").split()  # Chromium joins its argv
                status = dict(line.split(":", 1) for line in _read(f"/proc/{c}/status").splitlines() if ":" in line)
                exe = os.readlink(f"/proc/{c}/exe")  # a zygote's children run /proc/self/exe: ask the link
                pss = _read(f"/proc/{c}/smaps_rollup").split("\nPss:", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if "chrom" not in exe:
                continue
            kind = next((a.split(b"=", 1)[1].decode() for a in cmd if a.startswith(b"--type=")), "browser")
            hwm, rss = (int(status.get(k, "0 kB").split()[0]) * 1024 for k in ("VmHWM", "VmRSS"))
            out.append({"pid": c, "type": kind, "hwm": hwm, "rss": rss, "pss": int(pss) * 1024})
    return out


class PeakSampler:
    """The largest renderer's resident set, sampled every `every` s on a thread, and its VmHWM as read: the peak
    is the larger. (VmHWM alone is not enough here: on this VM it was seen to drop between two reads of one
    process, so something resets it.)"""

    def __init__(self, every: float = 0.2):
        import threading
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every):
        while not self._stop.wait(every):
            self.take()

    def take(self) -> int:
        """Sample now; -> the peak so far in bytes."""
        for p in chromium_processes():
            if p["type"] == "renderer":
                self.peak = max(self.peak, p["hwm"], p["rss"])
        return self.peak

    def close(self):
        self._stop.set()
        self._thread.join()


def pss_total() -> int:
    """The proportional set size of all Chromium processes now (shared pages counted once), in bytes."""
    return sum(p["pss"] for p in chromium_processes())


def prompt_of(tok, n_tokens: int) -> str:
    """A prompt of about n_tokens tokens (repeated prose: the model continues it)."""
    reps = max(1, n_tokens // len(tok.encode(FILLER, bos=False)))
    text = FILLER * reps
    while len(tok.encode(text, bos=True)) > n_tokens:
        text = text[: int(len(text) * 0.97)]
    return text


def generate(app, prompt: str, n: int) -> dict:
    app.page.eval_on_selector("#llama-output", "e => { delete e.dataset.json; }")
    app.generate(prompt, n, temperature=0, seed=0)
    r = app.wait_result("#llama-output", timeout_s=3600)
    if r is None:
        raise SystemExit(f"page: {app.message()}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=16, help="decoded after the prompt in each round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--webgpu", action="store_true")
    ap.add_argument("--webgpu-tokens", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from ember.models.gemma3.load import load_gguf
    from ember.wasm.tools.llama import cached_gemma_demo, kv_cache_bytes
    from playwright.sync_api import sync_playwright
    from web_app import App, site_page
    demo = cached_gemma_demo()
    if demo is None:
        raise SystemExit("needs the Gemma 3 270M GGUF (ember.models.gemma3.fetch)")
    model, tok = load_gguf(next(iter(demo["files"].values())))
    cfg = model.config
    prompt = prompt_of(tok, a.context - a.new_tokens)
    res = {"context": a.context, "threads": a.threads}
    query = "?device=cpu" + (f"&threads={a.threads}" if a.threads else "")
    with sync_playwright() as pw, site_page(pw, {"llama": [demo]}, query) as (app, server):
        peak = PeakSampler()
        try:
            res["renderer_peak_mib_booted"] = round(peak.take() / MiB)
            tiny = generate(app, "The capital of France is", 4)  # downloads and loads the model
            res["loaded"] = {"wasm_heap_mib": round(tiny["wasm_memory_bytes"] / MiB),
                             "renderer_peak_mib": round(peak.take() / MiB), "chromium_pss_mib": round(pss_total() / MiB)}
            res["status_line"] = app.page.inner_text("#picker-llama .model-status")
            res["device_line"] = app.page.inner_text("#picker-llama .device-line")
            rounds = []
            for _ in range(a.rounds):
                r = generate(app, prompt, a.new_tokens)
                pos = len(r["prompt_tokens"]) + len(r["tokens"]) - 1  # the last token is never fed
                per_layer = 2 * cfg.n_kv_heads * cfg.head_dim * 4     # float32 K and V bytes per position
                rounds.append({"positions": pos, "tokens_per_s": r["tokens_per_s"],
                               "kv_cache_mib": round(r["kv_cache_bytes"] / MiB, 2),
                               "kv_expected_mib": round(kv_cache_bytes(cfg, pos) / MiB, 2),
                               "kv_without_window_mib": round(pos * cfg.n_layers * per_layer / MiB, 2),
                               "wasm_heap_mib": round(r["wasm_memory_bytes"] / MiB),
                               "renderer_peak_mib": round(peak.take() / MiB), "chromium_pss_mib": round(pss_total() / MiB)})
        finally:
            peak.close()
        res["rounds"] = rounds
        res["stats_line"] = app.page.inner_text("#llama-stats")
        res["bounded"] = {"heap_same": rounds[-1]["wasm_heap_mib"] == rounds[0]["wasm_heap_mib"],
                          "renderer_peak_growth_mib": rounds[-1]["renderer_peak_mib"] - res["loaded"]["renderer_peak_mib"],
                          "kv_uses_window": all(r["kv_cache_mib"] == r["kv_expected_mib"] for r in rounds)}
        if a.webgpu:
            cpu = generate(app, "The capital of France is", a.webgpu_tokens)
            app.close()  # one page's heap at a time: the second model would double the renderer's memory
            gpu_app = App(pw, f"{server.url}?device=webgpu")
            try:
                gpu = generate(gpu_app, "The capital of France is", a.webgpu_tokens)
                res["webgpu"] = {"device": gpu_app.page.inner_text("#status"), "same_tokens": gpu["tokens"] == cpu["tokens"],
                                 "tokens": gpu["tokens"], "cpu_tokens": cpu["tokens"],
                                 "tokens_per_s": gpu["tokens_per_s"], "cpu_tokens_per_s": cpu["tokens_per_s"],
                                 "stats_line": gpu_app.page.inner_text("#llama-stats")}
            finally:
                gpu_app.close()
    print(json.dumps(res) if a.json else "\n".join(f"{k}: {v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
