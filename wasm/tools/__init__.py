"""The page's tools: one module each in this folder, registered by name in TOOLS.

A tool module declares, and nothing else outside it knows about the tool:

    FILES     the files a model folder holds, as [name, optional?, unless?] (`unless`: fetched only when that
              other file is missing); the page turns a hub id or a folder URL into these downloads
    BESIDE    files fetched beside one weights file given by URL, by its suffix: {".bin": [[name, optional?]]}
    PACKAGES  Pyodide packages it needs beyond numpy; the worker fetches them with its first load
    BUNDLES   what `ember build-web` bundles for it: "model" (demo models), "data" (its data) or "" (nothing)
    demos(extra) -> [{"id", "label", "files": {name: local path}}]  the site's demos, the page's default first;
              [] when none can be had (extra: also the large ones)
    load(folder, device) -> dict   read the files the worker wrote into `folder` (it deletes them afterwards),
              keep the model in the module, say what was loaded ("parameters", "bytes", anything the UI shows)
    async run(input, opts, on_partial, on_progress) -> dict   one request on the loaded model, the result with
              the fields of the CLI's --json; on_partial(...) streams pieces (segments, tokens, steps),
              on_progress({"stage", "done", "total"}) drives the page's bar; `await checkpoint()` between steps
              lets a cancel land (raise nothing for it: end with what you have and "stopped": "cancelled")

Errors the page should explain are WorkerError(message, code), code one of ember.js's EmberError codes. A
load failing with ValueError / KeyError / OSError / TypeError reads as "bad_model", MemoryError as
"out_of_memory"; worker_api.handle turns anything else into "internal" and keeps the worker alive.

Adding a tool:
  1. wasm/tools/<name>.py with the declarations above (imports of models inside the functions: the page
     imports every tool module at start to read FILES and PACKAGES);
  2. its name in TOOLS below;
  3. its UI: a method in web/ember.js that calls `this._run("<name>", input, opts, onPartial)` and the page's
     own code (a tab in index.html and a module beside web/app.js; `ember build-web` copies web/ whole).
`ember.loadModel("<name>", source)`, downloads with progress and the Cache API, the worker's one load and one
run message, cancel and error codes come with it.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
from types import ModuleType

from ember.errors import EmberError

TOOLS = ("whisper", "llama", "yolo", "embed", "train", "onnx", "segment")
_CANCEL = {"flag": False}


class WorkerError(EmberError, ValueError):
    """A request the worker cannot serve; `code` tells the page which human message to show."""

    def __init__(self, message: str, code: str = "error"):
        super().__init__(message)
        self.code = code


def get(name: str) -> ModuleType:
    """The module of tool `name`."""
    if name not in TOOLS:
        raise WorkerError(f"ember: unknown tool {name!r}; expected one of {TOOLS}", "bad_request")
    return importlib.import_module(f"{__name__}.{name}")


def table() -> dict:
    """What the page needs to know of each tool before asking the worker: {name: {"files", "beside", "packages"}}."""
    out = {}
    for name in TOOLS:
        m = get(name)
        out[name] = {"files": [list(f) for f in m.FILES], "packages": list(m.PACKAGES),
                     "beside": {suffix: [list(f) for f in files] for suffix, files in m.BESIDE.items()}}
    return out


# ---------------------------------------------------------------------------- cancel

def cancel() -> None:
    """The page's cancel: the running request stops at its next checkpoint()."""
    _CANCEL["flag"] = True


def reset_cancel() -> None:
    _CANCEL["flag"] = False


async def checkpoint() -> None:
    """Yield to the worker's event loop (a cancel message can arrive), then raise CancelledError if one did."""
    await asyncio.sleep(0)
    if _CANCEL["flag"]:
        raise asyncio.CancelledError()


# ---------------------------------------------------------------------------- what tools share

@contextlib.contextmanager
def deterministic(opts: dict, default: bool = True):
    """A request in deterministic mode when opts["deterministic"] (else `default`) is true: the page's float
    products then run the C sources the desktop's deterministic mode runs, so the page's tokens are the desktop's
    (its own faster kernels sum in other orders, and a last-bit difference can flip a token). The mode is
    restored after."""
    from ember.backends.cpu_matmul import set_deterministic
    asked = opts.get("deterministic")
    was = set_deterministic(default if asked is None else asked is not False)
    try:
        yield
    finally:
        set_deterministic(was)


def one_file(folder: str, suffixes: tuple[str, ...], refusal: str) -> str:
    """The first file in `folder` whose name ends in one of `suffixes`; else an "unsupported_file" error that
    names the files there, then says `refusal`."""
    names = sorted(os.listdir(folder))
    found = [n for n in names if n.lower().endswith(suffixes)]
    if not found:
        raise WorkerError(f"ember: {', '.join(names) or 'no file'}: {refusal}", "unsupported_file")
    return os.path.join(folder, found[0])


def weight_sizes(model) -> tuple[int, int]:
    """(parameters, bytes) as held: float parameters plus every quantized matrix (QLinear) and a quantized
    embedding table, counted at their GGML block bytes."""
    from ember.quant import QLinear, QTensor
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    nbytes = sum(p.numel() * p.dtype.itemsize for p in params)
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(m, QLinear) or isinstance(w, QTensor):
            n += w.numel()
            nbytes += w.nbytes
    return int(n), int(nbytes)
