"""`ember convert` functions: safetensors (written by the safetensors package) -> GGUF (read by gguf-py)
and GGUF (written by gguf-py) -> safetensors (read by the safetensors package)."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from ember.ggml import codec
from ember.quant.convert import add_convert_gguf_parser, gguf_to_safetensors, safetensors_to_gguf

gguf = pytest.importorskip("gguf")
st = pytest.importorskip("safetensors.numpy")
torch = pytest.importorskip("torch")
from safetensors.torch import save_file as save_torch  # noqa: E402

G = gguf.GGMLQuantizationType


@pytest.fixture
def checkpoint(tmp_path, rng):
    tensors = {"emb.weight": torch.from_numpy(rng.standard_normal((16, 64)).astype(np.float32)),
               "proj.weight": torch.from_numpy(rng.standard_normal((8, 256)).astype(np.float32)).to(torch.bfloat16),
               "odd.weight": torch.from_numpy(rng.standard_normal((4, 40)).astype(np.float16)),
               "norm.weight": torch.ones(64), "steps": torch.arange(3, dtype=torch.int32)}
    path = tmp_path / "model.safetensors"
    save_torch(tensors, str(path), metadata={"format": "pt", "note": "hi"})
    return path, tensors


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k", "f16"])
def test_safetensors_to_gguf(checkpoint, tmp_path, qtype):
    src, tensors = checkpoint
    dst = tmp_path / "model.gguf"
    plan = safetensors_to_gguf(src, dst, qtype)
    want_q = qtype.upper()
    expected = {"emb.weight": want_q if qtype != "q4_k" else "F32",  # 64 is not a multiple of 256
                "proj.weight": want_q, "odd.weight": want_q if qtype == "f16" else "F16",  # 40: not 32-aligned
                "norm.weight": "F32", "steps": "I32"}
    assert plan == expected
    ref = gguf.GGUFReader(str(dst))
    fields = {f.name: f.contents() for f in ref.fields.values()}
    assert fields["note"] == "hi" and fields["format"] == "pt"
    assert fields.get("general.quantization_version") == (None if qtype == "f16" else 2)
    for t in ref.tensors:
        assert t.tensor_type.name == expected[t.name]
        src_f32 = tensors[t.name].float().numpy() if tensors[t.name].is_floating_point() else tensors[t.name].numpy()
        if t.tensor_type in (G.F32, G.I32):
            assert np.array_equal(np.asarray(t.data).reshape(src_f32.shape), src_f32)
        else:  # the bytes must be exactly what quantizing the float32 values gives
            assert np.array_equal(np.asarray(t.data).view(np.uint8).reshape(-1),
                                  codec.quantize(src_f32, t.tensor_type.name).reshape(-1)), t.name


def test_gguf_to_safetensors(tmp_path, rng):
    w = rng.standard_normal((4, 256)).astype(np.float32)
    q = gguf.quants.quantize(w, G.Q8_0)
    path = tmp_path / "in.gguf"
    writer = gguf.GGUFWriter(str(path), "toy")
    writer.add_uint32("toy.layers", 2)
    writer.add_array("toy.list", [1, 2])
    writer.add_tensor("q", q, raw_dtype=G.Q8_0)
    writer.add_tensor("h", w.astype(np.float16))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    out = tmp_path / "out.safetensors"
    assert gguf_to_safetensors(path, out) == {"q": "float32", "h": "float16"}
    back = st.load_file(str(out))
    assert np.array_equal(back["q"], gguf.quants.dequantize(q, G.Q8_0))
    assert np.array_equal(back["h"], w.astype(np.float16))
    from safetensors import safe_open
    with safe_open(str(out), "np") as f:
        assert f.metadata() == {"general.architecture": "toy", "toy.layers": "2", "toy.list": "[1, 2]"}


def test_cli_hook(checkpoint, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="ember")
    add_convert_gguf_parser(parser.add_subparsers())
    src, _ = checkpoint
    args = parser.parse_args(["convert", str(src), str(tmp_path / "m.gguf"), "--qtype", "q4_0"])
    assert args.func(args) == 0
    assert "5 tensors" in capsys.readouterr().out
    args = parser.parse_args(["convert", str(tmp_path / "m.gguf"), str(tmp_path / "m.safetensors")])
    assert args.func(args) == 0
    assert set(st.load_file(str(tmp_path / "m.safetensors"))) == {"emb.weight", "proj.weight", "odd.weight",
                                                                  "norm.weight", "steps"}
    with pytest.raises(SystemExit, match="expected .safetensors -> .gguf"):
        args = parser.parse_args(["convert", str(src), str(tmp_path / "x.bin")])
        args.func(args)
