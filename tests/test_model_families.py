"""A model family (a folder under models/) imports models/common and nothing from another family; the
dispatchers beside them (models/auto.py, models/text/) are the only modules that name families, and models/common
names none. A family's `cli.py` is an entry point (the app layer of tests/test_import_layers.py, above every
model) and may combine what it needs. Static: every .py file under models/ is parsed with `ast` (nothing is
imported), lazy imports inside functions included."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"
SHARED = {"common"}                  # the one base every family builds on
DISPATCHERS = {"auto", "text"}       # name families by model_type / GGUF architecture, never imported by one


def _family_of(module: str) -> str | None:
    """'llama' for ember.models.llama.gguf; None outside ember.models.<something>."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["ember", "models"] else None


def _imports(path: Path, module: str, is_pkg: bool):
    """(line, imported module) of every import in the file, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)] + ([node.module] if node.module else [])
                target = ".".join(base)
            else:
                target = node.module or ""
            # `from ..x import a`: a may be a submodule (another family's folder when x is ember.models)
            yield from ((node.lineno, f"{target}.{a.name}" if target == "ember.models" else target) for a in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            yield node.lineno, str(node.args[0].value)


def _family_modules():
    for path in sorted(MODELS.rglob("*.py")):
        rel = path.relative_to(MODELS).with_suffix("").parts
        if len(rel) < 2:  # models/__init__.py, models/auto.py: not in a family folder
            continue
        is_pkg = rel[-1] == "__init__"
        module = ".".join(("ember", "models") + (rel[:-1] if is_pkg else rel))
        if rel[-1] != "cli":
            yield path, module, is_pkg, rel[0]


def test_the_scan_sees_every_family():
    families = {f for _, _, _, f in _family_modules()} - SHARED - DISPATCHERS
    assert {"llama", "gemma3", "mistral", "gemma", "qwen3", "whisper", "yolo"} <= families


@pytest.mark.parametrize("folder", sorted({f for _, _, _, f in _family_modules()} - DISPATCHERS))
def test_a_family_imports_common_and_nothing_of_another_family(folder):
    bad = []
    for path, module, is_pkg, fam in _family_modules():
        if fam != folder:
            continue
        for line, target in dict.fromkeys(_imports(path, module, is_pkg)):
            other = _family_of(target)
            if other is None or other == fam or other in SHARED and fam not in SHARED:
                continue
            what = "a dispatcher" if other in DISPATCHERS else "another family" if fam not in SHARED else "a family"
            bad.append(f"models/{path.relative_to(MODELS)}:{line} imports {target} ({what})")
    assert not bad, "a family imports models/common only (common imports no family):\n  " + "\n  ".join(bad)
