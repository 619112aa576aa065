"""GGUF interop with gguf-py (the reference reader/writer from llama.cpp), both directions.

Files gguf-py writes must read back in ember with identical metadata (values and types) and tensors;
files ember writes must read in gguf-py's GGUFReader with identical metadata and tensors.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

import ember
from ember.io import gguf as eg
from ember.ggml import codec
from ember.quant import QTensor

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as G  # noqa: E402
from gguf import GGUFValueType as V  # noqa: E402

QTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]

# (key, gguf-py adder, value, GGUF type id)
SCALARS = [("k.u8", "add_uint8", 200, V.UINT8), ("k.i8", "add_int8", -100, V.INT8),
           ("k.u16", "add_uint16", 60000, V.UINT16), ("k.i16", "add_int16", -30000, V.INT16),
           ("k.u32", "add_uint32", 4_000_000_000, V.UINT32), ("k.i32", "add_int32", -2_000_000_000, V.INT32),
           ("k.f32", "add_float32", 0.1, V.FLOAT32), ("k.bool", "add_bool", True, V.BOOL),
           ("k.str", "add_string", "héllo ✓", V.STRING), ("k.u64", "add_uint64", 2**64 - 1, V.UINT64),
           ("k.i64", "add_int64", -2**63, V.INT64), ("k.f64", "add_float64", 1 / 3, V.FLOAT64)]
ARRAYS = [("a.i32", [1, -2, 3]), ("a.f32", [0.5, -1.25]), ("a.str", ["<s>", "", "日本"]), ("a.bool", [True, False])]


def _tensors(rng):
    """name -> (numpy array to hand gguf-py, raw_dtype or None, logical shape, expected float values or None)."""
    out = {
        "f32": (rng.standard_normal((3, 5)).astype(np.float32), None),
        "f16": (rng.standard_normal((2, 3, 4)).astype(np.float16), None),
        "f64": (rng.standard_normal(7), None),
        "i8": (rng.integers(-128, 127, (4, 4)).astype(np.int8), None),
        "i16": (rng.integers(-3000, 3000, (5,)).astype(np.int16), None),
        "i32": (rng.integers(-2**31, 2**31 - 1, (2, 2, 2, 2)).astype(np.int32), None),
        "i64": (rng.integers(-2**62, 2**62, (3,)).astype(np.int64), None),
        "bf16": (rng.integers(0, 2**16, (4, 8)).astype(np.uint16) & 0x7F7F, G.BF16),  # finite bit patterns
    }
    for q in QTYPES:
        w = rng.standard_normal((4, 512)).astype(np.float32)
        out[f"blk.{q.lower()}.weight"] = (gguf.quants.quantize(w, G[q]) if q in ("Q4_0", "Q8_0")
                                          else codec.quantize(w, q), G[q])
    return out


def _write_with_gguf_py(path, tensors, alignment=None):
    w = gguf.GGUFWriter(str(path), "toyarch")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, adder, value, _ in SCALARS:
        getattr(w, adder)(key, value)
    for key, value in ARRAYS:
        w.add_array(key, value)
    for name, (arr, raw) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _expected_values(arr, raw):
    if raw is None:
        return arr
    if raw == G.BF16:
        return ember.dtypes.bf16_bits_to_f32(arr)
    return gguf.quants.dequantize(arr, raw)


@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_files_written_by_gguf_py(tmp_path, rng, alignment):
    tensors = _tensors(rng)
    path = tmp_path / "ref.gguf"
    _write_with_gguf_py(path, tensors, alignment)
    with eg.GGUFReader(path) as f:
        assert f.version == 3 and f.alignment == (alignment or 32)
        assert f.fields["general.architecture"].value == "toyarch"
        for key, _, value, vtype in SCALARS:
            got = f.fields[key]
            assert got.type == vtype
            assert got.value == (np.float32(value).item() if vtype == V.FLOAT32 else value), key
        for key, value in ARRAYS:
            got = f.fields[key]
            assert got.type == V.ARRAY
            want = [np.float32(v).item() for v in value] if key == "a.f32" else value
            assert got.value == want, key
        ref = gguf.GGUFReader(str(path))
        assert [t.name for t in ref.tensors] == f.keys()
        for rt in ref.tensors:
            info = f.tensor_infos[rt.name]
            assert info.ggml_type.id == int(rt.tensor_type)
            assert info.shape == tuple(int(d) for d in reversed(rt.shape.tolist()))
            assert info.offset == rt.data_offset - ref.data_offset
            assert np.array_equal(f.raw(rt.name), np.asarray(rt.data).view(np.uint8).reshape(-1))
    loaded = ember.io.load(path)  # dispatched here by the magic bytes
    for name, (arr, raw) in tensors.items():
        got = loaded[name]
        want = _expected_values(arr, raw)
        if raw is not None and raw != G.BF16:
            assert isinstance(got, QTensor) and got.ggml_type == G(raw).name
            assert np.array_equal(got.data, arr)
            assert np.array_equal(got.dequantize().numpy(), want.reshape(got.shape))
        else:
            assert isinstance(got, ember.Tensor)
            if name == "i16":
                assert got.dtype == ember.int32  # ember has no int16: widened losslessly
            assert np.array_equal(got.numpy(), want.astype(got.numpy().dtype))
    meta = ember.io.metadata(path)
    assert meta["a.str"] == ["<s>", "", "日本"] and meta["k.u64"] == 2**64 - 1


def test_reads_version_2(tmp_path, rng):
    # v2 and v3 share the layout (v3 only added big-endian support); patch the version field
    path = tmp_path / "v3.gguf"
    _write_with_gguf_py(path, {"w": (rng.standard_normal((2, 32)).astype(np.float32), None)})
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    with eg.GGUFReader(bytes(data)) as f:
        assert f.version == 2
        assert np.array_equal(f.get_tensor("w").numpy(), eg.load(path)["w"].numpy())


def test_files_written_by_ember_read_in_gguf_py(tmp_path, rng):
    bf = ember.Tensor._from_storage(ember.dtypes.f32_to_bf16_bits(rng.standard_normal((2, 8)).astype(np.float32)),
                                    ember.bfloat16)
    plain = {"f32": rng.standard_normal((3, 5)).astype(np.float32),
             "f16": ember.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float16)),
             "i32": rng.integers(-9, 9, (4,)).astype(np.int32), "i8": rng.integers(-9, 9, (4,)).astype(np.int8),
             "f64": rng.standard_normal(3), "i64": np.arange(5), "bf16": bf}
    quant = {f"q.{q}": QTensor.quantize(rng.standard_normal((3, 512)).astype(np.float32), q) for q in QTYPES}
    meta = {"general.architecture": "toy", "u32": 7, "neg": -5, "big": 2**40, "huge": 2**64 - 1, "f": 0.25,
            "flag": False, "name": "ünï", "ints": [1, 2, 3], "floats": [0.5, 1.5], "strs": ["a", "bc"],
            "u8": np.uint8(3), "f64": np.float64(1 / 3), "typed": eg.GGUFValue(9, eg.INT16),
            "vec": np.arange(4, dtype=np.int16), "nested": [[1, 2], [3]]}
    path = tmp_path / "ember.gguf"
    ember.io.gguf.save({**plain, **quant}, path, metadata=meta)
    ref = gguf.GGUFReader(str(path))
    fields = {f.name: f for f in ref.fields.values()}
    want_types = {"u32": [V.UINT32], "neg": [V.INT32], "big": [V.INT64], "huge": [V.UINT64], "f": [V.FLOAT32],
                  "flag": [V.BOOL], "name": [V.STRING], "ints": [V.ARRAY, V.UINT32], "floats": [V.ARRAY, V.FLOAT32],
                  "strs": [V.ARRAY, V.STRING], "u8": [V.UINT8], "f64": [V.FLOAT64], "typed": [V.INT16],
                  "vec": [V.ARRAY, V.INT16], "nested": [V.ARRAY, V.ARRAY, V.UINT32]}
    for key, types in want_types.items():
        assert list(fields[key].types) == types, key
    for key in ("u32", "neg", "big", "huge", "f", "flag", "name", "ints", "floats", "strs", "u8", "f64"):
        v = meta[key]
        assert fields[key].contents() == (v.item() if isinstance(v, np.generic) else v), key
    assert fields["typed"].contents() == 9 and fields["vec"].contents() == [0, 1, 2, 3]
    assert fields["nested"].contents() == [1, 2, 3]  # gguf-py flattens nested arrays when reading
    tensors = {t.name: t for t in ref.tensors}
    assert list(tensors) == list(plain) + list(quant)
    for name, x in plain.items():
        t = tensors[name]
        want = x._storage_numpy() if isinstance(x, ember.Tensor) else x
        assert tuple(reversed(t.shape.tolist())) == want.shape
        assert np.array_equal(np.asarray(t.data).view(want.dtype).reshape(want.shape), want), name
    assert tensors["bf16"].tensor_type == G.BF16
    for name, q in quant.items():
        t = tensors[name]
        assert t.tensor_type == G[q.ggml_type.name]
        assert np.array_equal(np.asarray(t.data), q.data)
        assert np.array_equal(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type), q.numpy())
    # and back into ember with the same values and types
    with eg.GGUFReader(path) as f:
        assert f.metadata()["nested"] == [[1, 2], [3]] and f.fields["typed"].type == eg.INT16
        assert f.get_tensor("bf16").dtype == ember.bfloat16
        assert np.array_equal(f.get_tensor("bf16")._storage_numpy(), bf._storage_numpy())


def test_lazy_reader_maps_or_reads_on_demand(tmp_path, rng):
    w = rng.standard_normal((64, 256)).astype(np.float32)
    path = tmp_path / "lazy.gguf"
    eg.save({"a": w, "q": QTensor.quantize(w, "q4_k")}, path)
    blob = path.read_bytes()
    for src, mmap in ((path, None), (path, False), (blob, None)):
        with eg.GGUFReader(src, mmap=mmap) as f:
            raw = f.raw("a")
            if isinstance(src, bytes):
                assert np.shares_memory(raw, np.frombuffer(src, np.uint8))  # zero-copy view
            assert np.array_equal(f.get_tensor("a").numpy(), w)
            q = f.get_tensor("q")
            assert q.ggml_type == "Q4_K" and q.shape == (64, 256)
    with pytest.raises(KeyError, match="has no tensor 'nope'"):
        eg.GGUFReader(path).get_tensor("nope")


def test_writer_refuses_what_gguf_cannot_hold(tmp_path):
    with pytest.raises(TypeError, match="tensor 'b' has dtype bool, which GGUF cannot store"):
        eg.save({"b": np.zeros(3, bool)}, tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="more than the 4 dims GGUF allows"):
        eg.save({"x": np.zeros((1, 1, 1, 1, 1), np.float32)}, tmp_path / "x.gguf")
    with pytest.raises(TypeError, match="array elements must share one type"):
        eg.save({}, tmp_path / "x.gguf", metadata={"mixed": [1, "a"]})
    with pytest.raises(ValueError, match="power-of-two"):
        eg.save({}, tmp_path / "x.gguf", alignment=48)
    with pytest.raises(ValueError, match="do not fit INT8"):
        eg.save({}, tmp_path / "x.gguf", metadata={"x": eg.GGUFValue(300, eg.INT8)})
