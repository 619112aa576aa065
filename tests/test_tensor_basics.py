"""Tensor creation, dtypes (exact bfloat16), conversion, devices, grad mode and import hygiene."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ember

DT = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool"]


@pytest.mark.parametrize("dt", DT)
def test_creation_matches_torch(device, dt):
    e, t = getattr(ember, dt if dt != "bool" else "bool_"), getattr(torch, dt)
    if not ember.device(device).backend.supports(e):
        pytest.skip(f"{device} has no {dt} (backend.supports says so)")
    pairs = [
        (ember.zeros(2, 3, dtype=e, device=device), torch.zeros(2, 3, dtype=t)),
        (ember.ones((4,), dtype=e, device=device), torch.ones((4,), dtype=t)),
        (ember.full((2, 2), 1, dtype=e, device=device), torch.full((2, 2), 1, dtype=t)),
        (ember.tensor([[1, 0], [3, 4]], dtype=e, device=device), torch.tensor([[1, 0], [3, 4]], dtype=t)),
        (ember.zeros_like(ember.ones(3, 1, dtype=e, device=device)), torch.zeros_like(torch.ones(3, 1, dtype=t))),
    ]
    if dt != "bool":
        pairs.append((ember.arange(1, 7, 2, dtype=e, device=device), torch.arange(1, 7, 2, dtype=t)))
        pairs.append((ember.eye(3, 2, dtype=e, device=device), torch.eye(3, 2, dtype=t)))
    for a, b in pairs:
        assert a.dtype is e and a.shape == tuple(b.shape)
        np.testing.assert_array_equal(a.float().numpy() if dt != "bool" else a.numpy(),
                                      b.float().numpy() if dt != "bool" else b.numpy())


def test_default_dtypes_and_linspace(device):
    assert ember.tensor([1.5]).dtype is ember.float32 and ember.tensor([1]).dtype is ember.int64
    assert ember.tensor(True).dtype is ember.bool_ and ember.arange(3.0).dtype is ember.float32
    assert ember.from_numpy(np.zeros(2)).dtype is ember.float64  # from_numpy keeps the numpy dtype (torch)
    np.testing.assert_allclose(ember.linspace(-1, 2, 7, device=device).numpy(), torch.linspace(-1, 2, 7).numpy(), atol=1e-7)
    assert ember.tensor(3.5).item() == 3.5 and ember.tensor([[1, 2]]).tolist() == [[1, 2]]
    assert int(ember.tensor([7])) == 7 and float(ember.tensor(2.5)) == 2.5


def test_bfloat16_is_exact_round_to_nearest_even():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 20000),
                        np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-40, 1.00390625, 1.01171875], np.float32)])
    x = x.astype(np.float32)
    want = torch.tensor(x).bfloat16()
    got = ember.tensor(x).bfloat16()
    np.testing.assert_array_equal(got._storage_numpy(), want.view(torch.int16).numpy().view(np.uint16))
    np.testing.assert_array_equal(got.numpy(), want.float().numpy())  # and back to float32 exactly
    nan = ember.tensor([float("nan")]).bfloat16()
    assert np.isnan(nan.numpy()).all()  # NaN stays NaN (torch uses another NaN bit pattern; both are NaN)


def test_float16_roundtrip_and_compute():
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(ember.tensor(x).half().numpy(), torch.tensor(x).half().numpy())
    a = ember.tensor(x).half()
    assert (a * a).dtype is ember.float16 and (a + 1.5).dtype is ember.float16
    assert (a + ember.tensor(x)).dtype is ember.float32
    assert (a + a.bfloat16()).dtype is ember.float32  # as torch: f16 + bf16 -> f32


def test_seeded_random_is_deterministic(device):
    ember.manual_seed(123)
    a, b = ember.rand(3, 4, device=device), ember.randn(5, device=device)
    ember.manual_seed(123)
    assert np.array_equal(ember.rand(3, 4, device=device).numpy(), a.numpy())
    assert np.array_equal(ember.randn(5, device=device).numpy(), b.numpy())
    r = ember.rand(10000).numpy()
    assert 0 <= r.min() and r.max() < 1 and abs(r.mean() - 0.5) < 0.02
    n = ember.randn(10000).numpy()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    assert sorted(ember.randperm(6).tolist()) == list(range(6))
    i = ember.randint(2, 5, (100,))
    assert i.dtype is ember.int64 and 2 <= i.min().item() and i.max().item() < 5


def test_to_and_copy_semantics(device):
    x = ember.arange(6, device=device).reshape(2, 3)
    assert x.to(ember.float32).dtype is ember.float32 and x.float().to("cpu").device == "cpu"
    y = x.clone()
    y[0, 0] = 100
    assert x[0, 0].item() == 0 and y[0, 0].item() == 100
    a = np.arange(3.0, dtype=np.float32)
    t = ember.from_numpy(a)
    a[0] = 9.0  # from_numpy shares memory on the CPU, as torch does
    assert t[0].item() == 9.0
    assert ember.tensor(a)[0].item() == 9.0 and ember.tensor(a) is not t


def test_grad_modes():
    x = ember.ones(2, requires_grad=True)
    with ember.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = (x * 2).detach()
    assert not z.requires_grad and z.is_leaf

    @ember.no_grad()
    def f(v):
        return v * 3
    assert not f(x).requires_grad and ember.is_grad_enabled()
    with ember.set_grad_enabled(False):
        assert not (x + 1).requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        ember.ones(2).sum().backward()
    with pytest.raises(RuntimeError, match="floating-point"):
        ember.ones(2, dtype=ember.int64).requires_grad_()
    with pytest.raises(RuntimeError, match="in-place"):
        x += 1


def test_grad_accumulates_and_deep_graph_does_not_recurse():
    x = ember.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5, 5, 5])
    y = x
    for _ in range(5000):  # a long chain must not hit Python's recursion limit
        y = y * 1.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6, 6, 6])


def test_device_errors(monkeypatch):
    D = sys.modules["ember.device"]  # (ember.device is the function)
    monkeypatch.setattr(D, "_REGISTRY", dict(D._REGISTRY))  # the fake backends below stay in this test
    with pytest.raises(ember.DeviceError, match="unknown device 'tpu'"):
        ember.zeros(2, device="tpu")
    ember.register_backend("fakegpu", "ember_missing_gpu_lib", "Backend", "ember[fakegpu]  (pip install fakegpu)")
    with pytest.raises(ember.DeviceError, match=r"device 'fakegpu' is not available.*install ember\[fakegpu\]"):
        ember.zeros(2, device="fakegpu")
    assert "fakegpu" not in ember.devices()
    ok, why = D.device_status("fakegpu")
    assert not ok and "No module named 'ember_missing_gpu_lib'" in why and "pip install fakegpu" in why


@pytest.mark.parametrize("name", ["metal", "wgpu", "gpu", "mps", "Metal:0"])
def test_gpu_names_that_are_not_devices_say_which_is(name):
    with pytest.raises(ember.DeviceError, match=rf"'{name}' is not a device name; use 'webgpu'"):
        ember.device(name)


def test_a_broken_backend_is_loud_not_unavailable(monkeypatch, capsys):
    # only "library or hardware missing" drops a device from ember.devices() (and the parity suite)
    D = sys.modules["ember.device"]  # (ember.device is the function)
    monkeypatch.setattr(D, "_REGISTRY", dict(D._REGISTRY))
    monkeypatch.setattr(D, "_BACKENDS", dict(D._BACKENDS))
    D.register_backend("brokengpu", "ember.no_such_backend_module", "Backend")  # an ember module that is broken
    with pytest.raises(ModuleNotFoundError, match="ember.no_such_backend_module"):
        ember.devices()
    del D._REGISTRY["brokengpu"]

    class Buggy:
        def __init__(self, index):
            raise ZeroDivisionError("a bug in the backend's constructor")
    monkeypatch.setitem(sys.modules, "ember_test_buggy_backend", type(sys)("ember_test_buggy_backend"))
    sys.modules["ember_test_buggy_backend"].Backend = Buggy
    D.register_backend("buggygpu", "ember_test_buggy_backend", "Backend")
    with pytest.raises(ZeroDivisionError):
        ember.devices()
    from ember.cli import main_info
    assert main_info() == 1  # ember info shows the other devices, the traceback, and fails
    out = capsys.readouterr().out
    assert "  buggygpu: BROKEN" in out and "ZeroDivisionError: a bug in the backend's constructor" in out
    assert "  cpu: available" in out


def test_info_shows_each_device_and_why_not(capsys):
    from ember.cli import main_info
    from ember.device import device_status
    assert main_info() == 0
    out = capsys.readouterr().out
    assert "  cpu: available (" in out
    for name in ("webgpu", "cuda"):
        ok, why = device_status(name)
        assert f"  {name}: {'available' if ok else 'unavailable'} ({why})" in out
        assert ok == (name in ember.devices())
    assert "  metal: use 'webgpu'" in out


def test_dtype_errors():
    with pytest.raises(TypeError, match="unknown dtype"):
        ember.zeros(2, dtype="complex64")
    with pytest.raises(TypeError, match="cannot make a tensor from numpy dtype complex64"):
        ember.from_numpy(np.zeros(2, dtype=np.complex64))


def test_import_is_light():
    # a count, not a clock: `import ember` loads a bounded set of the core's own modules and numpy, never a
    # GPU library, the models, io or quant
    code = ("import json, sys; before = set(sys.modules); import ember; new = set(sys.modules) - before; "
            "bad = [m for m in ('torch', 'wgpu', 'cupy', 'js', 'pyodide', 'ember.io', 'ember.webgpu', "
            "'ember.models', 'ember.tokenizers', 'ember.quant', 'PIL', 'scipy') if m in sys.modules]; "
            "print(json.dumps([bad, sorted(m for m in new if m.split('.')[0] == 'ember')]))")
    bad, ember_modules = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert bad == [], f"import ember pulled in: {bad}"
    assert len(ember_modules) <= 24, f"import ember loads {len(ember_modules)} ember modules: {ember_modules}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning is Linux-only")
def test_freed_activations_are_reused_without_page_faults():
    # keep_freed_memory (called by the CLI and benchmarks, never on import) keeps freed blocks in the heap: a
    # model's next activation of the same size must not fault in fresh pages (glibc's default trims them,
    # ~2 us per 4 KB page); EMBER_MALLOC_TUNING=0 opts out
    code = ("import resource, numpy as np, ember\n"
            "from ember.backends.cpu_malloc import keep_freed_memory\n"
            "ember.ones(2); keep_freed_memory()\n"
            "def refill():\n"
            "    a = [np.ones(2 << 20, np.float32) for _ in range(4)]; del a\n"
            "    f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "    b = [np.ones(2 << 20, np.float32) for _ in range(4)]\n"
            "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f\n"
            "refill(); print(refill())")
    tuned = int(subprocess.check_output([sys.executable, "-c", code], text=True))
    env = {**os.environ, "EMBER_MALLOC_TUNING": "0"}
    default = int(subprocess.check_output([sys.executable, "-c", code], text=True, env=env))
    assert tuned < 50, f"{tuned} page faults refilling 32 MB of freed activations ({default} untuned)"
    assert default > 500, f"this glibc did not trim the heap untuned ({default} faults): the test shows nothing"
    untouched = int(subprocess.check_output([sys.executable, "-c", code.replace("; keep_freed_memory()", "")], text=True))
    assert untouched > 500, f"import ember or the cpu backend tuned malloc by itself ({untouched} faults)"


def _thp_mode():
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if "[" in text else None


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"), reason="no transparent huge pages on this kernel")
def test_numpy_huge_page_requests_stop_only_when_asked_and_decode_weights_still_get_them():
    # no_huge_page_stalls (the CLI's, never on import) stops numpy's madvise on large arrays, whose page faults wait
    # on the kernel's compaction; the blocked arena a decode plan streams asks for huge pages itself. What is asked
    # is read from the mappings' flags ("hg": huge pages advised): whether the kernel then finds free 2 MB pages
    # depends on how fragmented the host's memory is
    code = ("import json, sys, numpy as np, ember\n"
            "from ember.backends import cpu_malloc, cpu_matmul\n"
            "switch = np._core.multiarray._set_madvise_hugepage\n"
            "before = switch(True); switch(before)\n"
            "stopped = cpu_malloc.no_huge_page_stalls()\n"
            "after = switch(False)  # (the state it left; off either way for the arrays below)\n"
            "def advised(a):\n"
            "    at, inside = a.ctypes.data + a.nbytes // 2, False\n"
            "    for line in open('/proc/self/smaps'):\n"
            "        p = line.split()\n"
            "        if '-' in p[0] and not p[0].endswith(':'):\n"
            "            lo, hi = (int(v, 16) for v in p[0].split('-')); inside = lo <= at < hi\n"
            "        elif inside and p[0] == 'VmFlags:':\n"
            "            return 'hg' in p[1:]\n"
            "plain = np.empty(8 << 20, np.float32); arena = cpu_matmul.blocked_arena(8 << 20)\n"
            "print(json.dumps([before, stopped, after, advised(plain), advised(arena)]))")
    before, stopped, after, plain_advised, arena_advised = json.loads(
        subprocess.check_output([sys.executable, "-c", code], text=True))
    assert before, "import ember changed numpy's huge-page requests by itself"
    assert stopped and not after, "no_huge_page_stalls left numpy asking for huge pages"
    assert not plain_advised, "a 32 MB numpy array was advised huge pages with numpy's requests off"
    assert arena_advised, "the 32 MB blocked arena was not advised huge pages"
    env = {**os.environ, "EMBER_MALLOC_TUNING": "0"}
    _, stopped, after, _, _ = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True, env=env))
    assert not stopped and after, "EMBER_MALLOC_TUNING=0 did not leave numpy's huge-page requests alone"
