"""The quantized matmul and fused attention WGSL kernels compiled by the browser (Chromium's Tint, on
SwiftShader here) rather than wgpu's naga: q8_0, q4_0, q4_k and q6_k blocks (decode and prefill
shapes) against the host dequantize-then-matmul, and the flash attention kernel against the composed
one, in the page. Small shapes: SwiftShader is slow."""
from __future__ import annotations

import json

from test_webgpu_browser import page, run_python  # noqa: F401  (the module-scoped page fixture)

CODE = """
import json
import numpy as np
import ember
import ember.nn.functional as F
from ember.quant import QTensor
from ember.webgpu import init_async
await init_async()
be = ember.device("webgpu").backend
rng = np.random.default_rng(0)
errs = {}
with ember.no_grad():
    for qt in ("q8_0", "q4_0", "q4_k", "q6_k"):
        k = 256 if qt.endswith("k") else 96
        q = QTensor.quantize(rng.standard_normal((9, k)).astype(np.float32), qt)
        for m in (1, 40):
            x = rng.standard_normal((m, k)).astype(np.float32)
            want = x.astype(np.float64) @ q.numpy().T
            got = q.matmul_t(ember.tensor(x, device="webgpu")).numpy()
            errs[f"{qt} m={m}"] = float(np.abs(got - want).max() / np.abs(want).max())
    qq, kk, vv = (ember.tensor(rng.standard_normal(s).astype(np.float32), device="webgpu")
                  for s in ((1, 2, 3, 40), (1, 2, 70, 40), (1, 2, 70, 24)))
    mask = ember.tensor(rng.standard_normal((3, 70)).astype(np.float32), device="webgpu")
    out = {}
    for kern in ("composed", "flash"):
        with ember.kernels.tuned("flash_attention", "webgpu", mode=kern):
            out[kern] = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).numpy()
    errs["flash attention"] = float(np.abs(out["flash"] - out["composed"]).max())
json.dumps(errs)
"""


def test_quant_and_flash_kernels_in_the_page(page):  # noqa: F811
    errs = json.loads(run_python(page, CODE))
    assert len(errs) == 9, errs
    bad = {k: v for k, v in errs.items() if not v < 1e-5}
    assert not bad, bad
