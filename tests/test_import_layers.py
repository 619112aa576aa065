"""The package's import graph reads bottom-up: a module imports only from its own layer or below,
and no module-level imports form a cycle.

Static: every .py file of the four source folders is parsed with `ast` (nothing is imported).
An edge is an `import` / `from ... import` (relative ones resolved), or `__import__("...")` /
`importlib.import_module("...")` with a literal name, anywhere in the file: a function-level
(lazy) import is still a dependency, so an upward lazy import fails too. Names built at run time
(device.py's backend registry, the package's `__getattr__` over `f"ember.{name}"`) are lookups
by name, not imports, and are not edges.

Cycles: module-level imports only (a lazy import inside a function cannot deadlock an import),
any layer. Run with `-s` to print the layer table and the edge counts.
"""
from __future__ import annotations

import ast
import re
from collections import Counter, defaultdict
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# bottom-up; a module's layer is that of the first pattern it matches (so specific ones come first)
LAYERS = [
    ("base", "the contract: dtypes and GGML's block types (ember.ggml), the primitive interface, the kernel registry "
             "(ops and their kernels named by module path), the device registry (backends named by module path), "
             "the error hierarchy, the resource budget, the settings, the CLI argument types and the cache folder",
     ["ember.dtypes", "ember.ggml", "ember.ggml.*", "ember.primitives", "ember.kernels", "ember.kernel_source",
      "ember.device", "ember.errors", "ember.limits", "ember.settings", "ember.argtypes", "ember.paths"]),
    ("backends", "one module per device and its kernels: numpy/array-module/cuda, webgpu",
     ["ember.backends", "ember.backends.*", "ember.webgpu", "ember.webgpu.*"]),
    ("tensor", "autograd primitives, Tensor, composed ops, custom ops, QTensor",
     ["ember.autograd", "ember.tensor", "ember.ops_*", "ember.linalg", "ember.custom_op", "ember.qtensor"]),
    ("nn", "modules, functional, optimizers", ["ember.nn", "ember.nn.*", "ember.optim"]),
    ("formats", "weight formats, the hub and the bounded HTTP server, tokenizers, templates (sandboxed Jinja), "
                "grammars (token masks)",
     ["ember.io", "ember.io.*", "ember.hub", "ember.httpd", "ember.tokenizers", "ember.tokenizers.*", "ember.jinja",
      "ember.jinja.*",
      "ember.grammar", "ember.grammar.*"]),
    ("quant", "quantized layers and models, file conversion", ["ember.quant", "ember.quant.*"]),
    ("runtimes", "onnx, datasets and loaders, the training loop",
     ["ember.onnx", "ember.onnx.*", "ember.data", "ember.data.*", "ember.train", "ember.train.*"]),
    ("facade", "`import ember`: re-exports tensor/nn/optim, io/quant/tokenizers on first use", ["ember"]),
    ("models", "one folder per family on models/common", ["ember.models", "ember.models.*"]),
    ("app", "entry points: CLIs, the browser worker, ember.ray's dataset mappers", ["ember.cli", "ember.__main__",
                                                        "ember.convert", "ember.ray", "ember.ray.*",
                                                        "ember.models.*.cli", "ember.onnx.cli", "ember.wasm",
                                                        "ember.wasm.*", "ember.web"]),
]
LAYER_INDEX = {name: i for i, (name, _, _) in enumerate(LAYERS)}
# most specific first: exact names, then longer patterns
_RULES = sorted(((pat, name) for name, _, pats in LAYERS for pat in pats),
                key=lambda r: ("*" in r[0], -len(r[0])))


def layer_of(module: str) -> str | None:
    for pat, name in _RULES:
        if fnmatchcase(module, pat):
            return name
    return None


# ---------------------------------------------------------------------------- the package's modules

def _package_dirs():
    """pyproject's [tool.setuptools] package-dir: {"ember": "core", "ember.webgpu": "webgpu", ...}."""
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r"^package-dir\s*=\s*\{(.*)\}\s*$", text, re.M)
    assert m, "pyproject.toml: no package-dir line under [tool.setuptools]"
    return dict(re.findall(r'"([\w.]+)"\s*=\s*"([\w./-]+)"', m.group(1)))


