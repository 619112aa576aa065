"""The training tool's data in a built site: digits.csv.gz taken from scikit-learn's wheel on PyPI into the
ember cache (the light `--app` install has no scikit-learn), against a local package index; the installed
scikit-learn's copy as the fallback; the bytes read back equal to scikit-learn's own load_digits."""
import functools
import hashlib
import http.server
import io
import os
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ember.wasm.tools import train as train_tool

sklearn = pytest.importorskip("sklearn")  # the reference (in .ci/requirements-test.txt)
INSTALLED = Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"


def _wheel(member_bytes: bytes) -> bytes:
    """A scikit-learn wheel as far as pip and the member fetch care: the name, and the data file inside."""
    buf = io.BytesIO()
    name, version = train_tool.DIGITS_WHEEL
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(train_tool.DIGITS_MEMBER, member_bytes)
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return buf.getvalue()


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A PyPI 'simple' index on 127.0.0.1 serving one scikit-learn wheel; pip is pointed at it alone."""
    files = tmp_path / "index"
    log = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            log.append(self.path)
            super().do_GET()

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(files)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def publish(member_bytes: bytes):
        name, version = train_tool.DIGITS_WHEEL
        whl = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        data = _wheel(member_bytes)
        (files / "simple" / name).mkdir(parents=True, exist_ok=True)
        (files / whl).write_bytes(data)
        (files / "simple" / name / "index.html").write_text(
            f'<a href="../../{whl}#sha256={hashlib.sha256(data).hexdigest()}">{whl}</a>\n')

    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's pip config adds local wheel folders
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{httpd.server_address[1]}/simple")
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(var, raising=False)
    yield publish, log
    httpd.shutdown()
    httpd.server_close()


def test_digits_come_from_the_pypi_wheel_into_the_cache(index, tmp_path):
    publish, log = index
    publish(INSTALLED.read_bytes())
    path = train_tool.digits_file()
    assert path.is_relative_to(tmp_path / "cache") and path.name == "digits.csv.gz"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == train_tool.DIGITS_SHA256
    assert any(p.endswith(".whl") for p in log)
    n = len(log)
    assert train_tool.digits_file() == path and len(log) == n  # cached: no request the second time
    # what build-web bundles for the page is that file
    assert [d["files"] for d in train_tool.demos()] == [{"digits.csv.gz": path}]


def test_a_wheel_with_other_digits_is_refused_and_the_installed_copy_used(index, capsys):
    publish, _ = index
    publish(b"not the digits")
    assert train_tool.digits_file() == INSTALLED
    assert not list(Path(os.environ["EMBER_CACHE"]).rglob("digits.csv.gz"))  # nothing unchecked kept


def test_without_pypi_or_scikit_learn_the_page_has_no_training_data(index, monkeypatch, capsys):
    # the index serves nothing, and scikit-learn is not found: both reasons are named, the site has no "train"
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "sklearn" else real(n, *a))
    with pytest.raises(FileNotFoundError, match=r"scikit-learn==1\.9\.1.*; and .*install scikit-learn"):
        train_tool.digits_file()
    assert train_tool.demos() == []
    assert "no training data for the page" in capsys.readouterr().err


def test_the_pinned_file_reads_as_scikit_learns_load_digits():
    from sklearn.datasets import load_digits as sk_digits

    from ember.data import load_digits
    assert hashlib.sha256(INSTALLED.read_bytes()).hexdigest() == train_tool.DIGITS_SHA256  # the pin is sklearn's file
    ref = sk_digits()
    x, y = load_digits(INSTALLED)
    np.testing.assert_array_equal(x.reshape(len(y), 64), ref.data.astype(np.float32))
    np.testing.assert_array_equal(y, ref.target)
