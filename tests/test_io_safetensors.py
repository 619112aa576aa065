"""safetensors: parity with the safetensors package both ways, lazy reads, and clear errors on bad files."""
import json
import struct

import ember
import ember.io
import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch
from ember.io import FormatError, safe_open
from ember.io import safetensors as st
from test_io_helpers import assert_same, storage_bits, torch_tensors

META = {"format": "pt", "note": "ünïcode ✓"}


@pytest.fixture(scope="module")
def ref():
    return torch_tensors()


@pytest.fixture(scope="module")
def ref_file(ref, tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "ref.safetensors"
    safetensors.torch.save_file(ref, str(path), metadata=META)
    return path


@pytest.mark.parametrize("as_bytes", [False, True])
def test_reads_files_written_by_safetensors(ref, ref_file, as_bytes):
    src = ref_file.read_bytes() if as_bytes else ref_file
    got = ember.io.load(src)
    assert set(got) == set(ref)
    for k, t in ref.items():
        assert_same(got[k], t, k)
    assert ember.io.metadata(src) == META


@pytest.mark.parametrize("mmap", [True, False])
def test_safe_open_is_lazy_and_mmap_matches_reads(ref, ref_file, mmap):
    with safe_open(ref_file, mmap=mmap) as f:
        assert sorted(f.keys()) == sorted(ref)
        assert f.metadata() == META
        assert f.shape("w.0.float32") == (3, 5) and f.dtype("w.2.bfloat16") is ember.dtypes.bfloat16
        s = f.get_stored("w.0.float32")
        assert (f._map is not None) == mmap
        assert not mmap or np.shares_memory(s.array, f._map)  # a view on the mapping, nothing read
        assert_same(f.get_tensor("w.2.bfloat16"), ref["w.2.bfloat16"])
        with pytest.raises(KeyError, match="no tensor 'nope'"):
            f.get_tensor("nope")


def test_reads_without_mmap_touch_only_the_requested_tensor(tmp_path):
    big = {"big": torch.zeros(1 << 20), "small": torch.arange(3.0)}  # 4 MiB the reader must not touch
    path = tmp_path / "big.safetensors"
    safetensors.torch.save_file(big, str(path))

    class CountingFile:
        def __init__(self, f):
            self.f, self.read_bytes = f, 0

        def readinto(self, b):
            n = self.f.readinto(b)
            self.read_bytes += n
            return n

        def __getattr__(self, name):
            return getattr(self.f, name)

    with safe_open(path, mmap=False) as f:
        f._file = CountingFile(f._file)
        assert f.get_stored("small").array.tolist() == [0.0, 1.0, 2.0]
        assert f._file.read_bytes == 12


def test_mapped_tensors_are_private_copies_on_write(ref_file, tmp_path):
    path = tmp_path / "cow.safetensors"
    path.write_bytes(ref_file.read_bytes())
    with safe_open(path, mmap=True) as f:
        s = f.get_stored("w.0.float32")
    s.array[...] = 7  # writes go to private pages, never to the file
    with safe_open(path, mmap=False) as f:
        assert f.get_stored("w.0.float32").array[1, 1] != 7


def test_files_written_by_ember_load_in_safetensors(ref, tmp_path):
    ours = ember.io.load(safetensors.torch.save(ref))
    path = tmp_path / "ours.safetensors"
    ember.io.save(ours, path, metadata=META)
    back = safetensors.torch.load_file(str(path))
    assert set(back) == set(ref)
    for k, t in ref.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        assert storage_bits(back[k]).tobytes() == storage_bits(t).tobytes(), k
    with safetensors.safe_open(str(path), "pt") as f:
        assert f.metadata() == META
    raw = path.read_bytes()
    assert struct.unpack("<Q", raw[:8])[0] % 8 == 0  # header padded so each tensor is aligned


def test_save_accepts_numpy_and_round_trips_bytes():
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2], "b": np.array([True, False])}
    raw = st.dumps(arrays, {"k": "v"})
    got = st.read(raw)
    np.testing.assert_array_equal(got["a"].array, arrays["a"])
    np.testing.assert_array_equal(got["b"].array, arrays["b"])
    assert st.metadata(raw) == {"k": "v"}
    ref = safetensors.torch.load(raw)
    np.testing.assert_array_equal(ref["a"].numpy(), arrays["a"])


