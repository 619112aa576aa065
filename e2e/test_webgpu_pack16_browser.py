"""Packed 16-bit storage (two float16 / bfloat16 per u32 word, backend.set_pack16) compiled by Chromium's Tint
and run on SwiftShader, which has no shader-f16 (the case packing is for: many browsers' adapters): elementwise
(one pass, a word per thread), matmul (vec4 and tiled), row kernels (f32 words packed a word per thread), the
atomic-store form they replace, and attention, against the page's own numpy backend in the same dtype."""
from __future__ import annotations

import json

from test_webgpu_browser import page, run_python  # noqa: F401  (the module-scoped page fixture)

CODE = """
import json
import numpy as np
import ember
import ember.nn.functional as F
from ember.webgpu import init_async
await init_async()
be = ember.device("webgpu").backend
be.set_pack16(True)
rng = np.random.default_rng(0)
host = {"x": rng.standard_normal((5, 37)) * 3, "w": rng.standard_normal((37, 21)), "v": rng.standard_normal(37),
        "m": rng.standard_normal((9, 36)), "n": rng.standard_normal((36, 12)),
        "q": rng.standard_normal((1, 2, 3, 16)), "k": rng.standard_normal((1, 2, 11, 16))}

def ops(dev, dt):
    T = {k: ember.tensor(v.astype(np.float32), device=dev).to(dt) for k, v in host.items()}
    x, w, v = T["x"], T["w"], T["v"]
    return {"add": x + v, "mul_exp": (x * 0.5).exp(), "cast_back": x.float().to(dt), "offset view": x[1:, 3:] - 1,
            "matmul tiled": x @ w, "matmul vec4": T["m"] @ T["n"], "linear": F.linear(T["m"], T["n"].t()),
            "sum": x.sum(1), "softmax": x.softmax(-1), "rms_norm": F.rms_norm(x, (37,), v),
            "layer_norm": F.layer_norm(x, (37,), v, v), "gather": x[ember.tensor([4, 0, 2], device=dev)],
            "attention": F.scaled_dot_product_attention(T["q"], T["k"], T["k"], is_causal=True)}

out = {"has_f16": be.has_f16, "words": {}, "err": {}, "same_as_atomic": {}}
with ember.no_grad():
    for name in ("float16", "bfloat16"):
        dt = getattr(ember, name)
        out["words"][name] = be.words[dt][0]
        cpu = {k: t.float().numpy() for k, t in ops("cpu", dt).items()}
        gpu = {k: t.float().numpy() for k, t in ops("webgpu", dt).items()}
        be.pipelines.word_stores = False
        atomic = {k: t.float().numpy() for k, t in ops("webgpu", dt).items()}
        be.pipelines.word_stores = True
        for k in cpu:
            scale = max(float(np.abs(cpu[k]).max()), 1.0)
            out["err"][f"{name} {k}"] = float(np.abs(gpu[k] - cpu[k]).max() / scale)
            out["same_as_atomic"][f"{name} {k}"] = bool(np.array_equal(gpu[k], atomic[k]))
json.dumps(out)
"""

ULP = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # one unit in the last place at 1.0


def test_packed_float16_and_bfloat16_in_the_page(page):  # noqa: F811
    got = json.loads(run_python(page, CODE))
    assert got["words"] == {"float16": "f16" if got["has_f16"] else "f16x2", "bfloat16": "bf16x2"}
    assert len(got["err"]) == 26
    # accumulation order and exp/rsqrt in f32 differ from numpy's by f32 ulps: at most a few 16-bit roundings
    bad = {k: v for k, v in got["err"].items() if not v <= 4 * ULP[k.split()[0]]}
    assert not bad, bad
    assert all(got["same_as_atomic"].values()), got["same_as_atomic"]
