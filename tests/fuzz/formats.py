"""Per format: how to load an input (the code under test) and how to make hostile inputs from the base files
the test writes (tests/test_fuzz_formats.py). Everything here runs in the fuzz worker, without torch (onnx, the
package, builds and mutates graphs). More per format: onnx_graphs.py, configs.py, serve_requests.py,
api_requests.py and chat_inputs.py (GGUF BPE vocabularies and chat templates, run where those modules exist)."""
from __future__ import annotations

import functools
import io
import json
import os
import struct
import zipfile
import zlib

from mutate import dumps, json_bytes, mutate_bytes, mutate_json

HOSTILE_INTS = [0, 1, 7, 255, 2 ** 16, 2 ** 31 - 1, 2 ** 32 - 1, 2 ** 40, 2 ** 63 - 1, 2 ** 64 - 1]


def _u64_poke(rng, raw: bytes, end: int) -> bytes:
    """Overwrite an aligned 4- or 8-byte field in the first `end` bytes with a hostile integer."""
    width = rng.choice([4, 8])
    at = rng.randrange(0, max(1, min(end, len(raw)) - width)) // 4 * 4
    v = rng.choice(HOSTILE_INTS) % (1 << (8 * width))
    return raw[:at] + v.to_bytes(width, "little") + raw[at + width:]


# ---------------------------------------------------------------- weights files

def load_safetensors(raw):
    """From bytes, and every third input also from a file through a memory map (the lazy path)."""
    from ember.io import safetensors
    if len(raw) % 3 == 0:
        import tempfile
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            f.write(raw)
            f.flush()
            return safetensors.load(f.name, mmap=True)
    return safetensors.load(raw)


def gen_safetensors(rng, base):
    raw = base["model.safetensors"]
    n = struct.unpack("<Q", raw[:8])[0]
    kind = rng.random()
    if kind < 0.4:
        header = json.loads(raw[8:8 + n])
        h = dumps(mutate_json(rng, header))
        return struct.pack("<Q", len(h)) + h + raw[8 + n:]
    if kind < 0.5:
        return struct.pack("<Q", rng.choice(HOSTILE_INTS + [n - 1, n + 1])) + raw[8:]
    return mutate_bytes(rng, raw)


def load_gguf(raw):
    from ember.io import gguf
    out = gguf.load(raw)
    for v in out.values():  # a quantized tensor must be usable, not fail at its first matmul
        if hasattr(v, "dequantize"):
            v.dequantize()
    return out


def gen_gguf(rng, base):
    raw = base["model.gguf"]
    header_end = base["model.gguf.header"]
    kind = rng.random()
    if kind < 0.35:
        return _u64_poke(rng, raw, header_end)
    if kind < 0.5:  # a tensor's type id set to something ember cannot dequantize, or unknown
        tid = rng.choice([9, 16, 17, 18, 19, 20, 21, 22, 23, 29, 34, 35, 39, 40, 99, 2 ** 31])
        pos = rng.choice(base["model.gguf.type_offsets"])
        return raw[:pos] + struct.pack("<I", tid) + raw[pos + 4:]
    return mutate_bytes(rng, raw, lo=0 if rng.random() < 0.3 else 4)


def load_npz(raw):
    from ember.io import npz
    return npz.load(raw)


def _zip(entries, compress=zipfile.ZIP_STORED) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", compress) as z:
        for n, v in entries:
            z.writestr(n, v)
    return b.getvalue()


@functools.cache
def _zeros_npz(n: int) -> bytes:
    """An npz of one deflated member: n float32 zeros (deflate shrinks them ~1000x)."""
    import numpy as np
    buf = io.BytesIO()
    np.save(buf, np.zeros(n, np.float32))
    return _zip([("a.npy", buf.getvalue())], zipfile.ZIP_DEFLATED)


def _listed_many_times(n: int, times: int, same_name: bool) -> bytes:
    """One deflated member whose central-directory entry is repeated `times` times (a zip bomb)."""
    one = _zeros_npz(n)
    cd_at = struct.unpack("<I", one[-6:-2])[0]
    cd = one[cd_at:-22]
    entries = []
    for i in range(times):
        name = b"a.npy" if same_name else f"{i:04d}.npy"[-5:].encode()
        entries.append(cd[:28] + struct.pack("<H", len(name)) + cd[30:46] + name + cd[46 + 5:])
    body = b"".join(entries)
    eocd = one[-22:-12] + struct.pack("<HHII", times, times, len(body), cd_at) + one[-2:]
    return one[:cd_at] + body + eocd


