"""ember.settings is the one table of EMBER_* variables: every name the sources use is in it, nothing in ember
reads one past it, its page in the book is rendered from it, and a bad value fails with the variable's name."""
from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from dataclasses import fields
from pathlib import Path

import pytest

from ember import settings
from ember.errors import EmberError, SettingError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("core", "webgpu", "wasm", "models", "web", ".ci")
# C, CUDA and WGSL sources use EMBER_ as their macro prefix (EMBER_EXPORT, EMBER_SIMD ...), not for variables
MACRO_SOURCES = (".c", ".h", ".cu", ".cuh", ".wgsl")
BINARY = (".wasm", ".png", ".jpg", ".gz", ".zip", ".whl", ".ico", ".bin", ".npz", ".gguf", ".safetensors")
NAME = re.compile(r"(?<![\w])EMBER_[A-Z0-9_]*[A-Z0-9]")


def _source_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *SOURCES], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in out if (ROOT / p).is_file() and not p.endswith(MACRO_SOURCES + BINARY)]


def _texts(path: Path):
    """(line, text) to look for names in: a Python file's strings and comments (its identifiers are not
    variables: _EMBER_TO_PLAIN), any other file whole."""
    src = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".py":
        yield 1, src
        return
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            yield tok.start[0], tok.string


def test_every_EMBER_name_in_the_sources_is_a_setting():
    missing, seen = [], set()
    for path in _source_files():
        for line, text in _texts(path):
            for m in NAME.finditer(text):
                seen.add(m[0])
                if m[0] not in settings.SETTINGS:
                    at = line + text.count("\n", 0, m.start())
                    missing.append(f"{path.relative_to(ROOT)}:{at}: {m[0]}")
    assert not missing, "EMBER_* names not in ember.settings (core/settings.py):\n  " + "\n  ".join(missing)
    assert len(seen) >= 15, sorted(seen)  # the scan reads what it should


def _environ_reads(tree):
    """(line, name) of os.environ.get("X") / os.environ["X"] / os.getenv("X") / "X" in os.environ."""
    def is_environ(n):
        return isinstance(n, ast.Attribute) and n.attr == "environ"
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "getenv" or node.func.attr in ("get", "pop", "setdefault")
                and is_environ(node.func.value)):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            key = node.left
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("EMBER_"):
            yield node.lineno, key.value


def test_ember_reads_EMBER_variables_only_through_the_registry():
    ad_hoc = []
    for path in _source_files():
        if path.suffix == ".py" and path != ROOT / "core" / "settings.py":
            for line, name in _environ_reads(ast.parse(path.read_text(encoding="utf-8"))):
                ad_hoc.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not ad_hoc, "read EMBER_* through ember.settings.get, not os.environ:\n  " + "\n  ".join(ad_hoc)
    # the detector itself finds the three spellings
    probe = ast.parse('os.environ.get("EMBER_A")\nos.environ["EMBER_B"]\nos.getenv("EMBER_C")\n"EMBER_D" in os.environ')
    assert [n for _, n in _environ_reads(probe)] == ["EMBER_A", "EMBER_B", "EMBER_C", "EMBER_D"]


def test_settings_page_is_the_table():
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- the table: ember.settings.markdown\(\) -->\n(.*?)<!-- end of the table -->", page, re.S)
    assert m, "docs/settings.md: the markers around the table are gone"
    assert m[1] == settings.markdown(), ("docs/settings.md's table differs from ember.settings: paste "
                                         "`python -c 'from ember import settings; print(settings.markdown())'` "
                                         "between its markers")
    for s in settings.SETTINGS.values():
        assert s.meaning and s.kind in ("flag", "int", "number", "choice", "url", "path", "str"), s
        assert s.scope in ("ember", "tests") and (s.kind != "choice" or s.default in s.choices), s


def test_the_budget_fields_are_its_settings(monkeypatch):
    from ember import limits
    for s in settings.SETTINGS:
        monkeypatch.delenv(s, raising=False)
    b = limits.Budget()
    budget_names = {limits.env_name(f.name) for f in fields(b)}
    in_table = {n for n, s in settings.SETTINGS.items() if "ember.limits.budget." in s.meaning}
    assert budget_names == in_table
    for f in fields(b):
        s = settings.SETTINGS[limits.env_name(f.name)]
        assert s.default == getattr(b, f.name) and type(s.default) is type(getattr(b, f.name)), (f.name, s.default)


