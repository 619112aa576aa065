"""Llama loading by path, sharded safetensors (+ index json), URL and hub id — the hub layout served by a
local http.server on 127.0.0.1 (huggingface.co is unreachable here) — and the CLI's --json output."""
from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

import ember
from ember.models.llama.config import LlamaConfig
from ember.models.llama.load import load_llama, save_pretrained
from ember.models.llama.model import Llama
from ember.models.llama.names import LlamaWeightsError

tokenizers = pytest.importorskip("tokenizers")


def _tokenizer_json():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["def f(x):\n    return x + 1\n" * 20], trainers.BpeTrainer(
        vocab_size=280, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return tok.to_str()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """owner/tiny laid out as on the hub (two shards + index), served over http on 127.0.0.1."""
    root = tmp_path_factory.mktemp("hub")
    repo = root / "owner" / "tiny" / "resolve" / "main"
    tj = root / "tokenizer.json"
    tj.write_text(_tokenizer_json())
    ember.manual_seed(0)
    c = LlamaConfig(vocab_size=tokenizers.Tokenizer.from_file(str(tj)).get_vocab_size(), dim=32, hidden_dim=64,
                    n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64, bos_token_id=0, eos_token_ids=[1])
    model = Llama(c)
    save_pretrained(model, str(repo), tokenizer_json=str(tj))
    sd = ember.load(str(repo / "model.safetensors"))
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for fn, keys in shards.items():
        ember.save({k: sd[k] for k in keys}, str(repo / fn))
    (repo / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: fn for fn, keys in shards.items() for k in keys}}))
    (repo / "model.safetensors").unlink()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"model": model, "repo": repo, "url": f"http://127.0.0.1:{srv.server_address[1]}"}
    srv.shutdown()


def _same_logits(a, b):
    ids = ember.tensor([[0, 5, 9, 100]])
    with ember.no_grad():
        np.testing.assert_array_equal(a(ids).numpy(), b(ids).numpy())


def test_local_sharded_folder(hub):
    m, tok = load_llama(str(hub["repo"]))
    _same_logits(m, hub["model"])
    ids = tok.encode("def f(x):", bos=True)
    assert ids[0] == 0 and tok.decode(ids) == "def f(x):"


def test_hub_id_and_url(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", hub["url"])
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "cache"))
    m, tok = load_llama("owner/tiny")
    _same_logits(m, hub["model"])
    assert tok is not None
    m2, _ = load_llama(hub["url"] + "/owner/tiny/resolve/main")
    _same_logits(m2, hub["model"])
    with pytest.raises(FileNotFoundError, match="HTTP 404"):
        load_llama("owner/missing")


def test_bad_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file"):
        load_llama("./nope")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="lacks the field"):
        load_llama(str(tmp_path))


def test_shard_shape_mismatch_names_tensor(hub, tmp_path):
    import shutil
    d = tmp_path / "m"
    shutil.copytree(hub["repo"], d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 80}))
    with pytest.raises(LlamaWeightsError, match=r"mlp.gate_proj.weight: checkpoint \(64, 32\) vs config \(80, 32\)"):
        load_llama(str(d))


def test_cli_json(hub):
    out = subprocess.run([sys.executable, "-m", "ember", "llama", "def f", "--model", str(hub["repo"]), "-n", "5",
                          "--temperature", "0", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    m, tok = load_llama(str(hub["repo"]))
    from ember.models.common.generate import SamplingParams, generate
    want = list(generate(m, tok.encode("def f"), 5, SamplingParams(temperature=0), tok.eos_ids))
    assert r["prompt_tokens"] == tok.encode("def f") and r["tokens"] == want
    assert r["text"] == tok.decode(want) and r["tokens_per_s"] >= 0


def test_format_readers_never_import_the_dispatcher():
    """load.py dispatches on the format to gguf.py / llama2c.py; they and the modules they share must not
    import load.py back (that circle, gguf -> llama2c -> load -> gguf, is gone)."""
    import ast
    from pathlib import Path

    import ember.models.llama as pkg
    folder = Path(pkg.__file__).parent
    for name in ("gguf", "llama2c", "names", "model", "config"):
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = node.module or ""
                relative = node.level == 1 and (target == "load" or (not target and
                                                                     any(a.name == "load" for a in node.names)))
                bad = relative or target == "ember.models.llama.load"
                assert not bad, f"models/llama/{name}.py imports load.py (line {node.lineno})"