def gen_npz(rng, base):
    entries = base["npz_entries"]
    kind = rng.random()
    if kind < 0.1:  # the same name twice
        name, data = rng.choice(entries)
        return _zip(entries + [(name, data)])
    if kind < 0.2:  # one big zero member (deflates ~1000x) listed many times
        return _listed_many_times(rng.choice([1 << 14, 1 << 22]), rng.choice([2, 20, 200]), rng.random() < 0.3)
    if kind < 0.45:  # a .npy header with hostile shape/dtype/order
        name, data = rng.choice(entries)
        shape = rng.choice(["(True, 4)", "(-1,)", "(2**62, 2**62)", "(1.5,)", "()", "('a',)", "(3,)" * 2, "(0,)"])
        descr = rng.choice(["'<f4'", "'|O'", "'<U3'", "[('a','<f4')]", "'<V0'", "'>i8'", "'<c8'"])
        order = rng.choice(["False", "True", "None"])
        h = f"{{'descr': {descr}, 'fortran_order': {order}, 'shape': {shape}, }}".encode()
        h += b" " * (63 - (len(h) + 10) % 64) + b"\n"
        npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data[data.index(b"\n") + 1:]
        return _zip([(n, npy if n == name else d) for n, d in entries])
    if kind < 0.8:
        name = rng.choice(entries)[0]
        return _zip([(n, mutate_bytes(rng, d) if n == name else d) for n, d in entries])
    return mutate_bytes(rng, base["model.npz"])


def load_pt(raw):
    from ember.io import torch_pickle
    return torch_pickle.read(raw)


def _pt_with_pickle(pkl: bytes, storages: dict) -> bytes:
    return _zip([("archive/data.pkl", pkl), ("archive/byteorder", b"little"), ("archive/version", b"3\n")]
                + [(f"archive/data/{k}", v) for k, v in storages.items()])


def gen_pt(rng, base):
    from ember.io.torch_save import _global, _int, _str, _tuple
    kind = rng.random()
    if kind < 0.25:  # stride/shape/offset attacks on one float storage of n elements
        n = rng.choice([0, 1, 4, 64])
        ndim = rng.randrange(0, 5)
        shape = [rng.choice([0, 1, 2, 3, 1000, 2 ** 20, 2 ** 31]) for _ in range(ndim)]
        stride = [rng.choice([0, 1, 2, 4, 2 ** 20, 2 ** 40]) for _ in range(ndim)]
        offset = rng.choice([0, 1, n, n + 1, 2 ** 40])
        storage = b"(" + _str("storage") + _global("torch", "FloatStorage") + _str("0") + _str("cpu") + _int(n) + b"tQ"
        t = (_global("torch._utils", "_rebuild_tensor_v2") + b"(" + storage + _int(offset) + _tuple(shape)
             + _tuple(stride) + b"\x89" + _global("collections", "OrderedDict") + b")R" + b"tR")
        many = rng.choice([1, 1, 100])  # the same expansion many times: the budget counts each
        pkl = b"\x80\x02}(" + b"".join(_str(f"t{i}") + t for i in range(many)) + b"u."
        return _pt_with_pickle(pkl, {"0": b"\0" * (4 * n)})
    if kind < 0.35:  # deep nesting: tuples/lists/dicts, as a value, a dict key or a set member
        depth = rng.choice([100, 1000, 10 ** 4, 10 ** 5] * 8 + [10 ** 6])  # 1e6: the SIGSEGV
        body = rng.choice([b"]" * depth + b"a" * (depth - 1),       # lists in lists (EMPTY_LIST, APPEND)
                           b")" + b"\x85" * depth,                   # tuples in tuples (TUPLE1)
                           b"}" + b")" + b"\x85" * depth + b"K\x01s",  # a deep tuple as a dict key
                           b"\x8f(" + b")" + b"\x85" * depth + b"\x90"])  # ... as a set member (ADDITEMS)
        return _pt_with_pickle(b"\x80\x02" + body + b".", {})
    if kind < 0.45:
        key = rng.choice(list(base["pt_entries"]))
        entries = dict(base["pt_entries"])
        entries[key] = mutate_bytes(rng, entries[key])
        return _zip(list(entries.items()))
    if kind < 0.85:
        entries = dict(base["pt_entries"])
        pkl_name = next(n for n in entries if n.endswith("data.pkl"))
        entries[pkl_name] = mutate_bytes(rng, entries[pkl_name], lo=2)
        return _zip(list(entries.items()))
    return mutate_bytes(rng, base["model.pt"])


