"""CLI arguments and inputs are checked before any model loads: a bad value is exit 2 with a message."""
import json
import os
import subprocess
import sys

import pytest


def _ember(argv, tmp_path):
    # EMBER_CACHE points at an empty folder: had a model been loaded or fetched, the cache would not be empty
    env = {**os.environ, "EMBER_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "ember", *argv], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env, check=False)


@pytest.mark.parametrize("argv,msg", [
    (["llama", "x", "-n", "-1"], "argument -n/--max-new-tokens: must be at least 1, got -1"),  # was exit 0
    (["llama", "x", "-n", "many"], "expected a positive integer, got 'many'"),
    (["llama", "x", "--top-p", "1.5"], "argument --top-p: must be between 0 and 1, got 1.5"),
    (["llama", "x", "--temperature", "-1"], "argument --temperature: must be at least 0, got -1.0"),
    (["llama", "x", "--temperature", "nan"], "expected a number >= 0, got 'nan'"),
    (["llama", "x", "--top-k", "-3"], "argument --top-k: must be at least 0, got -3"),
    (["generate", "x", "-n", "0"], "argument -n/--max-new-tokens: must be at least 1, got 0"),
    (["generate", "x", "--repetition-penalty", "0"], "must be greater than 0, got 0.0"),
    (["whisper", "missing.wav"], "argument audio: no such file: missing.wav"),  # was: loaded 341 MB first
    (["whisper", "--beam", "0", "missing.wav"], "argument --beam: must be at least 1, got 0"),
    (["yolo", "missing.jpg"], "argument image: no such file: missing.jpg"),
    (["yolo", "in.bin", "--conf", "2"], "argument --conf: must be between 0 and 1, got 2.0"),
    (["yolo", "in.bin", "--max-det", "0"], "argument --max-det: must be at least 1, got 0"),
    (["yolo", "in.bin", "--out", "no/such/dir/x.png"], "folder"),
    (["onnx", "missing.onnx"], "argument model: no such file: missing.onnx"),
    (["onnx", "in.bin", "--input", "x=missing.npy"], "no such file: missing.npy"),
    (["onnx", "in.bin", "--input", "x"], "'x' must be NAME=FILE.npy"),
    (["convert", "missing.safetensors", "out.gguf"], "no such file or folder: missing.safetensors"),
    (["convert", "yolo", "missing.pt", "out.safetensors"], "no such file or folder: missing.pt"),
    (["convert", "in.bin", "no/such/out.gguf"], "folder"),
    (["train-llama", "--data", "missing", "--out", "o"], "argument --data: no such folder: missing"),
    (["train-llama", "--data", ".", "--out", "o", "--steps", "0"], "argument --steps: must be at least 1, got 0"),
    (["train-llama", "--data", ".", "--out", "o", "--lr", "-1"], "argument --lr: must be greater than 0"),
    (["train-llama", "--data", ".", "--out", "o", "--dtype", "int8"], "argument --dtype: invalid choice"),
])
def test_bad_arguments_exit_2_before_loading(argv, msg, tmp_path):
    (tmp_path / "in.bin").write_bytes(b"\0")
    r = _ember(argv, tmp_path)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr
    assert not (tmp_path / "cache").exists()


def test_max_new_tokens_past_the_context_says_it_is_capped(tmp_path):
    """-n 1000000 on the shipped demo model (context 256): generation stops at the context and says so."""
    from ember.models.llama.load import DEMO_DIR  # the shipped 4 MB model
    with open(os.path.join(DEMO_DIR, "config.json")) as f:
        cfg = json.load(f)
    r = _ember(["llama", "Once upon a time", "-n", "1000000", "--temperature", "0", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    n_ctx = cfg["max_position_embeddings"]
    room = n_ctx - len(out["prompt_tokens"])
    assert f"-n 1000000 is capped at {room} new tokens: the model's context is {n_ctx} positions" in r.stderr
    assert len(out["prompt_tokens"]) + len(out["tokens"]) <= n_ctx + 1
