"""The supervisor's modules import each other without a cycle (TYPE_CHECKING imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of ``package`` it imports, found with ast anywhere in the file."""
    mods = {f"{package}.{p.stem}": p for p in sorted((ROOT / package).glob("*.py"))}
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        out[name] = {d for d in deps if d in mods and d != name}
    return out


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``g`` (its modules in order), or None."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                return [*path[path.index(m) :], m]
            if m not in state and (found := visit(m)) is not None:
                return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_supervisor_has_no_import_cycle() -> None:
    """process ↔ tree and spare ↔ process went through protocols in supervisor/owner.py."""
    g = graph("supervisor")
    assert "supervisor.owner" in g["supervisor.process"]
    found = cycle(g)
    assert found is None, " → ".join(found or [])