def load_ct2(raw):
    from ember.models.whisper.ct2 import read_ct2
    return read_ct2(raw)


def gen_ct2(rng, base):
    raw = base["model.bin"]
    if rng.random() < 0.4:
        return _u64_poke(rng, raw, len(raw))
    return mutate_bytes(rng, raw)


def load_onnx(raw):
    """Load, then run on feeds made from the declared inputs (a run-time failure must be ember's error too)."""
    from ember.onnx import InferenceSession
    from onnx_graphs import feeds
    sess = InferenceSession(raw)
    return sess.run(None, feeds(sess))


def gen_onnx(rng, base):
    raw = base["model.onnx"]
    if rng.random() < 0.15:  # varint fields poked: lengths, dims, data types
        b = bytearray(raw)
        i = rng.randrange(len(b))
        b[i:i + 1] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\x00", b"\x7f"])
        return bytes(b)
    return mutate_bytes(rng, raw)


# ---------------------------------------------------------------- tokenizer.json, config.json

TEXTS = ["Hello world, it's 2024!", "naïve café 日本語 👍🏽  x", "aaaaaaaaaaaaaaaaaaaaaaaaaa!", ""]


def load_tokenizer(raw, backend="python"):
    from ember.tokenizers import Tokenizer
    tok = Tokenizer.from_buffer(raw, backend=backend)
    for t in TEXTS:
        ids = tok.encode(t).ids
        tok.decode(ids)
    tok.encode_batch(TEXTS[:2])
    return tok


