"""Hostile .pt checkpoints: attacker-controlled depth and tensor geometry give an ember LimitError /
FormatError, never a signal, a RecursionError or gigabytes of memory (issue #17's reproducers)."""
import io
import pickle
import subprocess
import sys
import textwrap
import zipfile

import ember
import numpy as np
import pytest
from ember.io import torch_pickle as tp


def torch_zip(pkl: bytes, entries=None) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
        for k, v in (entries or {}).items():
            z.writestr(f"archive/data/{k}", v)
    return b.getvalue()


def deep_tuple(n: int) -> bytes:
    """Pickle opcodes pushing ((((),),),) nested n deep: EMPTY_TUPLE then n TUPLE1."""
    return b")" + b"\x85" * n


# each holds the deep tuple where Python hashes it: a dict key, a set member, a frozenset, set() called
HASHED = {
    "dict key (SETITEM)": lambda t: b"\x80\x02}" + t + b"K\x01s.",
    "dict key (DICT)": lambda t: b"\x80\x02(" + t + b"K\x01d.",
    "set member (ADDITEMS)": lambda t: b"\x80\x04\x8f(" + t + b"\x90.",
    "frozenset member": lambda t: b"\x80\x04(" + t + b"\x91.",
    "builtins.set call": lambda t: b"\x80\x02c__builtin__\nset\n(" + t + b"\x85\x85R.",
}


