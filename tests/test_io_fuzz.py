"""Fuzz the safetensors, torch .pth and .npz readers: thousands of mutated files, each either loads or raises
ember's FormatError — no other exception, no hang, no allocation beyond what the file can back."""
import io
import json
import random
import struct
import time
import zipfile

import numpy as np
import pytest
import safetensors.torch
import torch
from ember.io import FormatError, npz
from ember.io import safetensors as st
from ember.io import torch_pickle as tp

N_SAFETENSORS, N_PICKLE, N_ZIP, N_NPZ = 4000, 3000, 500, 1000
SPECIAL = [0, 1, 0x7F, 0x80, 0xFF, ord("{"), ord('"'), ord("9"), ord("-"), ord("["), ord("]")]


def _mutate_bytes(rng, raw: bytes, lo=0) -> bytes:
    """Bit flips, byte overwrites, truncation, insertion or deletion at random positions >= lo."""
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        if len(b) <= lo:
            break
        i, kind = rng.randrange(lo, len(b)), rng.random()
        if kind < 0.35:
            b[i] ^= 1 << rng.randrange(8)
        elif kind < 0.65:
            b[i] = rng.choice(SPECIAL) if rng.random() < 0.5 else rng.randrange(256)
        elif kind < 0.75:
            del b[i:]
        elif kind < 0.88:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            del b[i:i + rng.randint(1, 8)]
    return bytes(b)


def _mutate_header(rng, raw: bytes) -> bytes:
    """Structured mutations of the safetensors JSON header (keeps it valid JSON)."""
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    name = rng.choice([k for k in header if k != "__metadata__"])
    e = header[name]
    choice = rng.randrange(8)
    if choice == 0:
        e["dtype"] = rng.choice(["F32", "F16", "BF16", "I16", "U64", "F8_E4M3", "F4", "X", 3, None])
    elif choice == 1:
        e["shape"] = rng.choice([[], [0], [-1], [2 ** 62, 2 ** 62], [1.5], "3", [True], list(range(70))])
    elif choice == 2:
        e["data_offsets"][rng.randrange(2)] += rng.choice([-1, 1, -8, 8, 2 ** 40, -(2 ** 40)])
    elif choice == 3:
        del e[rng.choice(list(e))]
    elif choice == 4:
        header["__metadata__"] = rng.choice([{"a": 1}, [], "x", {"a": "b"}, None])
    elif choice == 5:
        header[name] = rng.choice([[], 1, "x", None, {}])
    elif choice == 6:
        data = data[:rng.randrange(len(data) + 1)]
    else:
        e["data_offsets"] = rng.choice([[0], [0, 1, 2], "0,4", None, [0.0, 4.0]])
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def _check(read, raw, case, size=None):
    try:
        out = read(raw)
    except FormatError as e:
        assert str(e).startswith("ember: "), case
        return
    except Exception as e:
        pytest.fail(f"{case}: {type(e).__name__}: {e}")
    for v in (out.values() if isinstance(out, dict) else ()):
        assert v.array.nbytes <= max(size or len(raw), 1) << 26, case  # nothing the file cannot back


@pytest.fixture(scope="module")
def st_base():
    g = torch.Generator().manual_seed(0)
    return safetensors.torch.save({"a": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g).bfloat16(),
                                   "c": torch.arange(6).reshape(2, 3), "d": torch.ones(2, dtype=torch.bool),
                                   "e": torch.zeros(0, 3, dtype=torch.float16)}, metadata={"k": "v"})


@pytest.fixture(scope="module")
def pth_base():
    base = torch.randn(4, 6)
    b = io.BytesIO()
    torch.save({"model": {"w": base.t(), "v": base[1:, 2:], "p": torch.nn.Parameter(torch.randn(3).half()),
                          "i": torch.arange(4, dtype=torch.int32), "n": {"x": torch.ones(2).bfloat16()}},
                "epoch": 3, "names": ["a", "b"]}, b)
    z = zipfile.ZipFile(io.BytesIO(b.getvalue()))
    return b.getvalue(), {n: z.read(n) for n in z.namelist()}


def test_fuzz_safetensors(st_base):
    rng, t0 = random.Random(1234), time.perf_counter()
    for i in range(N_SAFETENSORS):
        raw = _mutate_header(rng, st_base) if i % 3 == 0 else _mutate_bytes(rng, st_base)
        if i % 5 == 0:  # a clobbered header length, small or absurd
            raw = struct.pack("<Q", rng.choice([0, 1, 7, len(raw), 2 ** 32, 2 ** 64 - 1])) + raw[8:]
        _check(st.read, raw, f"safetensors case {i}")
    assert time.perf_counter() - t0 < 15


def test_fuzz_safetensors_files_through_mmap(st_base, tmp_path):
    rng, path = random.Random(99), tmp_path / "f.safetensors"
    for i in range(200):
        path.write_bytes(_mutate_bytes(rng, st_base))
        for mmap in (True, False):
            _check(lambda p, m=mmap: st.read(p, mmap=m), path, f"file case {i} mmap={mmap}", path.stat().st_size)


def _rezip(entries: dict) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for n, v in entries.items():
            z.writestr(n, v)
    return b.getvalue()


def test_fuzz_torch_pickle(pth_base):
    _, entries = pth_base
    pkl_name = next(n for n in entries if n.endswith("data.pkl"))
    rng, t0 = random.Random(4321), time.perf_counter()
    for i in range(N_PICKLE):
        mutated = dict(entries)
        if i % 10 == 0:  # a storage entry of the wrong size
            key = rng.choice([n for n in entries if "/data/" in n])
            mutated[key] = _mutate_bytes(rng, entries[key])
        else:
            mutated[pkl_name] = _mutate_bytes(rng, entries[pkl_name], lo=2)
        _check(tp.read, _rezip(mutated), f"pickle case {i}")
    assert time.perf_counter() - t0 < 15


def test_fuzz_torch_zip_bytes(pth_base):
    raw, _ = pth_base
    rng = random.Random(777)
    for i in range(N_ZIP):
        _check(tp.read, _mutate_bytes(rng, raw), f"zip case {i}")


def test_fuzz_npz():
    b = io.BytesIO()
    np.savez(b, a=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.array([True, False]),
             c=np.asfortranarray(np.ones((2, 2))))
    z = zipfile.ZipFile(io.BytesIO(b.getvalue()))
    entries = {n: z.read(n) for n in z.namelist()}
    rng = random.Random(55)
    for i in range(N_NPZ):
        mutated = dict(entries)
        key = rng.choice(list(entries))
        mutated[key] = _mutate_bytes(rng, entries[key])
        _check(lambda raw: npz.read(raw)[0], _rezip(mutated), f"npz case {i}")
