"""Quantization and GGUF inside Pyodide (numpy 2.0.2, wasm32): same bytes as CPython, files round-trip."""
from __future__ import annotations

import base64

import numpy as np

from ember.ggml import codec
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401  (fixtures)

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "F16", "BF16"]

SNIPPET = """
import base64, io, os, time
import numpy as np
from ember.ggml import codec
from ember.quant import QTensor, qmatmul
from ember.io import gguf as eg
x = (np.random.default_rng(3).standard_normal((8, 512)) * 3).astype(np.float32)
types = {types!r}
result = {{"quant": {{t: base64.b64encode(codec.quantize(x, t).tobytes()).decode() for t in types}}}}
q = QTensor.quantize(x, "q4_k")
blob = eg.dumps({{"q": q, "f": x}}, metadata={{"a": [1, 2], "s": "x"}})
with open("/tmp/t.gguf", "wb") as f:  # from a file in the emscripten FS (memmap or plain reads)
    f.write(blob)
loaded = eg.load("/tmp/t.gguf")
result["roundtrip"] = (bool(np.array_equal(loaded["f"].numpy(), x)) and bool(np.array_equal(loaded["q"].data, q.data))
                       and eg.metadata(blob) == {{"a": [1, 2], "s": "x"}})
w = np.random.default_rng(4).standard_normal((1024, 1024)).astype(np.float32)
raw = codec.quantize(w, "q4_0")
xv = np.ones((1, 1024), np.float32)
t = time.perf_counter(); y = qmatmul(xv, raw, "q4_0", w.shape); result["q4_0_matvec_1024_ms"] = 1e3 * (time.perf_counter() - t)
t = time.perf_counter(); xv @ w.T; result["f32_matvec_1024_ms"] = 1e3 * (time.perf_counter() - t)
result["matvec_close"] = bool(np.allclose(y, xv @ codec.dequantize(raw, "q4_0", w.shape).T, rtol=1e-4, atol=1e-3))
"""


def test_quantize_in_pyodide_matches_cpython(pyodide_session):
    out = pyodide_session.run(SNIPPET.format(types=TYPES), timeout=300)["result"]
    x = (np.random.default_rng(3).standard_normal((8, 512)) * 3).astype(np.float32)
    for t in TYPES:
        assert base64.b64decode(out["quant"][t]) == codec.quantize(x, t).tobytes(), t
    assert out["roundtrip"] and out["matvec_close"]
    print(f"pyodide: q4_0 1024x1024 matvec {out['q4_0_matvec_1024_ms']:.1f} ms, "
          f"f32 {out['f32_matvec_1024_ms']:.1f} ms")
