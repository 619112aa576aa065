"""The offline Pyodide distribution, the ember wheel, and ember running inside Pyodide."""
import base64
import json
import shutil
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.wasm import assets
from ember.wasm.assets import PyodideAssetError, ensure_pyodide, verify_distribution, verify_wheel
from pyodide_runner import (PyodideRunnerError, PyodideSnippetError, ember_wheel,  # noqa: F401
                            node_path, pyodide_dist, pyodide_session, run_pyodide, unavailable)

REPO = Path(__file__).resolve().parents[1]
BATTERY = Path(__file__).with_name("pyodide_battery.py")
# Results of correctly rounded IEEE ops, comparisons and pure data movement: any two
# conforming platforms must agree bit for bit. Everything else in the battery (exp/log/...,
# matmul, conv, sums inside softmax/var/grads) may legitimately differ by a few ulps between
# numpy 2.4 on x86 (SIMD, BLAS) and numpy 2.0.2 in wasm (scalar, no BLAS).
EXACT = {"add", "sub_scalar", "mul", "div", "maximum", "sqrt", "relu", "where", "gt", "clamp",
         "floor", "broadcast", "max_dim0_values", "max_dim0_indices", "argmax_dim1",
         "max_pool2d", "slice", "index_list", "gather", "masked_select", "permute_reshape",
         "cat", "flip", "pad"}


# ---------------------------------------------------------------- verification (no network)

def test_verify_wheel_refuses_wrong_hash_and_name(tmp_path):
    data = b"not numpy"
    entry = {"name": "numpy", "version": "2.0.2", "file_name": "numpy-2.0.2-x.whl",
             "sha256": assets.hashlib.sha256(data).hexdigest()}
    good = tmp_path / entry["file_name"]
    good.write_bytes(data)
    verify_wheel(good, entry)  # the matching file passes
    good.write_bytes(b"not numpy!")
    with pytest.raises(PyodideAssetError, match=r"^ember: .*numpy-2\.0\.2-x\.whl: sha256 .* "
                                                 r"does not match pyodide-lock\.json"):
        verify_wheel(good, entry)
    with pytest.raises(PyodideAssetError, match="file name differs"):
        verify_wheel(tmp_path / "numpy-renamed.whl", entry, data)


def test_lock_for_another_version_is_refused(tmp_path):
    (tmp_path / "pyodide-lock.json").write_text(json.dumps({"info": {"version": "0.26.0"},
                                                            "packages": {}}))
    for name in assets.CORE_FILES[:-1]:
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(PyodideAssetError, match="pyodide-lock.json"):
        verify_distribution(tmp_path)


# ---------------------------------------------------------------- the assembled folder

def test_distribution_holds_the_lock_files(pyodide_dist):
    lock = verify_distribution(pyodide_dist)
    assert lock["info"]["version"] == assets.PYODIDE_VERSION
    for name in assets.PACKAGES:
        assert (pyodide_dist / lock["packages"][name]["file_name"]).is_file()
    assert ensure_pyodide(pyodide_dist) == pyodide_dist  # cached call returns the same folder


def test_tampered_wheel_is_refused(pyodide_dist, tmp_path):
    copy = shutil.copytree(pyodide_dist, tmp_path / "dist")
    lock = json.loads((copy / "pyodide-lock.json").read_text())
    wheel = copy / lock["packages"]["numpy"]["file_name"]
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.write_bytes(bytes(data))
    with pytest.raises(PyodideAssetError, match=rf"{wheel.name}: sha256 [0-9a-f]{{64}} does "
                                                rf"not match .* for numpy 2\.0\.2; refusing"):
        ensure_pyodide(copy)


# ---------------------------------------------------------------- the ember wheel

def test_wheel_is_pure_python_and_holds_every_module():
    wheel = ember_wheel()
    assert wheel.name.endswith("-py3-none-any.whl")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    expected = set()
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        for source in (REPO / folder).rglob("*.py"):
            if "__pycache__" in source.parts:
                continue
            relative = source.relative_to(REPO / folder)
            expected.add("/".join([*package.split("."), *relative.parts]))
    with zipfile.ZipFile(wheel) as zf:
        shipped = {name for name in zf.namelist() if name.endswith(".py")}
    missing = sorted(expected - shipped)
    assert not missing, f"source modules missing from {wheel.name} (pyproject packages?): {missing}"


