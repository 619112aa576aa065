"""The page's kernel pool in one run: each tool on 1 and 2 threads (--threads) in Chromium, and natively on the same
thread counts, interleaved, best of --rounds; ratios are 2 threads over 1, and page over native at equal threads.

    python bench/bench_web_threads.py [--threads 1,2] [--rounds 3] [--tools gemma,whisper,yolo,embed] [--json]

Work, the same on both sides (the page tools' modules, ember.wasm.tools, also run natively): Gemma 3 270M (Q4_K_M
GGUF, greedy, 32 new tokens after a ~100-token prompt: decode tok/s and prefill tok/s, the prompt over the time to
the first token; --tools chat: the same for SmolLM2-135M-Instruct, the chat demo), Whisper tiny.en on an 18 s
espeak-ng clip (seconds), YOLOv8s on bus.jpg (as PNG; seconds),
all-MiniLM-L6-v2 on 64 sentences (sentences/s), and with --tools ...,teach LoRA fine-tuning of Gemma 3 270M in the
text tool's teach mode (rank 8, 32-token blocks, TEACH_STEPS AdamW steps a run, adapters reset after each: training
steps/s; the losses must agree across thread counts). The page: one bare page of a `build-web` site per thread count,
each its own runtime (createEmber({threads})), alive side by side so rounds alternate. Natively: the kernels'
threads (set_threads) and BLAS's (threadpoolctl) at the same count. The machine's load average is printed.

--boost (root, Linux): on a machine shared with other jobs, the kernel's autogroup scheduling gives each session
one share of the CPUs whatever its thread count, so with two other busy sessions on 2 cores a second thread gets
nothing; --boost sets this benchmark's autogroups (this process's and the browser's) to nice -20 for the run, so
that the figures measure ember rather than the neighbours (whose share drops meanwhile).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_wasm_models import SPEECH  # noqa: E402  (~18 s at espeak-ng's 150 words/min)
from web_app import ARGS, CHROMIUM, Server  # noqa: E402

PROMPT = ("The river runs past the old mill and under the stone bridge, where the children of the village watch the "
          "boats go by in the long summer evenings. The miller's daughter keeps the ledger of the grain that comes "
          "in from the farms, and every autumn the carts line up along the road to the")
SENTENCES = [f"Sentence number {i} is about {w} and how it changes the way people live and work."
             for i, w in enumerate(["rivers", "bridges", "music", "science", "markets", "cities", "forests", "trains"] * 8)]
NEW_TOKENS = 32
TOOL_OF = {"gemma": "llama", "chat": "llama", "whisper": "whisper", "yolo": "yolo", "embed": "embed",
           "teach": "llama"}
DEMO_OF = {"chat": "demo:smollm2-135m-instruct"}  # the page's model id where a tool's model is not its first demo
FOLDER_OF = {"gemma": "gemma-*", "teach": "gemma-*", "chat": "smollm2-*", "whisper": "whisper-*",
             "yolo": "yolov8s-*", "embed": "all-MiniLM-*"}
TEACH = {"teach": "train", "steps": 4, "rank": 8, "block": 32, "lr": 2e-3, "seed": 0}
TEACH_STEPS = TEACH["steps"]

PAGE_RUN = """async ({tool, prompt, n, sentences, teach}) => {
  const e = window.__e, t0 = performance.now();
  if (tool === 'gemma' || tool === 'chat') {
    let first = null;
    const g = await e.generate(prompt, {temperature: 0, max_new_tokens: n}, () => { first = first ?? performance.now(); });
    return {decode_tok_s: g.tokens_per_s, prefill_tok_s: g.prompt_tokens.length / ((first - t0) / 1000),
            tokens: g.tokens};
  }
  if (tool === 'teach') { const r = await e.teach(prompt, teach); await e.teachReset();
                          return {steps_s: r.steps_per_s, losses: r.losses}; }
  // (the encoded file in hand before the clock starts, as natively: fetching it from this bench's server is no part
  // of the tool's work)
  if (tool === 'whisper') { const blob = await (await fetch('hub/speech.wav')).blob(), t1 = performance.now();
                            const r = await e.transcribe(blob); return {s: (performance.now() - t1) / 1000, text: r.text}; }
  if (tool === 'yolo') { const blob = await (await fetch('hub/bus.png')).blob(), t1 = performance.now();
                         const r = await e.detect(blob); return {s: (performance.now() - t1) / 1000, boxes: r.length}; }
  const v = await e.embed(sentences);
  return {sentences_s: sentences.length / ((performance.now() - t0) / 1000), n: v.length}; }"""


def build(tmp: Path, tools) -> tuple[Path, Path]:
    from PIL import Image

    from ember.models.yolo.fetch import ensure_file
    from ember.wasm.serve import build_site, demo_models
    from ember.wasm.tools.llama import cached_gemma_demo, cached_smollm2_demo
    models = {k: v for k, v in demo_models(extra=False).items() if k in ("whisper", "yolo", "embed")}
    if "gemma" in tools or "teach" in tools:
        models["llama"] = [cached_gemma_demo()]
    if "chat" in tools:
        models["llama"] = models.get("llama", []) + [cached_smollm2_demo()]
    site = build_site(tmp / "site", models=models, quiet=True)
    hub = tmp / "hub"
    hub.mkdir()
    raw = tmp / "raw.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), SPEECH], check=True)
    subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(hub / "speech.wav")], check=True)
    with Image.open(ensure_file("bus.jpg")) as im:
        im.convert("RGB").save(hub / "bus.png")
    return site, hub


class Native:
    """The page tools' modules in this process (the same load and run code as the page's worker)."""

    def __init__(self, site: Path, hub: Path, tools):
        from ember.wasm import tools as T
        self.mods, self.hub = {}, hub
        for t in tools:
            mod = T.get(TOOL_OF[t])
            folder = next((site / "models").glob(FOLDER_OF[t]))
            mod.load(str(folder), "cpu")
            self.mods[t] = mod

    def run(self, tool: str) -> dict:
        # (the encoded file in memory before the clock starts, as the page's blob)
        data = (self.hub / {"whisper": "speech.wav", "yolo": "bus.png"}[tool]).read_bytes() \
            if tool in ("whisper", "yolo") else None
        mod, t0 = self.mods[tool], time.perf_counter()
        if tool in ("gemma", "chat"):
            first = []
            r = _drive(mod.run(PROMPT, {"temperature": 0, "max_new_tokens": NEW_TOKENS},
                                    lambda *a: first or first.append(time.perf_counter())))
            return {"decode_tok_s": r["tokens_per_s"], "prefill_tok_s": len(r["prompt_tokens"]) / (first[0] - t0),
                    "tokens": r["tokens"]}
        if tool == "teach":
            r = _drive(mod.run(PROMPT, dict(TEACH)))
            _drive(mod.run(None, {"teach": "reset"}))
            return {"steps_s": r["steps_per_s"], "losses": r["losses"]}
        if tool == "whisper":
            r = _drive(mod.run(data, {}))
            return {"s": time.perf_counter() - t0, "text": r["text"]}
        if tool == "yolo":
            r = _drive(mod.run(data, {}))
            return {"s": time.perf_counter() - t0, "boxes": len(r["detections"])}
        r = _drive(mod.run(SENTENCES, {}))
        return {"sentences_s": len(SENTENCES) / (time.perf_counter() - t0), "n": r["count"]}


def _drive(coro):
    """Run a tool's coroutine to its end here (Playwright's sync API holds this thread's event loop; the tools only
    await asyncio.sleep(0), their checkpoints)."""
    try:
        while True:
            coro.send(None)
    except StopIteration as done:
        return done.value


def threads_natively(n: int):
    from threadpoolctl import threadpool_limits

    from ember.backends.cpu_matmul import native_kernels
    k = native_kernels()
    if k is not None:
        k.set_threads(n)
    return threadpool_limits(n)


def boost(pids, nice: int = -20):
    """Set the autogroup nice of each process in `pids` (see --boost); quietly nothing where it cannot."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as f:
                f.write(str(nice))
        except OSError:
            pass


