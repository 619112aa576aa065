"""Web app benchmark in one run: page load, navigation start -> interactive (cold and warm cache, best of
--load-runs, against the same site without its precompiled bytecode), per-tool latency in the page (webgpu,
cpu) against the native Python API on the same machine, and the download size of the built site.

    python bench/bench_web.py [--devices cpu,webgpu] [--tools whisper,llama,yolo] [--webgpu-tools llama] [--site DIR]
    python bench/bench_web.py --devices cpu --tools "" --load-runs 5     # page load only
    python bench/bench_web.py --devices cpu --tools "" --load-runs 5 --against OLD_SITE   # and another build's,
                                                                         # interleaved in the same run

Inputs: an espeak-ng sentence (Whisper), "The for statement" greedy 32 tokens (Llama), bus.jpg re-encoded
as PNG (YOLO). Uses Debian's Chromium via Playwright, as the e2e tests do. Figures go to stdout as a table
and to bench/results/web.json.
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

from web_app import ARGS, CACHE, CHROMIUM, SPEECH, Server, seeded_llama_folder  # noqa: E402

PROMPT, N_TOKENS = "The for statement", 32


def inputs(tmp: Path, speech: str = SPEECH) -> tuple[Path, Path]:
    from PIL import Image

    from ember.models.yolo.fetch import ensure_file
    raw, wav, png = tmp / "raw.wav", tmp / "speech.wav", tmp / "bus.png"
    subprocess.run(["espeak-ng", "-w", str(raw), speech], check=True)
    subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)], check=True)
    with Image.open(ensure_file("bus.jpg")) as im:
        im.convert("RGB").save(png)
    return wav, png


def native(site: Path, tools, wav: Path, png: Path) -> dict:
    """Seconds per run through the Python API on the CPU (what the CLI does after loading), best of 2."""
    out = {}
    models = site / "models"
    if "whisper" in tools:
        from ember.models.whisper.load import load_whisper
        from ember.models.whisper.transcribe import transcribe
        m, _, tok = load_whisper(next(models.glob("whisper-*")))
        out["whisper"] = best(lambda: transcribe(m, tok, str(wav), timestamps=True))
    if "llama" in tools:
        from ember.models.common.generate import SamplingParams, generate
        from ember.models.llama.load import load_llama
        m, tok = load_llama(str(next(models.glob("llama-*"))))
        ids = tok.encode(PROMPT, bos=True)
        out["llama"] = best(lambda: list(generate(m, ids, N_TOKENS, SamplingParams(0.0, 0, 0.9, 1.0, 0), tok.eos_ids)))
    if "yolo" in tools:
        from ember.models.yolo.load import load_model
        from ember.models.yolo.predict import detect
        m = load_model(next(models.glob("yolov8s-*")) / "model.safetensors")
        out["yolo"] = best(lambda: detect(m, str(png)))
    return out


def best(fn, n=2) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


# A returning visitor's page once the site's service worker (when it has one) holds the build.
WAIT_OFFLINE_COPY = """async () => { const r = await navigator.serviceWorker.getRegistration(); if (!r) return false;
    for (const t0 = performance.now(); performance.now() - t0 < 60000; await new Promise((ok) => setTimeout(ok, 100)))
        if (r.active && r.active.state === 'activated') return true;
    return false; }"""


def page_load(pw, url: str, device: str, runs: int, server=None, site: Path | None = None) -> dict:
    """Page load, navigation start -> interactive (the UI usable and the worker ready for a first job; model
    weights load later, per tool): `runs` fresh profiles (cold: empty caches) each reloaded once (warm: HTTP
    cache, V8's code cache and the service worker's copy filled), best of each, with the boot stages of the best
    cold run (ms after navigation start: worker started, Pyodide booted, numpy + ember installed, imported,
    device picked). With the server and its site: "boot_bytes", what the cold load downloaded."""
    return page_loads(pw, [(url, server, site)], device, runs)[0]


def page_loads(pw, targets, device: str, runs: int) -> list[dict]:
    """page_load for several sites [(url, server, site)], interleaved run by run (the same machine load)."""
    cold, warm, sizes = ([[] for _ in targets] for _ in range(3))
    for _ in range(runs):
        for i, (url, server, site) in enumerate(targets):
            profile = tempfile.mkdtemp(prefix="ember-bench-")
            ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                page = ctx.new_page()
                before = len(server.requests) if server else 0
                for phase in (cold[i], warm[i]):
                    page.goto(f"{url}?device={device}")
                    page.wait_for_selector("body[data-ready=true]", timeout=600_000)
                    phase.append(page.evaluate("() => window.__emberStartup"))
                    if phase is cold[i]:
                        if server and site:
                            asked = {p.split("?")[0].lstrip("/") or "index.html" for p in server.requests[before:]}
                            sizes[i].append(sum((site / p).stat().st_size for p in asked if (site / p).is_file()))
                        page.evaluate(WAIT_OFFLINE_COPY)
            finally:
                ctx.close()
                shutil.rmtree(profile, ignore_errors=True)
    out = []
    for i in range(len(targets)):
        best = min(cold[i], key=lambda m: m["ready"])
        out.append({"load_cold_s": best["ready"] / 1000, "load_warm_s": min(m["ready"] for m in warm[i]) / 1000,
                    "cold_stages_ms": best, "load_runs": runs, **({"boot_bytes": min(sizes[i])} if sizes[i] else {})})
    return out


def plain_site(site: Path, dest: Path) -> Path:
    """The same site (hard links) with a config.json that names no precompiled bytecode or prefetch: the
    page as it booted before wasm/bytecode.py, the reference the load figures are a ratio against."""
    for p in site.rglob("*"):
        if p.is_file() and p.name != "config.json":
            (dest / p.relative_to(site)).parent.mkdir(parents=True, exist_ok=True)
            os.link(p, dest / p.relative_to(site))
    config = json.loads((site / "config.json").read_text())
    for key in ("stdlibURL", "pycacheURL", "bootURL", "prefetch"):  # (prefetch: what older builds name)
        config.pop(key, None)
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def in_page(pw, url: str, device: str, tools) -> dict:
    """Per-tool seconds per run, timed in the page around the JS API call (second run, after the model is
    loaded and warmed up). The inputs are served from the server's /hub/ folder (the bench's scratch folder)."""
    profile = tempfile.mkdtemp(prefix="ember-bench-")
    ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS)
    page = ctx.new_page()
    page.set_default_timeout(1_800_000)
    res = {}
    try:
        page.goto(f"{url}?device={device}")
        page.wait_for_selector("body[data-ready=true]")
        res["device"] = page.input_value("#device")
        page.goto(url + "config.json")  # a bare page of the site: one runtime, driven through ember.js
        page.evaluate(f"""async () => {{ const m = await import('./ember.js');
            window.__ember = await m.createEmber({{device: {json.dumps(device)}}}); }}""")
        for tool in tools:
            call = {"whisper": "e.transcribe(await (await fetch('hub/speech.wav')).blob())",
                    "llama": f"e.generate({json.dumps(PROMPT)}, {{temperature: 0, max_new_tokens: {N_TOKENS}}})",
                    "yolo": "e.detect(await (await fetch('hub/bus.png')).blob())"}[tool]
            page.evaluate(f"async () => window.__ember.loadModel({json.dumps(tool)}, 'demo')")
            for _ in range(2):  # the first run warms pipelines/caches; the second is reported
                res[tool] = page.evaluate(f"""async () => {{ const e = window.__ember; const t0 = performance.now();
                    await {call}; return (performance.now() - t0) / 1000; }}""")
    finally:
        ctx.close()
        shutil.rmtree(profile, ignore_errors=True)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="cpu,webgpu")
    ap.add_argument("--tools", default="whisper,llama,yolo")
    ap.add_argument("--webgpu-tools", default=None,
                    help="tools timed on webgpu (default: --tools; Chromium's software adapter needs minutes for "
                         "Whisper and more than 15 min for YOLOv8s on 2 cores)")
    ap.add_argument("--speech", default=SPEECH, help="the sentence espeak-ng speaks for Whisper (the page-speed figure: "
                    "an 18 s clip, e.g. bench/bench_wasm_models.py's SPEECH)")
    ap.add_argument("--site", default=None, help="an existing build-web folder (default: build one)")
    ap.add_argument("--load-runs", type=int, default=3, help="fresh profiles per page-load figure (best of)")
    ap.add_argument("--against", default=None, help="another build-web folder (e.g. main's), loaded interleaved with "
                    "this one (cpu); its cold/warm load and download size are reported beside")
    a = ap.parse_args(argv)
    tools, devices = [t for t in a.tools.split(",") if t], a.devices.split(",")
    from playwright.sync_api import sync_playwright

    from ember.wasm.serve import build_site, demo_models, site_size
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        site = Path(a.site) if a.site else None
        if site is None:
            models = demo_models(extra=False)  # one small demo per tool: the Llama demo on both sides (Gemma: bench_gemma.py)
            if "llama" not in models:
                d = seeded_llama_folder(CACHE / "llama-test")
                models["llama"] = {"id": "llama-test", "label": "test",
                                   "files": {n: d / n for n in ("config.json", "model.safetensors", "tokenizer.json")}}
            site = build_site(tmp / "site", models=models)
        wav, png = inputs(tmp, a.speech) if tools else (None, None)
        sizes = site_size(site)
        report = {"site_bytes": sizes, "native_cpu_s": native(site, tools, wav, png), "page": {}}
        server, plain = Server(site, tmp), Server(plain_site(site, tmp / "plain"), tmp)
        other = Server(Path(a.against), tmp) if a.against else None
        try:
            with sync_playwright() as pw:
                report["plain_load"] = page_load(pw, plain.url, "cpu", a.load_runs)
                for dev in devices:
                    dev_tools = a.webgpu_tools.split(",") if dev == "webgpu" and a.webgpu_tools else tools
                    targets = [(server.url, server, site)] + ([(other.url, other, Path(a.against))]
                                                              if other and dev == "cpu" else [])
                    loads = page_loads(pw, targets, dev, a.load_runs)
                    report["page"][dev] = {**loads[0], **in_page(pw, server.url, dev, dev_tools)}
                    if len(loads) > 1:
                        report["against"] = {"site": a.against, **loads[1]}
        finally:
            for s in (server, plain, other):
                if s:
                    s.close()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "web.json").write_text(json.dumps(report, indent=1))
    print(f"site: {sum(sizes.values()) / 1e6:.1f} MB total (" +
          ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v > 1e5) + ")")
    p = report["plain_load"]
    print(f"page load without precompiled bytecode (cpu, the reference): cold {p['load_cold_s']:.2f} s, "
          f"warm {p['load_warm_s']:.2f} s (best of {p['load_runs']})")
    for dev, r in report["page"].items():
        print(f"page load on {dev} (actual device {r['device']}): cold {r['load_cold_s']:.2f} s, warm {r['load_warm_s']:.2f} s "
              f"(best of {r['load_runs']}; {p['load_cold_s'] / r['load_cold_s']:.1f}x / {p['load_warm_s'] / r['load_warm_s']:.1f}x "
              f"faster than the reference); cold stages, ms after navigation start: {r['cold_stages_ms']}"
              + (f"; downloaded {r['boot_bytes'] / 1e6:.1f} MB" if "boot_bytes" in r else ""))
    if "against" in report:
        o = report["against"]
        print(f"page load of {o['site']} (cpu, interleaved): cold {o['load_cold_s']:.2f} s, warm {o['load_warm_s']:.2f} s, "
              f"downloaded {o.get('boot_bytes', 0) / 1e6:.1f} MB; stages {o['cold_stages_ms']}")
    print(f"{'tool':8s} {'native cpu':>11s} " + " ".join(f"{'page ' + d:>12s}" for d in report["page"]))
    for t in tools:
        print(f"{t:8s} {report['native_cpu_s'][t]:10.2f}s " +
              " ".join(f"{r[t]:11.2f}s" if t in r else f"{'-':>12s}" for r in report["page"].values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
