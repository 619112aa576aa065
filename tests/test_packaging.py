"""pyproject lists ember's packages by hand (four source folders mapped onto one namespace), so a new
model folder missing from the list would import here (editable install) and be absent from the wheel
and from the page. Every folder holding Python modules must be listed."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_in_the_wheel():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = set()
    for name, folder in tool["package-dir"].items():
        for d in (ROOT / folder).rglob("*"):
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")):
                found.add(".".join([name, *d.relative_to(ROOT / folder).parts]))
        found.add(name)
    assert found - listed == set(), f"ember: pyproject.toml's packages lack {sorted(found - listed)}"