def browser_pids() -> list[int]:
    from bench_web_gemma_memory import chromium_processes
    return [p["pid"] for p in chromium_processes()]


BETTER = {"decode_tok_s": max, "prefill_tok_s": max, "sentences_s": max, "steps_s": max, "s": min}


def best(runs: list[dict]) -> dict:
    return {k: f(r[k] for r in runs) for k, f in BETTER.items() if k in runs[0]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tools", default="gemma,whisper,yolo,embed")
    ap.add_argument("--boost", action="store_true", help="this run's autogroups at nice -20 (see above)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    counts, tools = [int(n) for n in a.threads.split(",")], a.tools.split(",")
    if "chat" in tools and {"gemma", "teach"} & set(tools):
        ap.error("--tools: chat and gemma/teach share the text tool (one model at a time): run them separately")
    if a.boost:
        boost(["self"])
    from playwright.sync_api import sync_playwright
    page_runs = {n: {t: [] for t in tools} for n in counts}
    native_runs = {n: {t: [] for t in tools} for n in counts}
    same = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="ember-bench-threads-") as tmp:
        tmp = Path(tmp)
        site, hub = build(tmp, tools)
        server = Server(site, hub)
        native = Native(site, hub, tools)
        profile = tmp / "profile"
        try:
            with sync_playwright() as pw:
                ctx = pw.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                            args=ARGS)
                pages = {}
                if a.boost:
                    ctx.new_page().close()  # (its renderer and the browser's processes exist now)
                for n in counts:
                    p = pages[n] = ctx.new_page()
                    p.set_default_timeout(3_600_000)
                    p.goto(server.url + "config.json")
                    got = p.evaluate("""async (threads) => { const m = await import('./ember.js');
                        window.__e = await m.createEmber({device: 'cpu', threads});
                        return [__e.threads, __e.threadsReason]; }""", n)
                    if got[0] != n:
                        raise SystemExit(f"page asked for {n} threads runs {got[0]}: {got[1]}")
                    if a.boost:
                        boost(browser_pids())
                    for t in tools:
                        p.evaluate("async ([tool, id]) => __e.loadModel(tool, id)", [TOOL_OF[t], DEMO_OF.get(t, "demo")])
                args = {"prompt": PROMPT, "n": NEW_TOKENS, "sentences": SENTENCES, "teach": TEACH}
                for r in range(a.rounds + 1):  # round 0 warms up (first runs compile, allocate, fill caches)
                    for t in tools:
                        for n in counts:
                            page = pages[n].evaluate(PAGE_RUN, {"tool": t, **args})
                            with threads_natively(n):
                                nat = native.run(t)
                            if r:
                                page_runs[n][t].append(page)
                                native_runs[n][t].append(nat)
                            for k in ("tokens", "text", "boxes", "n", "losses"):
                                if k in page:
                                    same.setdefault(t, set()).add(json.dumps(page[k]))
                    loads.append(os.getloadavg()[0])
                ctx.close()
        finally:
            server.close()
            shutil.rmtree(profile, ignore_errors=True)
    if a.boost:
        boost(["self"], 0)
    res = {"threads": counts, "rounds": a.rounds, "boost": a.boost, "loadavg_1min": [round(x, 2) for x in loads],
           "page": {n: {t: best(page_runs[n][t]) for t in tools} for n in counts},
           "native": {n: {t: best(native_runs[n][t]) for t in tools} for n in counts},
           "same_result_every_thread_count": {t: len(v) == 1 for t, v in same.items()}}
    lo, hi = counts[0], counts[-1]
    res["ratios"] = {}
    for t in tools:
        for k in res["page"][lo][t]:
            p1, p2, n2 = res["page"][lo][t][k], res["page"][hi][t][k], res["native"][hi][t][k]
            speed = (p2 / p1) if k != "s" else (p1 / p2)  # > 1: faster on more threads
            page_native = (p2 / n2) if k != "s" else (p2 / n2)  # throughput ratio, or time ratio for "s"
            res["ratios"][f"{t} {k}"] = {f"page {hi}/{lo} threads": round(speed, 2),
                                         f"page/native at {hi} threads" + (" (time)" if k == "s" else ""): round(page_native, 2),
                                         f"native {hi}/{lo} threads": round((res["native"][hi][t][k] / res["native"][lo][t][k])
                                                                           ** (1 if k != "s" else -1), 2)}
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"load average (1 min) during the run: {res['loadavg_1min']}")
    print(f"{'metric':28s} " + " ".join(f"{'page ' + str(n):>10s}" for n in counts) + " "
          + " ".join(f"{'native ' + str(n):>10s}" for n in counts))
    for t in tools:
        for k in res["page"][lo][t]:
            print(f"{t + ' ' + k:28s} " + " ".join(f"{res['page'][n][t][k]:10.2f}" for n in counts) + " "
                  + " ".join(f"{res['native'][n][t][k]:10.2f}" for n in counts))
    for name, r in res["ratios"].items():
        print(f"{name:28s} " + ", ".join(f"{k} {v}" for k, v in r.items()))
    print(f"same result on every thread count: {res['same_result_every_thread_count']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
