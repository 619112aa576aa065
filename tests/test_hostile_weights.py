"""Hostile weights containers: zip entries stored twice, zip bombs against the load budget,
npz headers with shapes that are not sizes, GGUF tensors of types ember cannot dequantize."""
import io
import struct
import zipfile

import gguf as gguf_py
import numpy as np
import pytest

import ember
from ember.io import gguf, npz
from ember.limits import budget


def _npy(a) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def _zip(entries, compression=zipfile.ZIP_STORED) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", compression) as z:
        for n, v in entries:
            z.writestr(n, v)
    return b.getvalue()


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_npz_member_stored_twice_is_refused():
    raw = _zip([("w.npy", _npy(np.zeros(2))), ("w.npy", _npy(np.ones(2)))])
    assert np.load(io.BytesIO(raw))["w"].tolist() == [1.0, 1.0]  # numpy: the last one silently wins
    with pytest.raises(ember.FormatError, match="zip entry 'w.npy' is stored twice"):
        npz.load(raw)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_torch_zip_entry_stored_twice_is_refused(tmp_path):
    import torch
    b = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, b)
    z = zipfile.ZipFile(io.BytesIO(b.getvalue()))
    entries = [(n, z.read(n)) for n in z.namelist()]
    raw = _zip(entries + [entries[0]])
    with pytest.raises(ember.FormatError, match="is stored twice"):
        ember.load(raw)


def test_npz_members_together_are_held_to_the_load_budget(monkeypatch):
    """Deflated zeros are ~1000x smaller than what they decompress to: each member is checked alone against
    the archive size (at most 1032x), and their sum against the budget (load_factor x size + allowance)."""
    members = [(f"m{i}.npy", _npy(np.zeros(1 << 18, np.float32))) for i in range(8)]  # 8 x 1 MiB
    raw = _zip(members, zipfile.ZIP_DEFLATED)
    assert len(raw) < 64 << 10
    assert len(npz.load(raw)) == 8  # within the default budget
    monkeypatch.setattr(budget, "load_allowance", 3 << 20)
    with pytest.raises(ember.LimitError, match=r"array 'm\d': materialised bytes is \d+ bytes, over the limit") as e:
        npz.load(raw)
    assert e.value.setting == "load_allowance"


@pytest.mark.parametrize("shape", ["(True, 4)", "(-1,)", "(1.5,)"])
def test_npz_header_shape_that_is_not_sizes(shape):
    h = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}".encode()
    h += b" " * (63 - (len(h) + 10) % 64) + b"\n"
    raw = _zip([("w.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + b"\0" * 16)])
    with pytest.raises(ember.FormatError, match=r"shape"):
        npz.load(raw)


@pytest.mark.parametrize("qtype", ["IQ2_XXS", "IQ4_NL", "Q8_1", "MXFP4", "TQ1_0"])
def test_gguf_types_ember_cannot_dequantize_fail_at_load(qtype, tmp_path):
    """Written by gguf-py (llama.cpp's own writer) with raw blocks: ember refuses them when the file is opened,
    naming the tensor and the type, instead of loading and failing at the first matmul."""
    t = gguf_py.GGMLQuantizationType[qtype]
    block, size = gguf_py.GGML_QUANT_SIZES[t]
    path = tmp_path / "m.gguf"
    w = gguf_py.GGUFWriter(str(path), "llama")
    w.add_tensor("blk.0.w", np.zeros((2, 256 // block * size), np.uint8), raw_dtype=t)
    w.add_tensor("ok", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ember.FormatError, match=rf"tensor 'blk.0.w' has GGML type {qtype}, which ember cannot "
                                                r"dequantize \(supported: Q4_0"):
        gguf.load(path)
