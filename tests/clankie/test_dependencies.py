"""pyproject.toml declares every third-party distribution the shipped code imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = {"service/otel.py": "otel"}
"""Modules that only an optional extra's feature imports (tracing), with the extra that provides their imports."""


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imports_of(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def imported_top_level_modules(package_dirs: list[Path]) -> set[str]:
    names: set[str] = set()
    for directory in package_dirs:
        for source in directory.glob("*.py"):
            if source.relative_to(ROOT).as_posix() not in OPTIONAL:
                names |= imports_of(source)
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


def test_an_optional_feature_imports_only_what_its_extra_declares() -> None:
    """service/otel.py (tracing) imports OpenTelemetry, which the ``otel`` extra installs; nothing else needs it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dists = packages_distributions()
    for path, extra in OPTIONAL.items():
        declared = {canonical(re.split(r"[\s<>=~!;\[]", r, maxsplit=1)[0]) for r in project["project"]["optional-dependencies"][extra]}
        third_party = imports_of(ROOT / path) - {"service", "clankie", "__future__"} - set(sys.stdlib_module_names)
        assert third_party, f"{path} imports nothing of its extra"
        for module in third_party:
            assert {canonical(d) for d in dists.get(module, [module])} & declared, f"{path} imports {module}, not in [{extra}]"
