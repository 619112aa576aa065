"""Run Python snippets inside Pyodide under Node, with numpy and the ember wheel installed.

    result = run_pyodide("import ember; result = ember.__version__")["result"]

A snippet reports by binding a JSON-able `result` (NaN/inf allowed); its stdout/stderr are
returned too, and an exception raises PyodideSnippetError with the Pyodide traceback
(pass check=False to get it as `error` instead). Starting Node + Pyodide + numpy + ember
costs a couple of seconds, so many snippets should share one `PyodideSession` (see
`pyodide_session` in the tests) or go through `run_pyodide_batch`.

pytest itself runs inside Pyodide (tried with pytest 9.2): `pip download --no-deps
--only-binary=:all: --python-version 3.12 iniconfig pluggy pygments pytest`, pass those wheels
as `wheels=` (pytest last; packaging comes from the distribution), then in a snippet
`pytest.main(["-s", "-p", "no:cacheprovider", path])`; `-s` because fd capture fails there.
"""
from __future__ import annotations

import atexit
import collections
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

import expected_skips
from ember.wasm.assets import PyodideFetchError, build_wheel, ensure_pyodide

NODE_SCRIPT = Path(__file__).with_name("pyodide_runner.mjs")
ROOT = Path(__file__).resolve().parents[1]
SETUP_TIMEOUT = 120.0  # seconds; cold Node + Pyodide + numpy + ember takes ~3 s
# The page's kernel pool (web/pool.js on worker_threads) with the threads a 2-core visitor's page has: every
# Pyodide test and bench runs the pool's kernels unless it asks for threads=1 (the side module alone).
DEFAULT_THREADS = 2

_wheel_cache: dict[str, Path] = {}
_shared_sessions: dict[Path, "PyodideSession"] = {}


class PyodideRunnerError(RuntimeError):
    """Node/Pyodide could not start, died, or timed out."""


class PyodideSnippetError(RuntimeError):
    """A snippet raised inside Pyodide; the message holds its traceback."""


def node_path() -> str | None:
    return shutil.which("node")