def test_save_refuses_bad_names_metadata_and_ambiguous_uint16(tmp_path):
    with pytest.raises(TypeError, match="uint16 numpy array is ambiguous"):
        ember.io.save({"x": np.zeros(2, np.uint16)}, tmp_path / "a.safetensors")
    with pytest.raises(TypeError, match="'__metadata__'"):
        ember.io.save({"__metadata__": np.zeros(2)}, tmp_path / "a.safetensors")
    with pytest.raises(TypeError, match="str -> str"):
        ember.io.save({"x": np.zeros(2)}, tmp_path / "a.safetensors", metadata={"n": 1})
    with pytest.raises(TypeError, match="'x' is a list"):
        ember.io.save({"x": [1, 2]}, tmp_path / "a.safetensors")
    with pytest.raises(ValueError, match="cannot save .*a.bin'"):
        ember.io.save({"x": np.zeros(2)}, tmp_path / "a.bin")


@pytest.mark.parametrize("tdt,code", [(torch.int16, "I16"), (torch.uint16, "U16"), (torch.float8_e4m3fn, "F8_E4M3"),
                                      (torch.uint64, "U64")])
def test_dtypes_ember_lacks_name_tensor_and_dtype(tdt, code):
    raw = safetensors.torch.save({"ok": torch.ones(2), "odd": torch.zeros(3).to(tdt)})
    with safe_open(raw) as f:  # the header is fine: other tensors still read
        assert sorted(f.keys()) == ["odd", "ok"]
        assert f.get_stored("ok").array.tolist() == [1.0, 1.0]
        with pytest.raises(FormatError, match=f"tensor 'odd' has dtype {code}, which ember does not support"):
            f.get_stored("odd")
    with pytest.raises(FormatError, match="'odd'"):
        ember.io.load(raw)


# ---------------------------------------------------------------- malformed files

def _file(header: dict, data: bytes = b"", n=None, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if n is None else n) + h + data


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
BAD = {
    "too short": (b"\x05\x00\x00", "too short for the 8-byte header length"),
    "header length past end": (_file({"a": F32}, bytes(8), n=10 ** 6), "header length 1000000 exceeds the file"),
    "absurd header length": (_file({}, n=2 ** 63), "exceeds the file"),
    "header not json": (_file(None, raw_header=b"{not json}"), "header is not valid JSON"),
    "header not utf8": (_file(None, raw_header=b'{"\xff":1}'), "header is not valid JSON"),
    "header a list": (_file(None, raw_header=b"[1, 2]"), "header is a JSON list"),
    "duplicate key": (_file(None, raw_header=b'{"a":{},"a":{}}'), "duplicate key 'a'"),
    "unknown dtype": (_file({"a": {**F32, "dtype": "F33"}}, bytes(8)), "tensor 'a': unknown dtype 'F33'"),
    "missing field": (_file({"a": {"dtype": "F32", "shape": [2]}}, bytes(8)), "tensor 'a': entry must be"),
    "negative dim": (_file({"a": {**F32, "shape": [-2]}}, bytes(8)), "tensor 'a': shape \\[-2\\]"),
    "bool dim": (_file({"a": {**F32, "shape": [True, 2]}}, bytes(8)), "tensor 'a': shape"),
    "offsets reversed": (_file({"a": {**F32, "data_offsets": [8, 0]}}, bytes(8)), "0 <= begin <= end"),
    "size mismatch": (_file({"a": {**F32, "shape": [3]}}, bytes(8)), "needs 12 bytes but data_offsets"),
    "offsets past end": (_file({"a": F32}, bytes(4)), "truncated file"),
    "trailing bytes": (_file({"a": F32}, bytes(12)), "trailing bytes"),
    "gap": (_file({"a": {**F32, "data_offsets": [4, 12]}}, bytes(12)), "leaves a gap of 4 bytes"),
    "overlap": (_file({"a": F32, "b": {**F32, "data_offsets": [4, 12]}}, bytes(12)), "overlaps tensor 'a'"),
    "metadata not str": (_file({"__metadata__": {"a": 1}}), "__metadata__ must map strings to strings"),
    "absurd shape": (_file({"a": {"dtype": "F32", "shape": [0, 2 ** 40, 2 ** 40], "data_offsets": [0, 0]}}),
                     "too large"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_files_raise_clear_errors(case, tmp_path):
    raw, msg = BAD[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    for src in (raw, path):
        with pytest.raises(FormatError, match=msg) as e:
            st.read(src)
        assert str(e.value).startswith("ember: ")
    assert "bad.safetensors" in str(pytest.raises(FormatError, st.read, path).value)


def test_loaded_weights_carry_numpys_own_dtype_objects(ref_file):
    """A reader's little-endian view makes an equal but distinct dtype object; the cpu backend's fast paths
    test `dtype is float32` (BLAS, the wasm GEMM in the page), so a weight must arrive with numpy's own."""
    for name, t in st.load(ref_file).items():
        if t.dtype is not ember.bfloat16:
            assert t._data.dtype is np.dtype(t.dtype.np), name
