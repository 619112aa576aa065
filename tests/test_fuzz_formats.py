"""Fuzz every format ember reads from strangers (issue #17): safetensors, GGUF, npz, .pt, CTranslate2, ONNX (files
mutated as bytes, and graphs generated over ~60 operators and mutated structurally, each run), tokenizer.json
(both runtimes), config.json (through every family's loader, with a forward), WAV, images, `ember serve`'s request
handling and `ember api`'s (bounded local runs), GGUF BPE vocabularies, chat templates and the JSON schemas of
structured output. Each format gets a deterministic stream of mutated and structure-aware hostile inputs (sizes, offsets, strides, depth, duplicate names, bombs, forged
headers), run in a worker process (tests/fuzz/worker.py) under an address-space cap and a per-input time
limit. The only outcomes allowed are a successful load or an ember error: never another exception, a signal,
a hang or memory past the cap. EMBER_FUZZ_N sets inputs per format (default 2000, CI); EMBER_FUZZ_REPORT=path
writes the per-format table as JSON (docs/hostile-input.md holds the figures). Inputs that fail are saved
under tests/fuzz/found/ (git-ignored); reproducers worth keeping go to tests/fuzz/regressions/ and are replayed
by test_fuzz_regressions."""
import io
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import time
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent / "fuzz"
sys.path.insert(0, str(HERE))  # the fuzz modules (family_folders is beside this file)
N = int(os.environ.get("EMBER_FUZZ_N", "2000"))
SEED = int(os.environ.get("EMBER_FUZZ_SEED", "17"))
CHUNK = 4000  # inputs per worker process (a crash restarts the worker after the input that crashed)
STALL_S = 30  # CPU seconds without output: the worker spins in code its SIGPROF handler cannot interrupt
STALL_WALL = 10 * STALL_S  # wall seconds without output or CPU use: it is blocked (the load slows, never stops)


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time (/proc/PID/stat fields 14 and 15); inf once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("inf")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- base inputs (valid files, made here)

def _tokenizer_configs():
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers
    text = ["The quick brown fox jumps over the lazy dog 12345 naïve café 日本語 👍"] * 20
    out = []
    bpe = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    bpe.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "▁")])
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(tokenizers.Regex(r"\p{N}{1,3}"), "isolated"),
                                                 pre_tokenizers.Metaspace()])
    bpe.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Metaspace()])
    bpe.train_from_iterator(text, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>"],
                                                      show_progress=False))
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    bpe.enable_truncation(64)
    bpe.enable_padding(length=16)
    out.append(json.loads(bpe.to_str()))
    bl = tokenizers.Tokenizer(models.BPE())
    bl.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bl.decoder = decoders.ByteLevel()
    bl.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                     special_tokens=["<|endoftext|>"], show_progress=False))
    bl.post_processor = processors.ByteLevel(trim_offsets=False)
    out.append(json.loads(bl.to_str()))
    wp = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.decoder = decoders.WordPiece()
    wp.train_from_iterator(text, trainers.WordPieceTrainer(vocab_size=100, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                                           show_progress=False))
    wp.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    out.append(json.loads(wp.to_str()))
    un = tokenizers.Tokenizer(models.Unigram())
    un.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                                pre_tokenizers.Digits(individual_digits=True)])
    un.train_from_iterator(text, trainers.UnigramTrainer(vocab_size=60, special_tokens=["<unk>"], unk_token="<unk>",
                                                         show_progress=False))
    out.append(json.loads(un.to_str()))
    return out


def _wav(rate, channels, width, n):
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(np.random.default_rng(0).integers(0, 255, n * channels * width, dtype=np.uint8).tobytes())
    return b.getvalue()


