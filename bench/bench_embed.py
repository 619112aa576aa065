"""all-MiniLM-L6-v2 sentence embeddings per second: ember (cpu, and webgpu when it works here) vs
sentence-transformers on torch CPU, the same real weights and the same texts in one run (ratio reported);
with --page, also in the web app's runtime (Chromium, Pyodide in its worker, ember.js's embed()) on cpu and/or
webgpu (SwiftShader here: a software adapter), the bundled demo of a `build-web` site.

    python bench/bench_embed.py [--sentences 256] [--batch-size 32] [--repeats 3] [--devices cpu,webgpu]
                                [--page cpu,webgpu] [--page-sentences 64] [--json]

Texts are sentences of CPython's documentation (pydoc_data.topics); each engine is timed `--repeats` times,
interleaved, best run reported (noise only slows a run). The machine may be shared: read the ratio.
"""
from __future__ import annotations

import argparse
import json
import re
import time

import numpy as np


def sentences(n):
    import pydoc_data.topics as topics
    text = " ".join(topics.topics[k] for k in sorted(topics.topics))
    s = [" ".join(x.split()) for x in re.split(r"(?<=[.!?])\s+", text)]
    return [x for x in s if 20 < len(x) < 400][:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--page", default="", help="page devices to time too (cpu, webgpu), e.g. --page cpu")
    ap.add_argument("--page-sentences", type=int, default=64, help="texts embedded in the page (it is slower)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from ember.models.bert.fetch import fetch_minilm
    from ember.models.bert.sentence import SentenceEncoder
    folder = fetch_minilm(progress=True)
    texts = sentences(a.sentences)
    engines = {}
    try:
        import torch
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(str(folder), device="cpu")
        engines["sentence-transformers (torch cpu)"] = lambda: st.encode(texts, batch_size=a.batch_size)
        threads = torch.get_num_threads()
    except ImportError:
        threads = None
    for dev in a.devices.split(","):
        enc = SentenceEncoder(folder, device=dev, batch_size=a.batch_size)
        enc.encode(texts[:a.batch_size])  # warm-up: kernels compiled, buffers allocated
        engines[f"ember {dev}"] = (lambda e: lambda: e.encode(texts))(enc)
    best = {k: float("inf") for k in engines}
    outs = {}
    for _ in range(a.repeats):
        for name, fn in engines.items():
            t = time.perf_counter()
            outs[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t)
    rate = {k: len(texts) / v for k, v in best.items()}
    ref = next((k for k in rate if k.startswith("sentence")), None)
    res = {"sentences": len(texts), "batch_size": a.batch_size, "torch_threads": threads,
           "sentences_per_s": {k: round(v, 1) for k, v in rate.items()}}
    if ref:
        res["ratio_vs_sentence_transformers"] = {k: round(v / rate[ref], 3) for k, v in rate.items() if k != ref}
        res["min_cosine"] = {k: float(((v * outs[ref]).sum(-1)).min()) for k, v in outs.items() if k != ref}
    if a.page:
        res["page"] = page_rates(texts[:a.page_sentences], a.batch_size, a.repeats, a.page.split(","), outs.get(ref))
        if ref:  # the page's texts are the first --page-sentences of the native ones: rates are comparable
            res["page_ratio_vs_sentence_transformers"] = {
                d: round(r["sentences_per_s"] / rate[ref], 3) for d, r in res["page"].items()}
        if "ember cpu" in rate:
            res["page_ratio_vs_ember_cpu"] = {d: round(r["sentences_per_s"] / rate["ember cpu"], 3)
                                              for d, r in res["page"].items()}
    print(json.dumps(res, indent=None if a.json else 1))


def page_rates(texts, batch_size, repeats, devices, ref=None) -> dict:
    """{device: {"sentences_per_s", "actual_device", "min_cosine" (vs ref rows)}} in Chromium: a `build-web` site
    with the MiniLM demo only, ember.js's embed() in batches of batch_size, best of `repeats` after a warm-up."""
    import sys
    import tempfile
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from playwright.sync_api import sync_playwright
    from web_app import ARGS, CHROMIUM, Server

    from ember.wasm.serve import build_site
    from ember.wasm.tools.embed import minilm_demo
    out = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        site = build_site(Path(tmp) / "site", models={"embed": minilm_demo()}, quiet=True)
        server = Server(site, Path(tmp))
        try:
            for dev in devices:
                ctx = pw.chromium.launch_persistent_context(str(Path(tmp) / f"profile-{dev}"), headless=True,
                                                            executable_path=CHROMIUM, args=ARGS)
                page = ctx.new_page()
                page.set_default_timeout(1_800_000)
                page.goto(server.url + "config.json")  # a bare page of the site, driven through ember.js
                r = page.evaluate("""async ([device, texts, bs, repeats]) => {
                    const e = await (await import('./ember.js')).createEmber({ device });
                    await e.loadModel('embed', 'demo');
                    await e.embed(texts.slice(0, bs));                       // warm-up
                    let best = Infinity, vecs;
                    for (let r = 0; r < repeats; r++) {
                      const t0 = performance.now(), got = [];
                      for (let i = 0; i < texts.length; i += bs) got.push(...(await e.embed(texts.slice(i, i + bs))));
                      best = Math.min(best, (performance.now() - t0) / 1000);
                      vecs = got;
                    }
                    return { s: best, device: e.device, vectors: vecs.map((v) => Array.from(v)) };
                }""", [dev, texts, batch_size, repeats])
                ctx.close()
                got = {"sentences_per_s": round(len(texts) / r["s"], 2), "actual_device": r["device"]}
                if ref is not None:
                    got["min_cosine"] = float((np.array(r["vectors"]) * ref[:len(texts)]).sum(-1).min())
                out[dev] = got
                print(f"page {dev}: {got}", file=sys.stderr, flush=True)  # a slow software adapter: say each as it ends
        finally:
            server.close()
    return out


if __name__ == "__main__":
    main()
