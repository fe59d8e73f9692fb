"""pyproject.toml declares every third-party distribution the shipped code imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_level_modules(package_dirs: list[Path]) -> set[str]:
    names: set[str] = set()
    for directory in package_dirs:
        for source in directory.glob("*.py"):
            for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """A fresh install from pyproject.toml gets every library the code imports, not just what the dev venv happens to hold."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages: list[str] = project["tool"]["setuptools"]["packages"]
    declared = {canonical(re.split(r"[\s<>=~!;\[]", r, maxsplit=1)[0]) for r in project["project"]["dependencies"]}
    dirs = [ROOT / p.replace(".", "/") for p in packages]
    dirs += [d for d in (ROOT / "clankie").rglob("*") if d.is_dir() and (d / "__init__.py").exists()]
    first_party = {p.split(".")[0] for p in packages}
    dists = packages_distributions()
    missing = set()
    for module in imported_top_level_modules(dirs) - first_party - set(sys.stdlib_module_names):
        for dist in dists.get(module, [module]):
            if canonical(dist) not in declared:
                missing.add(dist)
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
