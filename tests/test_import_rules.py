"""ARCHITECTURE §2 import rules, checked over the source tree with ast."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("clankie", "supervisor", "service", "bridge", "hosts")


def imports_of(path: Path) -> set[str]:
    """Top-level module names a file imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def top(name: str) -> str:
    return name.split(".")[0]


def test_every_package_has_sources() -> None:
    """The rule check is looking at real code."""
    assert all(sources(p) for p in PACKAGES)


def test_the_kernel_imports_no_other_package() -> None:
    """clankie is the shared contract: it depends on nothing else in the project."""
    for path in sources("clankie"):
        bad = {n for n in imports_of(path) if top(n) in PACKAGES[1:]}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_process_packages_never_import_each_other() -> None:
    """supervisor, service, bridge and hosts talk over sockets, not imports."""
    for package in PACKAGES[1:]:
        for path in sources(package):
            bad = {n for n in imports_of(path) if top(n) in PACKAGES[1:] and top(n) != package}
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_third_party_clients_stay_in_their_one_home() -> None:
    """Only the bridge imports discord, only the browser host imports playwright,
    only the agent runtime's provider module imports anthropic."""
    homes: dict[str, Callable[[Path], bool]] = {
        "discord": lambda rel: rel.parts[0] == "bridge",
        "playwright": lambda rel: rel.parts[:2] == ("hosts", "browser"),
        "anthropic": lambda rel: rel.parts[:2] == ("service", "agent") and rel.stem.startswith("provider"),
    }
    for package in PACKAGES:
        for path in sources(package):
            rel = path.relative_to(ROOT)
            for lib, allowed in homes.items():
                if any(top(n) == lib for n in imports_of(path)):
                    assert allowed(rel), f"{rel} imports {lib}"


def test_pure_cores_do_no_io() -> None:
    """The codec, the wire records and the backoff import no asyncio, socket, os, time or logging."""
    forbidden = {"asyncio", "socket", "os", "time", "logging"}
    for rel in ("clankie/framing.py", "clankie/protocol.py", "clankie/backoff.py"):
        bad = {n for n in imports_of(ROOT / rel) if top(n) in forbidden}
        assert not bad, f"{rel} imports {bad}"
