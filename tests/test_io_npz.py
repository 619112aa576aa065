""".npz reader/writer and the format dispatch of ember.io.load/save/metadata."""
import io
import zipfile

import ember.io
import numpy as np
import pytest
import safetensors.torch
import torch
from ember.io import FormatError, npz
from test_io_helpers import assert_same, storage_bits, torch_tensors


def test_reads_numpy_savez_files(tmp_path):
    arrays = {"f": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "i": np.arange(5, dtype=np.int64),
              "b": np.array([[True], [False]]), "h": np.array([1.5, -0.0], np.float16),
              "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "big": np.arange(4, dtype=">i4")}
    path = tmp_path / "a.npz"
    np.savez_compressed(path, **arrays)
    got = ember.io.load(path)
    assert list(got) == list(arrays)
    for k, a in arrays.items():
        s = got[k]._storage_numpy()
        assert s.dtype == a.dtype.newbyteorder("=") and s.flags.c_contiguous, k
        np.testing.assert_array_equal(s, a)


def test_ember_npz_round_trips_bfloat16_and_metadata(tmp_path):
    ref = torch_tensors(2)
    tensors = ember.io.load(safetensors.torch.save(ref))
    path = tmp_path / "t.npz"
    ember.io.save(tensors, path, metadata={"source": "test"})
    back = ember.io.load(path)
    for k, t in ref.items():
        assert_same(back[k], t, k)
    assert ember.io.metadata(path) == {"source": "test"}
    with np.load(path) as plain:  # still an ordinary npz: bfloat16 as its uint16 bits
        np.testing.assert_array_equal(plain["w.2.bfloat16"], storage_bits(ref["w.2.bfloat16"]))


@pytest.mark.parametrize("array,msg", [
    (np.zeros(2, np.uint16), "'x' has numpy dtype uint16, which ember does not support"),
    (np.zeros(2, np.int16), "'x' has numpy dtype int16"),
    (np.zeros(2, np.complex64), "'x' has numpy dtype complex64"),
    (np.array([{"a": 1}], dtype=object), "'x.npy' has dtype object"),
])
def test_npz_dtypes_ember_lacks_are_named(tmp_path, array, msg):
    path = tmp_path / "bad.npz"
    np.savez(path, x=array)
    with pytest.raises(FormatError, match=msg):
        ember.io.load(path)


def test_npz_header_claiming_more_than_the_entry_is_refused_before_allocating():
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        with z.open("x.npy", "w") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 40,)})
            f.write(bytes(8))
    with pytest.raises(FormatError, match="needs 4398046511104 bytes but its entry holds 8"):
        npz.read(b.getvalue())


def test_load_detects_format_from_magic_not_extension(tmp_path):
    t = {"w": torch.randn(2, 2)}
    for name, raw in [("st.bin", safetensors.torch.save(t)), ("pt.safetensors", _torch_bytes(t))]:
        path = tmp_path / name
        path.write_bytes(raw)
        assert_same(ember.io.load(path)["w"], t["w"])
    assert ember.io.detect(safetensors.torch.save(t)) == "safetensors"
    assert ember.io.detect(_torch_bytes(t)) == "torch"


def _torch_bytes(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def test_load_errors_name_the_source(tmp_path):
    with pytest.raises(FormatError, match="not a known weights format"):
        ember.io.load(b"hello world, not weights")
    with pytest.raises(FormatError, match="cannot read .*missing.safetensors"):
        ember.io.load(tmp_path / "missing.safetensors")
    with pytest.raises(TypeError, match="expected a path or bytes, got int"):
        ember.io.load(3)
    with pytest.raises(FormatError, match="damaged zip"):
        ember.io.load(b"PK\x03\x04" + bytes(40))
