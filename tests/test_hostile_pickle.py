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