def gen_tokenizer(rng, base):
    cfg = rng.choice(base["tokenizers"])
    kind = rng.random()
    if kind < 0.1:  # hostile regexes and lengths in the places that take them
        cfg = json.loads(json.dumps(cfg))
        cfg["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": rng.choice(
            ["(a+)+$", "(a|a)*$", "(?:x*)*y", "((ab)*)*c", "x" * 10000, "[", "(?<", "\\p{Zzzz}", "(a{1,1000}){1,1000}"])},
            "behavior": "Isolated", "invert": False}
        if rng.random() < 0.5:
            cfg["padding"] = {"strategy": {"Fixed": rng.choice([10 ** 9, 2 ** 63, -1, 1.5])}, "direction": "Right",
                              "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}
        return json.dumps(cfg).encode()
    return json_bytes(rng, cfg)


def load_tokenizer_native(raw):
    return load_tokenizer(raw, backend="native")


def load_config(raw):
    """config.json through one family's loader (the family is the input's first byte's choice, made by
    gen_config): tiny real weights beside it, a forward whose output must be finite (tests/fuzz/configs.py);
    and YOLO's reader of the same JSON."""
    import configs
    family, raw = raw.split(b"\0", 1)
    family = family.decode()
    folders = json.loads(os.environ["FUZZ_FAMILY_DIRS"])
    configs.load(family, folders[family], raw)
    try:
        c = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(c, dict):
        from ember.models.yolo.config import YoloConfig
        from ember.errors import EmberError
        try:
            YoloConfig.from_metadata({"ember.arch": "yolov8", "ember.yolo.config": json.dumps(c)})
        except EmberError:
            pass
    return None


def gen_config(rng, base):
    """b"<family>\0<config.json>": a family's config, mutated as JSON, or with one of the issue's holes."""
    family = rng.choice(sorted(base["configs"]))
    cfg = base["configs"][family]
    if rng.random() < 0.25:  # a known hole at a known field, or a NaN/inf/bool anywhere numeric
        cfg = json.loads(json.dumps(cfg))
        keys = [k for k, v in cfg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if keys:
            cfg[rng.choice(keys)] = rng.choice([float("nan"), float("inf"), -1e-5, 0, True, "1", {}, [], None, 1e300])
        return family.encode() + b"\0" + json.dumps(cfg).encode()
    return family.encode() + b"\0" + json_bytes(rng, cfg)


def load_onnx_graph(raw):
    return load_onnx(raw)


def gen_onnx_graph(rng, base):
    """A graph generated from the operator catalogue (tests/fuzz/onnx_graphs.py), mutated half the time."""
    from onnx_graphs import generate, mutate
    raw = generate(rng)
    return mutate(rng, raw) if rng.random() < 0.5 else raw


def load_api(raw):
    import api_requests
    return api_requests.load(raw)


def gen_api(rng, base):
    import api_requests
    return api_requests.gen(rng, base)


def load_serve(raw):
    import serve_requests
    return serve_requests.load(raw)


def gen_serve(rng, base):
    import serve_requests
    return serve_requests.gen(rng, base)


# ---------------------------------------------------------------- media

def load_wav(raw):
    from ember.models.whisper.audio import load_audio
    return load_audio(raw)


def gen_wav(rng, base):
    raw = rng.choice(base["wavs"])
    kind = rng.random()
    if kind < 0.4:  # fmt fields: channels, rate, byte rate, block align, bits; chunk sizes
        field = rng.choice([(22, 2), (24, 4), (28, 4), (32, 2), (34, 2), (4, 4), (16, 4), (40, 4)])
        at, width = field
        v = rng.choice([0, 1, 3, 7, 255, 1000, 1_000_003, 10 ** 7, 2 ** 31 - 1, 2 ** 32 - 1]) % (1 << (8 * width))
        return raw[:at] + v.to_bytes(width, "little") + raw[at + width:]
    return mutate_bytes(rng, raw)


def load_image(raw):
    from ember.models.yolo.image import load_image as load
    return load(raw)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def gen_image(rng, base):
    kind = rng.random()
    if kind < 0.2:  # a PNG header claiming a huge frame (valid CRC), over a tiny IDAT
        w, h = rng.choice([(65535, 65535), (13000, 13000), (1, 2 ** 31 - 1), (0, 5), (9000, 9000)])
        ihdr = struct.pack(">IIBBBBB", w, h, 8, rng.choice([0, 2, 6, 3]), 0, 0, 0)
        idat = zlib.compress(b"\0" * rng.choice([16, 1 << 20]))
        return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")
    if kind < 0.35:  # a JPEG whose SOF frame size is forged
        raw = bytearray(base["image.jpg"])
        sof = raw.find(b"\xff\xc0")
        if sof >= 0:
            raw[sof + 5:sof + 9] = struct.pack(">HH", *rng.choice([(9000, 9000), (65535, 65535), (0, 0), (1, 65535)]))
        return bytes(raw)
    return mutate_bytes(rng, rng.choice([base["image.png"], base["image.jpg"]]), lo=rng.choice([0, 8, 16]))


def load_selftest(raw):
    """The harness's own check: one input per outcome it must tell apart."""
    import signal

    import numpy as np
    from ember.errors import FormatError
    if raw == b"ember":
        raise FormatError("ember: refused")
    if raw == b"other":
        raise TypeError("a raw error")
    if raw == b"memory":
        return np.ones(8 << 30, np.uint8)  # past the address-space cap
    if raw == b"hang":
        while True:
            pass
    if raw == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)


def gen_selftest(rng, base):
    return base["cases"][rng.randrange(len(base["cases"]))]


def _chat_formats() -> dict:
    """GGUF BPE vocabularies and chat templates, where the modules exist (hooks: tests/fuzz/chat_inputs.py)."""
    import chat_inputs as ci
    return {"gguf-bpe": (ci.load_gguf_bpe, ci.gen_gguf_bpe), "chat-template": (ci.load_template, ci.gen_template),
            "json-schema": (ci.load_json_schema, ci.gen_json_schema)}


FORMATS = {  # name -> (loader, generator)
    "selftest": (load_selftest, gen_selftest),
    "safetensors": (load_safetensors, gen_safetensors),
    "gguf": (load_gguf, gen_gguf),
    "npz": (load_npz, gen_npz),
    "pt": (load_pt, gen_pt),
    "ct2": (load_ct2, gen_ct2),
    "onnx": (load_onnx, gen_onnx),
    "tokenizer": (load_tokenizer, gen_tokenizer),
    "tokenizer-native": (load_tokenizer_native, gen_tokenizer),
    "config": (load_config, gen_config),
    "wav": (load_wav, gen_wav),
    "image": (load_image, gen_image),
    "onnx-graph": (load_onnx_graph, gen_onnx_graph),
    "serve": (load_serve, gen_serve),
    "api": (load_api, gen_api),
    **_chat_formats(),
}