def _modules():
    """{module name: (path, is_package)} for every .py file under the mapped folders."""
    mods = {}
    for pkg, folder in _package_dirs().items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            name = ".".join([pkg] + parts)
            # a folder mapped to its own package (webgpu/ -> ember.webgpu) wins over core/ lookalikes
            mods.setdefault(name, (path, is_pkg))
    return mods


MODULES = _modules()


class Edge:
    __slots__ = ("src", "dst", "line", "lazy")

    def __init__(self, src, dst, line, lazy):
        self.src, self.dst, self.line, self.lazy = src, dst, line, lazy

    def where(self):
        return f"{MODULES[self.src][0].relative_to(ROOT)}:{self.line}"


def _literal_import(call):
    """The module name of `__import__("x")` / `importlib.import_module("x")` with a literal, else None."""
    f = call.func
    is_import = (isinstance(f, ast.Name) and f.id == "__import__") or \
        (isinstance(f, ast.Attribute) and f.attr == "import_module")
    if is_import and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _resolve(src, is_pkg, level, module):
    """Absolute name of `from <level dots><module> import ...` written in module `src`."""
    if level == 0:
        return module
    parts = src.split(".") if is_pkg else src.split(".")[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def _targets(base, names):
    """`from base import a, b`: the submodules a, b where they are modules, else base itself."""
    out = []
    for n in names:
        sub = f"{base}.{n}"
        out.append(sub if sub in MODULES else base)
    return out


PRIVATE = []  # (src, module imported from, private name, line): `from x import _name`


def _edges_of(src):
    path, is_pkg = MODULES[src]
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node, lazy):
        for child in ast.iter_child_nodes(node):
            in_fn = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(src, is_pkg, child.level, child.module)
                found.extend((t, child.lineno, lazy) for t in _targets(base, [a.name for a in child.names]))
                PRIVATE.extend((src, base, a.name, child.lineno) for a in child.names
                               if a.name.startswith("_") and not a.name.startswith("__"))
            elif isinstance(child, ast.Call) and (name := _literal_import(child)):
                found.append((name, child.lineno, lazy))
            visit(child, in_fn)

    visit(tree, False)
    found = dict.fromkeys(f for f in found if f[0] == "ember" or f[0].startswith("ember."))  # (one per line)
    return [Edge(src, dst, line, lazy) for dst, line, lazy in found]


EDGES = [e for m in sorted(MODULES) for e in _edges_of(m)]