@pytest.mark.parametrize("name,raw,value", [
    ("EMBER_WEBGPU_FUSE", "0", False), ("EMBER_WEBGPU_FUSE", "1", True), ("EMBER_WEBGPU_FUSE", "", True),
    ("EMBER_WEBGPU_PACK16", None, False), ("EMBER_NUM_THREADS", " 3 ", 3), ("EMBER_NUM_THREADS", None, None),
    ("EMBER_MAX_PIXELS", "1e3", 1000), ("EMBER_LOAD_FACTOR", "2", 2.0), ("EMBER_WEBGPU_POWER", "low-power", "low-power"),
    ("EMBER_HUB_ENDPOINT", "http://127.0.0.1:8/", "http://127.0.0.1:8/"), ("EMBER_CACHE", "/tmp/x", "/tmp/x"),
])
def test_get_is_typed_and_read_at_the_call(monkeypatch, name, raw, value):
    if raw is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, raw)
    got = settings.get(name)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("name,raw,accepts", [
    ("EMBER_WEBGPU_FUSE", "false", "0 or 1"), ("EMBER_WEBGPU_PACK16", "2", "0 or 1"),
    ("EMBER_NUM_THREADS", "0", "an integer from 1 to 64"), ("EMBER_NUM_THREADS", "four", "an integer from 1 to 64"),
    ("EMBER_MAX_PIXELS", "lots", "a number"), ("EMBER_WEBGPU_POWER", "fast", "one of high-performance, low-power"),
    ("EMBER_HUB_ENDPOINT", "127.0.0.1:8", "an http:// or https:// URL"),
])
def test_a_bad_value_names_the_variable_and_what_it_accepts(monkeypatch, name, raw, accepts):
    monkeypatch.setenv(name, raw)
    with pytest.raises(SettingError) as e:
        settings.get(name)
    assert isinstance(e.value, EmberError) and isinstance(e.value, ValueError)
    assert f"${name}={raw!r} is not {accepts}" in str(e.value)


def test_an_unknown_name_is_refused():
    with pytest.raises(EmberError, match="EMBER_NO_SUCH is not a setting"):
        settings.get("EMBER_NO_SUCH")


def test_the_readers_refuse_bad_values(monkeypatch, tmp_path):
    from ember import hub, paths
    from ember.backends import cpu_native_kernels
    monkeypatch.setenv("EMBER_HUB_ENDPOINT", "ftp://mirror")
    with pytest.raises(SettingError, match="EMBER_HUB_ENDPOINT"):
        hub.endpoint()
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path))
    assert paths.cache_dir("x") == tmp_path / "x"
    monkeypatch.delenv("EMBER_CACHE")  # the kernels built once in the cache serve
    # a bad thread count is the user's to fix: raised, not swallowed into "the kernels failed to load"
    monkeypatch.setenv("EMBER_NUM_THREADS", "-2")
    if cpu_native_kernels.compiler() is None:
        pytest.skip("no C compiler: the native kernels never read EMBER_NUM_THREADS here")
    with pytest.raises(SettingError, match="EMBER_NUM_THREADS"):
        cpu_native_kernels.load()


def _info_env(**env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    return subprocess.run([sys.executable, "-m", "ember", "info", "--env"], env={**e, **env}, capture_output=True,
                          text=True, timeout=120)


def test_info_env_lists_every_setting_with_its_value():
    r = _info_env(EMBER_NUM_THREADS="3", EMBER_WEBGPU_FUSE="0")
    assert r.returncode == 0, r.stderr
    names = re.findall(r"^  (EMBER_\w+) = ", r.stdout, re.M)
    assert names == list(settings.SETTINGS), names
    assert "  EMBER_NUM_THREADS = '3'\n" in r.stdout and "  EMBER_WEBGPU_FUSE = '0'\n" in r.stdout
    assert "  EMBER_WEBGPU_PACK16 = 0 (unset: the default)\n" in r.stdout
    bad = _info_env(EMBER_WEBGPU_FUSE="yes")
    assert bad.returncode == 1 and "EMBER_WEBGPU_FUSE = 'yes'  INVALID: not 0 or 1" in bad.stdout