# ---------------------------------------------------------------- ember inside Pyodide

def test_pyodide_imports_numpy_and_ember(pyodide_session, pyodide_dist):
    lock = json.loads((pyodide_dist / "pyodide-lock.json").read_text())
    out = pyodide_session.run(
        "import sys, numpy, ember\n"
        "print('hello from pyodide')\n"
        "result = {'platform': sys.platform, 'numpy': numpy.__version__,\n"
        "          'ember': ember.__version__, 'file': ember.__file__}\n")
    assert out["result"]["platform"] == "emscripten"
    assert out["result"]["numpy"] == lock["packages"]["numpy"]["version"]
    assert out["result"]["ember"] == ember.__version__
    assert "/site-packages/ember/" in out["result"]["file"]  # installed by micropip
    assert out["stdout"] == "hello from pyodide\n"


def test_snippet_errors_carry_the_pyodide_traceback(pyodide_session):
    with pytest.raises(PyodideSnippetError, match=r"ZeroDivisionError"):
        pyodide_session.run("x = 1\nresult = x / 0\n")
    out = pyodide_session.run("result = float('nan')", check=False)  # session still usable
    assert out["error"] is None and out["result"] != out["result"]


def test_hung_snippet_times_out(pyodide_dist):
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    with pytest.raises(PyodideRunnerError, match="timed out after 2 s"):
        run_pyodide("while True: pass", packages=(), install_ember=False, timeout=2)



def _decode(entry) -> np.ndarray:
    dtype, shape, data = entry
    return np.frombuffer(base64.b64decode(data), dtype=dtype).reshape(shape)


def test_op_battery_in_pyodide_matches_cpython(pyodide_session):
    source = BATTERY.read_text()
    namespace = {"__name__": "pyodide_battery"}
    exec(compile(source, str(BATTERY), "exec"), namespace)  # the CPython reference run
    expected = namespace["result"]
    got = pyodide_session.run(source, timeout=300)["result"]
    assert got.keys() == expected.keys()
    assert EXACT <= expected.keys()
    mismatches = []
    for name in expected:
        ref, out = _decode(expected[name]), _decode(got[name])
        if (out.dtype, out.shape) != (ref.dtype, ref.shape):
            mismatches.append(f"{name}: {out.dtype}{out.shape} vs {ref.dtype}{ref.shape}")
        elif name in EXACT or not np.issubdtype(ref.dtype, np.floating):
            if out.tobytes() != ref.tobytes():
                mismatches.append(f"{name}: not bit-identical")
        else:
            # normwise: 1e-6 of the output's largest magnitude (~8 float32 ulps of it)
            err = float(np.abs(out.astype(np.float64) - ref).max())
            if err > 1e-6 * max(1.0, float(np.abs(ref).max())):
                mismatches.append(f"{name}: max abs error {err:.3g}")
    assert not mismatches, "Pyodide differs from CPython: " + "; ".join(mismatches)


def test_large_matmul_in_pyodide_past_the_einsum_iterator_limit(pyodide_session):
    # 64 x 1024 x 33000 = 2.2e9 > 2**31: one einsum raised "iterator is too large" in wasm
    out = pyodide_session.run(
        "import numpy as np, ember\n"
        "rng = np.random.default_rng(0)\n"
        "a = rng.standard_normal((64, 1024)).astype(np.float32)\n"
        "b = rng.standard_normal((1024, 33000)).astype(np.float32)\n"
        "y = (ember.tensor(a) @ ember.tensor(b)).numpy()\n"
        "rows = [0, 31, 63]\n"
        "want = np.stack([np.einsum('j,jk->k', a[r], b) for r in rows])\n"
        "result = [list(y.shape), float(np.abs(y[rows] - want).max())]\n", timeout=300)["result"]
    assert out[0] == [64, 33000] and out[1] < 1e-3
