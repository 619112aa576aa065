"""ember.io inside Pyodide: the same files load to the same bits from bytes and from the in-memory
filesystem (where mmap may be missing and reads are the fallback), and ember's own files round-trip."""
import base64
import io

import safetensors.torch
import torch
from pyodide_runner import pyodide_dist, pyodide_session
from test_io_helpers import dtype_name, storage_bits, torch_tensors

SNIPPET = """
import base64, ember.io
st_raw, pt_raw = base64.b64decode({st!r}), base64.b64decode({pt!r})
with open("/tmp/w.safetensors", "wb") as f:
    f.write(st_raw)

def summary(tensors):
    return {{k: [t.dtype.name, list(t.shape), t._storage_numpy().tobytes().hex()] for k, t in tensors.items()}}

out = {{"st_bytes": summary(ember.io.load(st_raw)), "st_path": summary(ember.io.load("/tmp/w.safetensors")),
        "st_reads": summary(ember.io.safetensors.load("/tmp/w.safetensors", mmap=False)),
        "pt": summary(ember.io.load(pt_raw))}}
ember.io.save(ember.io.load(st_raw), "/tmp/o.npz", metadata={{"a": "b"}})
ember.io.save(ember.io.load(pt_raw), "/tmp/o.safetensors")
out["npz"] = summary(ember.io.load("/tmp/o.npz"))
out["npz_meta"] = ember.io.metadata("/tmp/o.npz")
out["st_written"] = summary(ember.io.load("/tmp/o.safetensors"))
try:
    ember.io.load(st_raw[:40])
except ember.io.FormatError as e:
    out["error"] = str(e)
result = out
"""


def _expect(tensors):
    return {k: [dtype_name(t), list(t.shape), storage_bits(t).tobytes().hex()] for k, t in tensors.items()}


def test_io_in_pyodide_matches_torch(pyodide_session):
    ref = torch_tensors(3)
    base = torch.randn(3, 4)
    pt_ref = {"t": base.t(), "v": base[1:, 1:], "h": torch.randn(5).bfloat16()}
    b = io.BytesIO()
    torch.save(pt_ref, b)
    code = SNIPPET.format(st=base64.b64encode(safetensors.torch.save(ref)).decode(),
                          pt=base64.b64encode(b.getvalue()).decode())
    out = pyodide_session.run(code, timeout=120)["result"]
    for key in ("st_bytes", "st_path", "st_reads", "npz"):
        assert out[key] == _expect(ref), key
    assert out["pt"] == out["st_written"] == _expect(pt_ref)
    assert out["npz_meta"] == {"a": "b"}
    assert out["error"].startswith("ember: <40 bytes>: header length")
