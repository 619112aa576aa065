"""`pip install ember` then `ember serve`, as a person without a checkout does: ember's wheel installed in a fresh
virtual environment (no system site-packages, numpy from the index) carries the app (ember.web), builds its site
from the installed package (the page's ember wheel repacked from the installed files, without the app's own
files), serves it, and the page opens in Chromium ready to run."""
from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile

from web_app import App


def test_ember_serve_from_a_wheel_in_a_fresh_venv(tmp_path, playwright_session):
    from ember.wasm.assets import build_wheel
    wheel = build_wheel(tmp_path / "dist")
    with zipfile.ZipFile(wheel) as whl:
        assert {"ember/web/index.html", "ember/web/worker.js", "ember/web/sw.js"} <= set(whl.namelist())
    venv.create(tmp_path / "venv", with_pip=True)
    bin_ = tmp_path / "venv" / "bin"
    subprocess.run([str(bin_ / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)], check=True,
                   timeout=600)
    out = tmp_path / "site"
    server = subprocess.Popen([str(bin_ / "ember"), "serve", "--port", "0", "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line, t0 = "", time.monotonic()
        while "serving" not in line:
            line = server.stdout.readline()
            assert line or server.poll() is None, server.stderr.read()
            assert time.monotonic() - t0 < 900, "ember serve did not start"
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url) as r:
            assert b"<title>ember" in r.read()
        (page_wheel,) = out.glob("wheels/*/ember-*.whl")
        with zipfile.ZipFile(page_wheel) as whl:
            names = whl.namelist()
        assert "ember/__init__.py" in names and "ember/wasm/worker_api.py" in names
        assert not [n for n in names if n.startswith("ember/web/") or n.endswith(".pyc")]
        app = App(playwright_session, url + "?device=cpu")
        try:
            assert app.page.inner_text("#status") == "Ready · CPU"
            assert app.errors == []
        finally:
            app.close()
    finally:
        server.terminate()
        server.wait(30)
        server.stdout.close()
        server.stderr.close()
    assert sys.prefix != str(tmp_path / "venv")  # the test's own ember was never touched