def _layer_table():
    by_layer = defaultdict(list)
    for m in sorted(MODULES):
        by_layer[layer_of(m)].append(m)
    lines = ["import layers, bottom-up (a module may import its own layer and the ones listed before it):"]
    for i, (name, what, _) in enumerate(LAYERS):
        mods = by_layer.get(name, [])
        lines.append(f"  {i} {name:9s} {len(mods):3d} modules  {what}")
        lines.append("      " + ", ".join(mods))
    counts = Counter((layer_of(e.src), layer_of(e.dst), e.lazy) for e in EDGES if layer_of(e.dst))
    lines.append(f"edges: {len(EDGES)} ({sum(not e.lazy for e in EDGES)} module-level, "
                 f"{sum(e.lazy for e in EDGES)} lazy, inside functions)")
    lines.append("  from -> to: module-level + lazy")
    pairs = sorted({(s, d) for s, d, _ in counts}, key=lambda p: (LAYER_INDEX[p[0]], LAYER_INDEX[p[1]]))
    for s, d in pairs:
        mark = "  UPWARD" if LAYER_INDEX[d] > LAYER_INDEX[s] else ""
        lines.append(f"  {s:9s} -> {d:9s} {counts[(s, d, False)]:4d} + {counts[(s, d, True)]:3d}{mark}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- tests

def test_every_module_has_a_layer():
    print("\n" + _layer_table())
    missing = [f"{MODULES[m][0].relative_to(ROOT)} ({m})" for m in sorted(MODULES) if layer_of(m) is None]
    assert not missing, "modules with no import layer (add them to LAYERS in tests/test_import_layers.py):\n  " + \
        "\n  ".join(missing)


def test_every_import_names_a_module_that_exists():
    bad = [f"{e.where()}: {e.src} imports {e.dst}, which is no module of the package" for e in EDGES
           if e.dst not in MODULES]
    assert not bad, "\n".join(bad)


def test_no_upward_import():
    bad = []
    for e in EDGES:
        ls, ld = layer_of(e.src), layer_of(e.dst)
        if ls and ld and LAYER_INDEX[ld] > LAYER_INDEX[ls]:
            bad.append(f"{e.where()}: {e.src} ({ls}) imports {e.dst} ({ld}){' lazily' if e.lazy else ''}")
    print(f"\n{len(bad)} upward imports" + "".join("\n  " + b for b in bad))
    assert not bad, f"{len(bad)} upward imports (a module may import only its own layer or below):\n  " + \
        "\n  ".join(bad)


def _cycles(with_lazy=False):
    """Strongly connected components (size > 1) of the import graph (Tarjan): module-level edges,
    or all edges with `with_lazy`."""
    graph = defaultdict(set)
    for e in EDGES:
        if (with_lazy or not e.lazy) and e.dst in MODULES and e.dst != e.src:
            graph[e.src].add(e.dst)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            strong(v)
    return comps


def _describe(comps, with_lazy):
    msgs = []
    for comp in comps:
        members = set(comp)
        lines = [f"{e.where()}: {e.src} ({layer_of(e.src)}) imports {e.dst} ({layer_of(e.dst)})"
                 f"{' lazily' if e.lazy else ''}"
                 for e in EDGES if (with_lazy or not e.lazy) and e.src in members and e.dst in members and e.dst != e.src]
        msgs.append(f"cycle through {', '.join(comp)}:\n    " + "\n    ".join(lines))
    return msgs


def test_no_module_level_import_cycle():
    comps = _cycles()
    msgs = _describe(comps, False)
    print(f"\n{len(comps)} module-level import cycles" + "".join("\n  " + m for m in msgs))
    # for information: cycles that close only through a lazy import (allowed within a layer; an
    # upward one is already reported by test_no_upward_import)
    lazy = [c for c in _cycles(with_lazy=True) if c not in comps]
    print(f"{len(lazy)} cycles through lazy imports (allowed within a layer)" +
          "".join("\n  " + m for m in _describe(lazy, True)))
    assert not comps, "module-level import cycles:\n  " + "\n  ".join(msgs)


def _package(module):
    """The package a module belongs to: itself for a package, else its parent (ember.backends.cpu_quant ->
    ember.backends; ember.autograd -> ember)."""
    return module if MODULES.get(module, (None, False))[1] else module.rpartition(".")[0]


def test_no_private_name_imported_across_packages():
    """`from <other package's module> import _name` reaches into another package's internals: make the name
    public where it is meant to be shared, or keep the code that needs it in that package."""
    bad = [f"{MODULES[s][0].relative_to(ROOT)}:{line}: {s} imports {name} from {mod}" for s, mod, name, line in PRIVATE
           if mod.startswith("ember") and _package(s) != _package(mod)]
    assert not bad, "private names imported across packages:\n  " + "\n  ".join(bad)


def test_cli_modules_are_not_loaders_for_other_modules():
    """A family's cli.py parses arguments and prints; what it loads with lives in the family (or models/common),
    so the page, ember.ray and other families never import a CLI module. Only the CLI dispatcher imports them."""
    dispatch = {"ember.cli", "ember.__main__"}
    bad = [f"{e.where()}: {e.src} imports {e.dst}" for e in EDGES
           if (e.dst.endswith(".cli") or e.dst == "ember.cli") and e.src not in dispatch and e.dst != e.src
           and not e.src.endswith(".cli")]
    assert not bad, "CLI modules imported as loaders:\n  " + "\n  ".join(bad)


def test_every_package_is_in_the_wheel():
    """pyproject lists packages explicitly (the folders map onto one namespace): a package folder missing from the
    list is missing from the wheel, and so from the page, where its import fails."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(ember[\w.]*)"', text[text.index("packages = ["):text.index("]", text.index("packages = ["))]))
    packages = {m for m, (_, is_pkg) in MODULES.items() if is_pkg}
    assert not packages - listed, f"packages missing from pyproject.toml's packages list: {sorted(packages - listed)}"
