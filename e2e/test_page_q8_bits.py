"""The page's quantized products in Chromium give the desktop's bits: the kernel pool's modules (relaxed SIMD, which
Chromium ships and Node 20 runs only behind a flag, and plain SIMD128) load in a worker as the page loads them
(web/pool.js), and ember_q8_matmul's outputs for every GGML type with a q8 kernel, on 1 and 2 threads, equal
ember.backends.cpu_q8dot.q8_matmul_numpy's (numpy's integer sums and the kernels' float order), computed here.

The cases reach each of the kernels' paths: one activation row (decode: q8dot.c's four-blocks-a-vector loop, with
fewer than four blocks left at a row's end) and more (prefill's: up to four rows a pass, and the rest), row counts that are and are not multiples
of 4 and big enough to be split between threads, and Q8_0 levels of -128, which llama.cpp never writes but a file
may hold (the relaxed build moves x's sign onto the levels by complementing, which must not overflow), every
kind of half as a block's scale (the kernels convert them four at a time), and Q5_0 blocks expanded where they lie
into the pool's bytes layout (ember_q8_expand), whose products give Q5_0's bits."""
from __future__ import annotations

import base64
import shutil

import numpy as np
import pytest
from web_app import ARGS, CHROMIUM, Server

from ember.backends import cpu_q8dot
from ember.backends.cpu_pool import BYTES_LAYOUT, POOL_MODULE, POOL_RELAXED_MODULE
from ember.ggml import types as T
from ember.ggml.codec import quantize

WEB = POOL_MODULE.parents[2] / "web"

WORKER = r"""
import { startPool, attachPool, relaxedSimd } from "./pool.js";
onmessage = async (ev) => {
  try {
    const out = {relaxed: relaxedSimd()};
    for (const name of ["plain.wasm", "relaxed.wasm"]) {
      const module = await WebAssembly.compileStreaming(fetch(name));
      const pool = await startPool({threads: 2, module,
        spawn: () => new Worker(new URL("pool_worker.js", import.meta.url), {type: "module"})});
      if (pool.reason) throw new Error(pool.reason);
      const at = await attachPool({memory: pool.memory, module, layout: pool.layout, threads: 2, heap: () => null});
      const ex = at.exports;
      out[name] = [];
      for (const c of ev.data) {
        const w = Uint8Array.from(atob(c.w), (ch) => ch.charCodeAt(0));
        const x = Uint8Array.from(atob(c.x), (ch) => ch.charCodeAt(0));
        const wat = pool.arenaBase, xat = wat + Math.ceil(c.stored / 64) * 64 + 64;
        const yat = xat + x.length + 64, actat = yat + 4 * c.m * c.n + 64;
        at.grow(actat + 16 * c.m * c.k + 65536);
        const u8 = new Uint8Array(pool.memory.buffer);
        u8.set(w, wat);
        u8.set(x, xat);
        if (c.expand && ex.ember_q8_expand(c.expand, w.length / 22, wat, wat) !== 0) throw new Error("expand");
        const ys = [];
        for (const threads of [1, 2]) {
          at.setActive(threads);
          const rc = ex.ember_q8_matmul(c.type, c.m, c.n, c.k, wat, xat, c.k, yat, c.n, actat);
          if (rc !== 0) throw new Error(`rc ${rc} for ${JSON.stringify([c.type, c.m, c.n, c.k])}`);
          ys.push(btoa(String.fromCharCode(...new Uint8Array(pool.memory.buffer, yat, 4 * c.m * c.n))));
        }
        out[name].push(ys);
      }
      pool.stop();
    }
    postMessage(out);
  } catch (e) { postMessage({error: String(e.stack || e)}); }
};
"""

PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
window.run = (cases) => new Promise((resolve) => {
  const w = new Worker("worker.js", {type: "module"});
  w.onmessage = (ev) => resolve(ev.data);
  w.postMessage(cases);
});
</script>"""


def _cases():
    rng = np.random.default_rng(21)
    cases = []
    for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"):
        t = T.get(name)
        for m, n, blocks in ((1, 7, 5), (1, 300, 3 if t.block_size == 256 else 20), (3, 9, 2), (1, 4, 1), (6, 5, 7)):
            k = blocks * t.block_size
            w = quantize((rng.standard_normal((n, k)) * rng.uniform(0.2, 3, (n, 1))).astype(np.float32), t)
            if name == "Q8_0":  # a level of -128 in some blocks (bytes 2..33 of each 34)
                flat = w.reshape(-1, 34)
                flat[::3, 2 + rng.integers(0, 32, len(flat[::3]))] = 0x80
            x = (rng.standard_normal((m, k)) * 2).astype(np.float32)
            x[:, rng.integers(0, k, 3)] = 0.0
            if t.block_size == 256 and blocks > 2:  # a block of x all zeros (Q8_K's scale 0)
                x[:, :256] = 0.0
            cases.append({"name": name, "type": t.id, "m": m, "n": n, "k": k, "w": w, "x": x})
            if name == "Q5_0":  # the pool's bytes layout of Q5_0 (expanded where it lies): Q5_0's bits
                cases.append({**cases[-1], "expand": t.id, "type": BYTES_LAYOUT[t.id][0]})
    # every kind of half as a block's scale (and min: Q4_1, Q4_K), at the offsets the type keeps them
    halves_at = {"Q8_0": (0,), "Q4_1": (0, 2), "Q4_K": (0, 2), "Q6_K": (208,)}
    for name, m in (("Q8_0", 1), ("Q4_1", 1), ("Q8_0", 2), ("Q4_K", 1), ("Q6_K", 1)):
        t = T.get(name)
        n, k = len(SPECIAL_HALVES), 5 * t.block_size
        w = quantize(rng.standard_normal((n, k)).astype(np.float32), t)
        blocks = w.reshape(n, 5, t.type_size)
        for i, h in enumerate(SPECIAL_HALVES):
            for j, at in enumerate(halves_at[name]):
                blocks[i, (i + 2 * j) % 5, at:at + 2] = np.frombuffer(np.uint16(h).tobytes(), np.uint8)
        x = (rng.standard_normal((m, k)) * 2).astype(np.float32)
        cases.append({"name": name, "type": t.id, "m": m, "n": n, "k": k, "w": w, "x": x})
    return cases


# subnormals, the smallest and largest normals, +-0, +-inf, NaN, and a few ordinary halves
SPECIAL_HALVES = (0x0001, 0x03FF, 0x0400, 0x7BFF, 0x8000, 0x0000, 0x7C00, 0xFC00, 0x7E00, 0x3C00, 0xB555, 0x2E66)


@pytest.fixture(scope="module")
def kernel_page(tmp_path_factory, playwright_session):
    root = tmp_path_factory.mktemp("q8page")
    for f in ("pool.js", "pool_worker.js"):
        shutil.copy(WEB / f, root / f)
    shutil.copy(POOL_MODULE, root / "plain.wasm")
    shutil.copy(POOL_RELAXED_MODULE, root / "relaxed.wasm")
    (root / "worker.js").write_text(WORKER)
    (root / "index.html").write_text(PAGE)
    server = Server(root, root)
    browser = playwright_session.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page()
    page.goto(server.url + "index.html")
    yield page
    browser.close()
    server.close()


def test_the_page_q8_products_are_the_desktops_bits(kernel_page):
    cases = _cases()
    got = kernel_page.evaluate("(cases) => run(cases)", [
        {"type": c["type"], "m": c["m"], "n": c["n"], "k": c["k"], "w": base64.b64encode(c["w"].tobytes()).decode(),
         "x": base64.b64encode(c["x"].tobytes()).decode(), "expand": c.get("expand", 0),
         "stored": c["w"].size // 22 * 34 if c.get("expand") else c["w"].size} for c in cases])
    assert "error" not in got, got.get("error")
    assert got["relaxed"], "Chromium validates relaxed SIMD (the page's usual module)"
    for module in ("plain.wasm", "relaxed.wasm"):
        for c, ys in zip(cases, got[module]):
            with np.errstate(invalid="ignore", over="ignore"):  # (the special scales' inf and NaN)
                want = cpu_q8dot.q8_matmul_numpy(c["x"], c["w"], c["name"], c["n"])
            for threads, y in zip((1, 2), ys):
                page = np.frombuffer(base64.b64decode(y), np.float32).reshape(c["m"], c["n"])
                nan = np.isnan(want)  # (a NaN's sign and payload are the engine's: only where they are is compared)
                assert np.array_equal(np.isnan(page), nan), (module, c["name"], threads)
                assert page[~nan].tobytes() == want[~nan].tobytes(), (
                    module, c["name"], c["m"], c["n"], c["k"], threads, float(np.abs(page - want)[~nan].max()))