@pytest.mark.parametrize("where", list(HASHED))
def test_a_million_deep_tuple_is_a_limit_error_not_a_crash(where):
    # in a child process: before the fix this was SIGSEGV (hashing recursed on the C stack)
    code = textwrap.dedent(f"""
        import sys, ember
        from ember.io import torch_pickle as tp
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_hostile_pickle import HASHED, deep_tuple, torch_zip
        try:
            tp.load_pickle(torch_zip(HASHED[{where!r}](deep_tuple(1_000_000))))
        except ember.LimitError as e:
            print("LIMIT", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.startswith("LIMIT ember: <"), r.stdout + r.stderr[-2000:]
    assert "pickle nesting depth" in r.stdout and "over the limit of 200" in r.stdout
    assert "pickle_depth" in r.stdout  # names the setting that raises it


@pytest.mark.parametrize("n", [10_000, 201])
def test_deep_lists_and_records_are_refused(n):
    # lists (RecursionError in repr before) and records holding records (REDUCE on an unknown global)
    deep_list = b"\x80\x02" + b"(" * n + b"l" * n + b"."
    with pytest.raises(ember.LimitError, match="pickle nesting depth"):
        tp.load_pickle(torch_zip(deep_list))
    records = b"\x80\x02" + b"cfoo\nBar\n" * n + b")" + b"\x85R" * n + b"."
    with pytest.raises(ember.LimitError, match="pickle nesting depth"):
        tp.load_pickle(torch_zip(records))


def test_nesting_below_the_limit_loads_as_pickle_does():
    # the reference is Python's own unpickler on the same bytes: 150 levels of mixed containers
    obj = "leaf"
    for i in range(150):
        obj = [obj] if i % 3 == 0 else (obj, i) if i % 3 == 1 else {f"k{i}": obj, (i, (i,)): i}
    pkl = pickle.dumps(obj, protocol=2)
    assert tp.load_pickle(torch_zip(pkl)) == pickle.loads(pkl)


def test_the_depth_limit_is_configurable(monkeypatch):
    pkl = b"\x80\x02}" + deep_tuple(300) + b"K\x01s."
    with pytest.raises(ember.LimitError):
        tp.load_pickle(torch_zip(pkl))
    monkeypatch.setattr(ember.limits.budget, "pickle_depth", 400)
    (key,) = tp.load_pickle(torch_zip(pkl))
    assert key == next(iter(pickle.loads(pkl)))


def _stride0_tensors(n: int) -> bytes:
    """A dict of n tensors, each 2**24 float32 elements of stride 0 over one 4-byte storage (64 MB each)."""
    rebuild = (b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
               b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQK\x00J\x00\x00\x00\x01\x85K\x00\x85\x89}tR")
    body = b"".join(b"X" + len(k).to_bytes(4, "little") + k + rebuild for k in (f"t{i}".encode() for i in range(n)))
    return torch_zip(b"\x80\x02}(" + body + b"u.", {"0": bytes(4)})


def test_stride0_expansion_is_bounded_in_total():
    # before: 40 such tensors (a 5.6 KB file) materialised 2.6 GB; now the file's budget stops it
    src = _stride0_tensors(40)
    assert len(src) < 10_000
    budget = ember.limits.budget.load_bytes(len(src))
    with pytest.raises(ember.LimitError, match=rf"materialised bytes is \d+ bytes, over the limit of {budget}"):
        ember.io.load(src)


def test_stride0_within_the_budget_loads_like_torch():
    import torch  # the reference (a test dependency, installed by .ci/install)
    src = _stride0_tensors(2)
    got = ember.io.load(src)
    ref = torch.load(io.BytesIO(src), weights_only=True)
    for k in ref:
        np.testing.assert_array_equal(got[k].numpy(), ref[k].numpy())


# ---------------------------------------------------------------- shared references: "billion laughs"

def laughs(levels: int) -> bytes:
    """Opcodes pushing t_levels where t_0 = () and t_i = (t_{i-1}, t_{i-1}): two references to one memo entry,
    so the pickle grows by 5 bytes a level while the tuple's expanded size doubles (2^64 nodes at 64)."""
    body = b")"
    for i in range(levels):
        body += b"q" + bytes([i % 256]) + b"h" + bytes([i % 256]) + b"\x86"  # BINPUT i, BINGET i, TUPLE2
    return body


LAUGH_CASES = {
    "dict key (SETITEM)": lambda t: b"\x80\x02}" + t + b"K\x01s.",
    "dict key (DICT)": lambda t: b"\x80\x02(" + t + b"K\x01d.",
    "frozenset member": lambda t: b"\x80\x04(" + t + b"\x91.",
    "set member (ADDITEMS)": lambda t: b"\x80\x04\x8f(" + t + b"\x90.",
    "builtins.set call": lambda t: b"\x80\x02c__builtin__\nset\n" + t + b"\x85\x85R.",
    "OrderedDict pairs": lambda t: b"\x80\x02ccollections\nOrderedDict\n" + t + b"K\x01\x86\x85\x85R.",
    "tensor subclass calling set": lambda t: (b"\x80\x02ctorch._tensor\n_rebuild_from_type_v2\n(c__builtin__\nset\n"
                                              b"N" + t + b"\x85\x85}tR."),
}


@pytest.mark.parametrize("where", list(LAUGH_CASES))
def test_a_billion_laughs_pickle_is_refused_in_bounded_time(where):
    # 64 levels (under the depth limit of 200) hashed as a key or member: 2^64 work; before, it hung forever
    code = textwrap.dedent(f"""
        import sys, time, ember
        from ember.io import torch_pickle as tp
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_hostile_pickle import LAUGH_CASES, laughs, torch_zip
        src = torch_zip(LAUGH_CASES[{where!r}](laughs(64)))
        print("SIZE", len(src))
        t0 = time.perf_counter()
        try:
            tp.load_pickle(src)
        except ember.EmberError as e:
            print("REFUSED", type(e).__name__, e)
        print("SECONDS", time.perf_counter() - t0)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert int(lines["SIZE"]) < 1200  # an ~800-byte file
    if where == "tensor subclass calling set":
        assert lines["REFUSED"].startswith("FormatError") and "_rebuild_from_type_v2" in lines["REFUSED"]
    else:
        assert lines["REFUSED"].startswith("LimitError") and "pickle hashing work" in lines["REFUSED"], r.stdout
        assert "pickle_work" in lines["REFUSED"]  # names the setting that raises it
    assert float(lines["SECONDS"]) < 5


def test_shared_references_within_the_budget_load_as_pickle_does():
    # the reference is Python's own unpickler: 16 levels of laughs (65,535 nodes) as a key, a set member and
    # a value; and one tuple referenced by 1,000 keys' values
    t = pickle.loads(b"\x80\x02" + laughs(16) + b".")
    shared = tuple(range(50))
    obj = {t: 1, "s": frozenset([t]), "v": [t, t], **{f"k{i}": shared for i in range(1000)}}
    pkl = pickle.dumps(obj, protocol=2)
    assert tp.load_pickle(torch_zip(pkl)) == pickle.loads(pkl)


def test_the_hashing_work_limit_is_configurable(monkeypatch):
    pkl = b"\x80\x02}" + laughs(20) + b"K\x01s."  # 2^21 - 1 nodes hashed
    monkeypatch.setattr(ember.limits.budget, "pickle_work", 1 << 20)
    with pytest.raises(ember.LimitError, match="pickle hashing work"):
        tp.load_pickle(torch_zip(pkl))
    monkeypatch.setattr(ember.limits.budget, "pickle_work", 1 << 22)
    assert tp.load_pickle(torch_zip(pkl)) == pickle.loads(pkl)


# ---------------------------------------------------------------- zip bombs

def _bomb(names: int, inflated: int) -> bytes:
    """A .pt whose pickle references `names` storages only as empty tensors (nothing for a tensor budget to
    count), each storage a deflated entry of `inflated` zero bytes (deflate shrinks them ~1000x)."""
    rebuild = lambda k: (b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nByteStorage\n"
                         + b"X" + len(k).to_bytes(4, "little") + k + b"X\x03\x00\x00\x00cpuJ"
                         + inflated.to_bytes(4, "little") + b"tQK\x00K\x00\x85K\x01\x85\x89}tR")
    pkl = b"\x80\x02](" + b"".join(rebuild(str(i).encode()) for i in range(names)) + b"e."
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
        for i in range(names):
            z.writestr(f"archive/data/{i}", bytes(inflated), compress_type=zipfile.ZIP_DEFLATED)
    return b.getvalue()


def test_a_pt_zip_bomb_is_refused_before_it_inflates(monkeypatch):
    import tracemalloc
    src = _bomb(names=12, inflated=8 << 20)  # 12 x 8 MB declared from ~100 KB
    assert len(src) < 150_000
    # the budget: 4 x the file + 4 MB; before, all 96 MB were inflated (no tensor uses a byte of them)
    monkeypatch.setattr(ember.limits.budget, "load_allowance", 4 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ember.LimitError, match=r"zip entry 'archive/data/0': uncompressed bytes.*"
                                                   r"materialised bytes is 83898\d\d bytes"):
            tp.load_pickle(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # refused on the declared size: nothing inflated


def test_a_small_deflated_checkpoint_within_the_budget_loads():
    # the same layout, 3 names of 1 MB: within the budget, and equal to what torch reads
    import torch
    src = _bomb(names=3, inflated=1 << 20)
    got = tp.load_pickle(src, numpy=True)
    ref = torch.load(io.BytesIO(src), weights_only=True)
    assert [g.array.shape for g in got] == [tuple(r.shape) for r in ref] == [(0,)] * 3
