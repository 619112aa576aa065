"""`--device auto` in the model commands: the honest choice (cuda, else a hardware WebGPU adapter, else cpu)
with the reason on stderr; a software adapter (lavapipe, SwiftShader) is never picked by auto."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ember.cli import resolve_device

DEV = importlib.import_module("ember.device")  # the module (ember.device is also the function)

COMMANDS = ["whisper", "llama", "generate", "embed", "classify", "yolo", "onnx"]


def _expected():
    """What auto must pick here, worked out from the device registry and the adapter, not from resolve_device."""
    if DEV.device_status("cuda")[0]:
        return "cuda"
    if not DEV.device_status("webgpu")[0]:
        return "cpu"
    return "cpu" if DEV.device("webgpu").backend.adapter.software else "webgpu"


def test_auto_picks_the_honest_device_and_says_why(capsys):
    want = _expected()
    assert resolve_device("auto") == want
    err = capsys.readouterr().err
    assert f"ember: device auto -> {want} (" in err or err.strip() == "ember: device auto -> cuda"
    if want == "cpu" and DEV.device_status("webgpu")[0]:   # lavapipe here: the note names it
        sw = DEV.device("webgpu").backend.adapter.software
        assert sw in err and "device 'webgpu' forces it" in err


def test_auto_without_any_gpu_is_cpu_with_the_reason(monkeypatch, capsys):
    real = DEV.device_status
    monkeypatch.setattr(DEV, "device_status",
                        lambda name: (False, "no adapter in this test") if name in ("cuda", "webgpu") else real(name))
    assert resolve_device("auto") == "cpu"
    assert "ember: device auto -> cpu (no usable WebGPU (no adapter in this test))" in capsys.readouterr().err


def test_named_devices_pass_through(capsys):
    assert [resolve_device(d) for d in ("cpu", "webgpu", "cuda:1")] == ["cpu", "webgpu", "cuda:1"]
    assert capsys.readouterr().err == ""


def test_every_model_command_takes_auto():
    """Each model command's --device argument, read from its own parser: documented, defaulting to cpu."""
    from ember.cli import COMMANDS as REGISTRY
    for command in COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(REGISTRY[command][0]).add_parser(sub)
        p = sub.choices[command]
        act = next(a for a in p._actions if "--device" in a.option_strings)
        assert "auto" in act.help and act.default == "cpu", command
        assert p.parse_args(_required(command) + ["--device", "auto"]).device == "auto"


def _required(command):
    """The positional arguments a command needs to parse (files that exist: this test file)."""
    return {"whisper": [__file__], "classify": [__file__, "--model", "m"], "yolo": [__file__], "onnx": [__file__],
            "llama": ["hi"], "generate": ["hi"]}.get(command, [])


def test_a_command_runs_with_device_auto(tmp_path):
    """`ember onnx --device auto` end to end: the note on stderr, the result equal to numpy's."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "relu.onnx")
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = subprocess.run([sys.executable, "-m", "ember", "onnx", str(tmp_path / "relu.onnx"), "--input",
                          f"x={tmp_path / 'x.npy'}", "--device", "auto", "--json"],
                         capture_output=True, text=True, env=os.environ, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"ember: device auto -> {_expected()}" in out.stderr
    got = json.loads(out.stdout)
    np.testing.assert_array_equal(np.array(got["y"]["values"] if isinstance(got["y"], dict) else got["y"]),
                                  np.maximum(x, 0))