def _onnx_model() -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w, b, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _ct2_model() -> bytes:
    """A CTranslate2 model.bin (layout in /work/shared/ASSETS.md): version 6, a spec, two variables, an alias."""
    def s(t):
        raw = t.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw
    out = struct.pack("<I", 6) + s("WhisperSpec") + struct.pack("<I", 3) + struct.pack("<I", 2)
    for name, arr, dt in (("encoder/conv1/weight", np.ones((4, 2, 3), np.float16), 4),
                          ("decoder/embeddings/weight", np.arange(6, dtype=np.float32).reshape(3, 2), 0)):
        out += s(name) + struct.pack("<B", arr.ndim) + struct.pack(f"<{arr.ndim}I", *arr.shape) + struct.pack("<B", dt)
        out += struct.pack("<I", arr.nbytes) + arr.tobytes()
    return out + struct.pack("<I", 1) + s("decoder/projection/weight") + s("decoder/embeddings/weight")


def _gguf():
    import ember
    from ember.io import gguf
    from ember.quant import QTensor
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    tensors = {"a": ember.tensor(w[:2, :8]), "q": QTensor.quantize(ember.tensor(w), "q4_0"),
               "k": QTensor.quantize(ember.tensor(np.tile(w, (1, 4))), "q4_k"), "i": ember.arange(5, dtype=ember.int32)}
    raw = gguf.dumps(tensors, {"general.architecture": "llama", "x.list": [1, 2, 3], "x.s": "v"})
    r = gguf.GGUFReader(raw)
    header_end = r.data_offset
    type_offsets = []  # where each tensor's u32 type id sits: after its name, n_dims and dims
    for name, info in r.tensor_infos.items():
        at = raw.index(struct.pack("<Q", len(name)) + name.encode(), 24)
        type_offsets.append(at + 8 + len(name) + 4 + 8 * len(info.shape))
    return raw, header_end, type_offsets


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    import safetensors.torch
    import torch
    from PIL import Image
    g = torch.Generator().manual_seed(0)
    st = safetensors.torch.save({"a": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g).bfloat16(),
                                 "c": torch.arange(6).reshape(2, 3), "d": torch.ones(2, dtype=torch.bool)},
                                metadata={"k": "v"})
    pt = io.BytesIO()
    t = torch.randn(4, 6, generator=g)
    torch.save({"model": {"w": t.t(), "v": t[1:, 2:], "p": torch.nn.Parameter(torch.randn(3).half()),
                          "i": torch.arange(4, dtype=torch.int32)}, "epoch": 3, "names": ["a", "b"]}, pt)
    npz = io.BytesIO()
    np.savez(npz, a=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.array([True, False]),
             c=np.asfortranarray(np.ones((2, 2))))
    zpt, znpz = zipfile.ZipFile(io.BytesIO(pt.getvalue())), zipfile.ZipFile(io.BytesIO(npz.getvalue()))
    gg, header_end, type_offsets = _gguf()
    png, jpg = io.BytesIO(), io.BytesIO()
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (12, 10, 3), dtype=np.uint8))
    img.save(png, "PNG")
    img.save(jpg, "JPEG")
    # config.json: one tiny folder per family (tests/family_folders.py) whose config the fuzzer rewrites
    import family_folders
    folders = family_folders.build(tmp_path_factory.mktemp("families"))
    os.environ["FUZZ_FAMILY_DIRS"] = json.dumps(folders)
    configs = {f: json.loads((Path(d) / "config.json").read_text()) for f, d in folders.items()}
    import chat_folder  # `ember api`'s model (tests/fuzz/api_requests.py)
    os.environ["FUZZ_CHAT_DIR"] = chat_folder.build(tmp_path_factory.mktemp("chat") / "m")
    toks = _tokenizer_configs()
    return {
        "safetensors": {"model.safetensors": st, "valid": st},
        "gguf": {"model.gguf": gg, "model.gguf.header": header_end, "model.gguf.type_offsets": type_offsets, "valid": gg},
        "npz": {"model.npz": npz.getvalue(), "npz_entries": [(n, znpz.read(n)) for n in znpz.namelist()],
                "valid": npz.getvalue()},
        "pt": {"model.pt": pt.getvalue(), "pt_entries": {n: zpt.read(n) for n in zpt.namelist()}, "valid": pt.getvalue()},
        "ct2": {"model.bin": _ct2_model(), "valid": _ct2_model()},
        "onnx": {"model.onnx": _onnx_model(), "valid": _onnx_model()},
        "tokenizer": {"tokenizers": toks, "valid": json.dumps(toks[0]).encode()},
        "config": {"configs": configs, "valid": b"llama\0" + (Path(folders["llama"]) / "config.json").read_bytes()},
        "wav": {"wavs": [_wav(16000, 1, 2, 1600), _wav(44100, 2, 3, 900), _wav(8000, 1, 1, 400)],
                "valid": _wav(16000, 1, 2, 1600)},
        "image": {"image.png": png.getvalue(), "image.jpg": jpg.getvalue(), "valid": png.getvalue()},
        "onnx-graph": {"valid": _onnx_model()},
        "serve": {"valid": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
        "api": {"valid": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
        **_chat_bases(),
    }


def _chat_bases() -> dict:
    """Bases for the chat's formats (tests/fuzz/chat_inputs.py)."""
    import chat_inputs as ci
    from ember.io import gguf
    md = ci.bpe_metadata()
    raw = gguf.dumps({}, md)
    return {"gguf-bpe": {"bpe_metadata": md, "bpe.gguf": raw, "valid": raw},
            "chat-template": {"templates": ci.CHAT_TEMPLATES, "valid": ci.CHAT_TEMPLATES[0].encode()},
            "json-schema": {"valid": json.dumps({"type": "json_object"}).encode()}}


# ---------------------------------------------------------------- running the workers

def run_format(fmt: str, base_for_format: dict, n: int, tmp_path: Path, out_dir: str) -> dict:
    """{outcome: count} over n inputs, plus 'found': [(case, outcome, detail)] for every bad outcome."""
    base_file = tmp_path / f"{fmt}.pkl"
    base_file.write_bytes(pickle.dumps(base_for_format))
    counts = {k: 0 for k in ("ok", "ember", "other", "crash", "hang", "memory")}
    found, i, t0 = [], 0, time.perf_counter()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    while i < n:
        count = min(CHUNK, n - i)
        err = open(tmp_path / f"{fmt}.stderr", "w+")  # a file, not a pipe nobody reads until the end
        p = subprocess.Popen([sys.executable, str(HERE / "worker.py"), fmt, str(i), str(count), str(SEED),
                              str(base_file), out_dir], stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        current, end = None, i + count
        since_cpu, since_wall = _cpu_seconds(p.pid), 0.0
        while True:
            ready, _, _ = select.select([p.stdout], [], [], STALL_S)
            if not ready:
                since_wall += STALL_S
                # stuck where SIGPROF cannot reach (C code holding the thread, burning CPU) or blocked: a hang;
                # a worker the machine's load slows has used less CPU than that and is waited for
                if _cpu_seconds(p.pid) - since_cpu < STALL_S and since_wall < STALL_WALL:
                    continue
                p.kill()
                p.wait()
                counts["hang"] += 1
                found.append((current, "hang", f"no progress for {STALL_S} CPU s ({since_wall:.0f} s)"))
                break
            since_cpu, since_wall = _cpu_seconds(p.pid), 0.0
            line = p.stdout.readline()
            if not line:
                break
            kind, case, *rest = line.rstrip("\n").split(" ", 2)
            if kind == "peak":
                counts["peak_rss_mib"] = max(counts.get("peak_rss_mib", 0), int(case) // 1024)
                continue
            if kind == "case":
                current = int(case)
            else:
                outcome = rest[0].split(" ", 1)[0]
                counts[outcome] += 1
                if outcome not in ("ok", "ember"):
                    found.append((int(case), outcome, rest[0].split(" ", 1)[1] if " " in rest[0] else ""))
                current = None
        rc = p.wait()
        if current is not None and rc != 0:  # died inside an input: a crash (a signal, or the C stack)
            counts["crash"] += 1
            found.append((current, "crash", f"exit {rc}: {_tail(err, 300)}"))
        elif rc != 0:  # the worker itself failed between inputs: a bug in the harness, not a finding
            raise RuntimeError(f"fuzz worker for {fmt} failed (exit {rc}): {_tail(err, 3000)}")
        err.close()
        p.stdout.close()
        i = (current + 1) if current is not None else end
    counts["n"], counts["seconds"], counts["found"] = n, round(time.perf_counter() - t0, 1), found
    return counts


def _tail(f, n: int) -> str:
    f.seek(0)
    return f.read()[-n:]


FORMATS = ["safetensors", "gguf", "npz", "pt", "ct2", "onnx", "onnx-graph", "tokenizer", "tokenizer-native", "config",
           "wav", "image", "serve", "api", "gguf-bpe", "chat-template", "json-schema"]
# inputs per format, as a fraction of EMBER_FUZZ_N: what each input costs (the Rust runtime's load, a model built
# and run per config.json, a graph run per ONNX input, a model's reply per API request, a schema compiled to an
# automaton, a tokenizer probed at load and every regex run, a template rendered) keeps the whole CI fuzz near
# 5 minutes on 2 cores: 23,900 inputs at the default
SHARE = {"tokenizer-native": 0.25, "config": 0.2, "onnx-graph": 0.5, "serve": 0.5, "api": 0.25, "json-schema": 0.25,
         "tokenizer": 0.5, "chat-template": 0.5}


@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzz(fmt, base, tmp_path):
    if fmt == "tokenizer-native":
        pytest.importorskip("tokenizers")
    found_dir = HERE / "found"
    found_dir.mkdir(exist_ok=True)
    n = max(int(N * SHARE.get(fmt, 1)), 1)
    counts = run_format(fmt, base[fmt.replace("-native", "")], n, tmp_path, str(found_dir))
    report = os.environ.get("EMBER_FUZZ_REPORT")
    if report:
        table = json.loads(Path(report).read_text()) if Path(report).exists() else {}
        table[fmt] = counts
        Path(report).write_text(json.dumps(table, indent=1))
    bad = [f for f in counts["found"]]
    assert not bad, f"{fmt}: {len(bad)} inputs ended otherwise than a load or an ember error " \
                    f"(saved in {found_dir}):\n" + "\n".join(f"  case {c}: {o} {d}" for c, o, d in bad[:20])


def test_the_harness_tells_every_outcome_apart(tmp_path, monkeypatch):
    """A loader that allocates past the cap, spins, segfaults or raises a raw error is caught as such."""
    monkeypatch.setenv("FUZZ_TIME_LIMIT_S", "1")
    cases = [b"ok", b"ember", b"other", b"memory", b"hang", b"crash"]
    counts = run_format("selftest", {"files": cases, "valid": b"ok"}, len(cases), tmp_path, "-")
    assert {k: counts[k] for k in ("ok", "ember", "other", "memory", "hang", "crash")} == dict.fromkeys(
        ("ok", "ember", "other", "memory", "hang", "crash"), 1), counts
    assert [c for c, _, _ in counts["found"]] == [2, 3, 4, 5]


def test_fuzz_regressions(base, tmp_path):
    """Every reproducer kept in tests/fuzz/regressions/<format>-<case>.bin loads or is an ember error."""
    files = sorted((HERE / "regressions").glob("*.bin"))
    by_fmt = {}
    for f in files:
        by_fmt.setdefault(f.name.rsplit("-", 1)[0], []).append(f.read_bytes())
    assert by_fmt, "no reproducers kept"
    for fmt, raws in by_fmt.items():
        counts = run_format(fmt, {**base[fmt.replace("-native", "")], "files": raws}, len(raws), tmp_path, "-")
        assert not counts["found"], f"{fmt}: {counts['found']}"