def ember_wheel() -> Path:
    """The ember wheel built from this checkout, once per process."""
    if "ember" not in _wheel_cache:
        folder = tempfile.mkdtemp(prefix="ember-wheel-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _wheel_cache["ember"] = build_wheel(folder)
    return _wheel_cache["ember"]


class PyodideSession:
    """One Node process with Pyodide loaded; `run` executes snippets in fresh namespaces."""

    def __init__(self, *, packages=("numpy",), install_ember: bool = True, wheels=(),
                 mounts: dict[str, str | os.PathLike] | None = None,
                 dist: str | os.PathLike | None = None, timeout: float = SETUP_TIMEOUT,
                 node_args=(), threads: int = DEFAULT_THREADS, pool_timeout_ms: int = 10000):
        node = node_path()
        if node is None:
            raise PyodideRunnerError("ember: node not found on PATH; Pyodide tests need "
                                     "Node.js 20")
        wheel_paths = [str(ember_wheel())] if install_ember else []
        wheel_paths += [str(Path(w).resolve()) for w in wheels]
        config = {"indexURL": str(ensure_pyodide(dist)) + "/", "packages": list(packages),
                  "wheels": wheel_paths,
                  "mounts": {py: str(Path(host).resolve()) for py, host in (mounts or {}).items()}}
        if threads > 1:  # the page's kernel pool on worker_threads (web/pool.js), this process the caller
            from ember.backends.cpu_pool import POOL_MODULE, POOL_RELAXED_MODULE
            relaxed = any("relaxed-simd" in a for a in node_args)
            config["pool"] = {"threads": threads, "timeoutMs": pool_timeout_ms,
                              "js": str(ROOT / "web" / "pool.js"), "worker": str(ROOT / "web" / "pool_worker.js"),
                              "module": str(POOL_RELAXED_MODULE if relaxed else POOL_MODULE),
                              "variant": "relaxed" if relaxed else "plain"}
        # node_args: flags for Node / V8 before the script, e.g. --experimental-wasm-relaxed-simd
        self._proc = subprocess.Popen([node, *node_args, str(NODE_SCRIPT), json.dumps(config)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        self._next_id = 0
        ready = self._receive(timeout, "starting Pyodide")
        if not ready.get("ready"):
            self.close()
            raise PyodideRunnerError(f"ember: Pyodide setup failed: {ready.get('error')}")
        # cumulative seconds after loadPyodide, loadPackage, micropip installs, and in all
        self.timings: dict[str, float] = ready["timings"]
        self.version: str = ready["pyodide"]
        self.threads = threads  # the kernel pool's (1: none)

    def run(self, code: str, *, timeout: float = 120.0, check: bool = True) -> dict:
        """Execute `code`; return {"result", "stdout", "stderr", "error"}."""
        if not self.alive:
            raise PyodideRunnerError(f"ember: the Pyodide process has exited "
                                     f"({self._proc.returncode}){self._stderr_tail()}")
        self._next_id += 1
        self._proc.stdin.write(json.dumps({"id": self._next_id, "code": code}) + "\n")
        self._proc.stdin.flush()
        reply = self._receive(timeout, "running a snippet")
        if reply.get("id") != self._next_id:
            raise PyodideRunnerError(f"ember: out-of-order reply from Pyodide: {reply}")
        out = {"result": json.loads(reply["result"]), "stdout": reply["stdout"],
               "stderr": reply["stderr"], "error": reply["error"]}
        if check and out["error"]:
            raise PyodideSnippetError(f"ember: snippet failed inside Pyodide:\n{out['error']}"
                                      f"{out['stdout']}{out['stderr']}")
        return out

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self.alive:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> PyodideSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _receive(self, timeout: float, what: str) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self._proc.kill()
            raise PyodideRunnerError(f"ember: Pyodide timed out after {timeout} s while "
                                     f"{what}{self._stderr_tail()}") from None
        if line is None:
            self._proc.wait()
            raise PyodideRunnerError(f"ember: Node exited ({self._proc.returncode}) while "
                                     f"{what}{self._stderr_tail()}")
        return json.loads(line)

    def _pump_stdout(self) -> None:
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line)

    def _stderr_tail(self) -> str:
        tail = "".join(self._stderr).strip()
        return f"\nnode stderr:\n{tail[-4000:]}" if tail else ""


# ---------------------------------------------------------------- pytest fixtures
# Import them into a test module (`from pyodide_runner import pyodide_session`) to use them.

def unavailable(reason: str) -> None:
    """Skip locally, but fail under CI=true, where node and the downloads must work."""
    expected_skips.missing(reason)


@pytest.fixture(scope="session")
def pyodide_dist() -> Path:
    try:
        return ensure_pyodide()
    except PyodideFetchError as exc:  # a failed verification is not caught: it must fail
        unavailable(str(exc))


@pytest.fixture(scope="session")
def pyodide_session(pyodide_dist):
    """One Node + Pyodide + numpy + ember process shared by the whole test session.

    Each test module that imports this fixture gets its own fixture instance, so the process
    itself is cached here; snippets share it (and its imported modules), not namespaces.
    """
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    session = _shared_sessions.get(pyodide_dist)
    if session is None or not session.alive:  # restarted after a timeout killed it
        session = _shared_sessions[pyodide_dist] = PyodideSession(dist=pyodide_dist)
        atexit.register(session.close)
    return session


def run_pyodide(code: str, *, packages=("numpy",), install_ember: bool = True,
                timeout: float = 120.0, check: bool = True) -> dict:
    """Run one snippet in a fresh Node process (see PyodideSession.run)."""
    with PyodideSession(packages=packages, install_ember=install_ember) as session:
        return session.run(code, timeout=timeout, check=check)


def run_pyodide_batch(codes, *, packages=("numpy",), install_ember: bool = True,
                      timeout: float = 120.0, check: bool = True) -> list[dict]:
    """Run several snippets in one Node process, each in its own namespace."""
    with PyodideSession(packages=packages, install_ember=install_ember) as session:
        return [session.run(code, timeout=timeout, check=check) for code in codes]
