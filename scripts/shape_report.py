"""The shape section of ``docs/architecture.md``: the figures issue 28's "Done when" names, measured, as Markdown.

Two blocks, for two kinds of figure:

* ``<!-- shape: static -->``: what the source says without running it and what changes only when the shape does (each
  state machine's feeding sites, the module count, the modules over the cap, whether the median is within its bound).
  ``scripts/gen-docs`` writes it and ``--check`` fails when it drifts, like the state-machine tables.
* ``<!-- shape: measured -->``: exact sizes and the turn path, which change with most commits and (the turn path)
  need a run. ``scripts/shape --write REV ...`` measures each revision in a git worktree of its own and writes the
  block with the revisions named; it is rerun by hand, and the check leaves it alone.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

import codemap

ROOT = codemap.ROOT
CAP = 400
"""The module-size cap (``scripts/module-sizes --limit``)."""
MEDIAN_BOUND = 150
"""Issue 28: the median module stays at or under this many lines."""


def _load(script: str) -> ModuleType:
    """A script of ``scripts/`` (no ``.py`` suffix) as a module."""
    loader = importlib.machinery.SourceFileLoader(script.replace("-", "_"), str(ROOT / "scripts" / script))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_sizes = _load("module-sizes")


def sizes(root: Path = ROOT) -> dict[str, int]:
    """Line count of every module of the five packages, as ``scripts/module-sizes`` counts them."""
    table: dict[str, int] = {}
    for rel in codemap.modules(root):
        with (root / rel).open(encoding="utf-8") as fh:
            table[rel] = sum(1 for _ in fh)
    return table


def _sites_cell(sites: list[codemap.Site]) -> str:
    callers: dict[tuple[str, str], int] = {}
    for s in sites:
        callers[(s.module, s.caller)] = callers.get((s.module, s.caller), 0) + 1
    return "; ".join(f"`{m}` `{c}`" + (f" ×{n}" if n > 1 else "") for (m, c), n in sorted(callers.items()))


LANE = next(m for m in codemap.MACHINES if m.name == "the lane")
LANE_FEED = "LaneShell.feed"
"""The lane's one funnel: the one place outside the machine's module that may carry out its ``DropLane``."""
DROPPERS = ("kit", "registry")
"""A call ``<…kit|registry>.drop(...)`` forgets a lane: a decision only the machine makes (``DropLane``)."""


@dataclass(frozen=True)
class SideDoor:
    """One decision about a lane made outside its machine: a read of ``machine.state``, or a lane dropped."""

    module: str
    line: int
    caller: str
    what: str  # "machine.state" or "drop"


def lane_side_doors(root: Path = ROOT) -> list[SideDoor]:
    """Reads of a lane machine's ``state`` (``machine.state``, ``lane.machine.state``) outside the machine's module,
    and calls of a kit's or registry's ``drop`` outside the shell's funnel (:data:`LANE_FEED`): each decides about a
    lane behind its machine's back. A caller asks the machine instead (``Lane.live``, ``Lane.at_rest``) or feeds it
    an event and obeys the actions it answers. Static and by name, in the five packages (not the tests)."""
    doors: list[SideDoor] = []
    lane = LANE.at(root) or LANE  # an older revision's lane module is where it was then
    for rel in codemap.modules(root):
        if rel == lane.module:
            continue
        called = _callees(root / rel)
        for node, caller in codemap._nodes(root / rel)[1]:
            if not isinstance(node, ast.Attribute):
                continue
            held = codemap._name_of(node.value)
            if node.attr == "state" and held == "machine":
                doors.append(SideDoor(rel, node.lineno, caller, "machine.state"))
            elif node.attr == "drop" and held in DROPPERS and id(node) in called and caller != LANE_FEED:
                doors.append(SideDoor(rel, node.lineno, caller, "drop"))
    return doors


@functools.cache
def _callees(path: Path) -> frozenset[int]:
    """The ids of the callee expressions of every call in the module at ``path`` (its tree is parsed once)."""
    return frozenset(id(n.func) for n in ast.walk(codemap.tree(path)) if isinstance(n, ast.Call))


def captain_folders(root: Path = ROOT) -> dict[str, int]:
    """How many modules (``__init__.py`` aside) each folder of ``service/captain/`` holds, the folder itself first."""
    counts: dict[str, int] = {}
    for rel in codemap.modules(root):
        if rel.startswith("service/captain/") and not rel.endswith("/__init__.py"):
            folder = codemap.package_of(rel)
            counts[folder] = counts.get(folder, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (kv[0] != "service/captain", kv[0])))


def static_block(root: Path = ROOT) -> str:
    """The checked block: feeding sites, module count, modules over the cap, the median against its bound."""
    rows = []
    for m in codemap.MACHINES:
        sites = codemap.feeding_sites(m, root)
        entries = ", ".join(f"`{e}`" for e in m.entries)
        rows.append(f"| {m.name} (`{m.module}`) | {entries} | {len(sites)} | {_sites_cell(sites)} |")
    table = sizes(root)
    over = sorted(((n, p) for p, n in table.items() if n > CAP), reverse=True)
    median = statistics.median(table.values())
    out = [
        "| state machine | its entries | feeding sites | where (module, function; ×uses) |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Modules: {len(table)}. Over {CAP} lines: {len(over)}"
        + (" (" + ", ".join(f"`{p}` {n}" for n, p in over) + ")" if over else "")
        + f". Median at most {MEDIAN_BOUND} lines: {'yes' if median <= MEDIAN_BOUND else 'no'}.",
        "",
        _doors_line(lane_side_doors(root)),
        "",
        "Captain modules per folder (`__init__.py` aside): "
        + ", ".join(f"`{folder}/` {n}" for folder, n in captain_folders(root).items()) + ".",
    ]
    out += ["", separation_line(root)]
    return "\n".join(out) + "\n"


def _doors_line(doors: list[SideDoor]) -> str:
    where = "; ".join(f"`{d.module}` `{d.caller}` ({d.what})" for d in doors)
    return f"Lane side doors (decisions about a lane outside its machine): {len(doors)}" + (f" ({where})." if doors else ".")
# ---------------------------------------------------------------- issue 33: the agent runtime alone, metric families typed

RUNTIME = "service/agent"
"""The agent runtime: it reports through ports it defines and imports nothing of the service around it."""
METER_CALLS = frozenset({"count", "set", "observe"})
"""The meter's methods (``clankie.metrics.Meter``): each names the family it adds to."""


def _module_of(rel: str) -> list[str]:
    """The package parts of a module path (``service/agent/tools.py`` -> ``["service", "agent"]``)."""
    return rel.removesuffix(".py").split("/")[:-1]


def upward_imports(root: Path = ROOT) -> list[str]:
    """``module:line name`` for each import in the agent runtime of ``service`` outside ``service.agent`` (absolute or
    relative, at any depth of the module: a lazy import counts)."""
    found = []
    for rel in codemap.modules(root):
        if not rel.startswith(RUNTIME + "/"):
            continue
        here = _module_of(rel)
        for node in ast.walk(codemap.tree(root / rel)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
                module = ".".join(p for p in (base, node.module or "") if p)
                names = [f"{module}.{a.name}" if module == "service" or not node.module else module for a in node.names]
            else:
                continue
            found += [f"{rel}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] == "service" and n != "service.agent" and not n.startswith("service.agent.")]
    return found


def metric_names_as_strings(root: Path = ROOT) -> list[str]:
    """``module:line`` of each meter call (``METER.count/set/observe`` or a meter's) that names its family by a string:
    a literal, an f-string, or a module constant holding one (``FAMILY = "clankie_..."``), not a typed family."""
    found = []
    for rel in codemap.modules(root):
        parsed = codemap.tree(root / rel)
        constants = {t.id for node in parsed.body if isinstance(node, ast.Assign)
                     and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                     for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(parsed):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in METER_CALLS
                    and node.args):
                continue
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name.lower() not in {"meter", "_meter"}:
                continue
            first = node.args[0]
            if (isinstance(first, ast.Constant) and isinstance(first.value, str)) or isinstance(first, ast.JoinedStr) \
                    or (isinstance(first, ast.Name) and first.id in constants):
                found.append(f"{rel}:{node.lineno}")
    return found


SEPARATION: dict[str, Callable[[Path], list[str]]] = {
    "upward imports from the agent runtime": upward_imports,
    "metric names as strings at call sites": metric_names_as_strings,
}
"""Issue 33's figures, each the list of its sites (its figure is their count; both should be 0)."""


def separation_figures(root: Path = ROOT) -> dict[str, int]:
    """Each of :data:`SEPARATION`'s figures of the tree at ``root``."""
    return {name: len(sites(root)) for name, sites in SEPARATION.items()}


def separation_line(root: Path = ROOT) -> str:
    """The static block's line of issue 33's figures."""
    figures = separation_figures(root)
    return ". ".join(f"{name[0].upper()}{name[1:]}: {n}" for name, n in figures.items()) + "."


# ---------------------------------------------------------------- measured at a revision


@dataclass(frozen=True)
class Measure:
    """The figures of one revision."""

    rev: str
    label: str
    sites: dict[str, int | None]  # machine name -> feeding sites (None: no such module at that revision)
    modules: int
    median: float
    p90: int
    largest: tuple[int, str]
    over: int
    turn: dict[str, int]  # scripts/turn-path's last line: files, cross_file_calls, steps, returns, reentries
    doors: int | None = None  # lane side doors (None: not measured)
    folders: str = ""  # captain modules per folder, as "service/captain 24"
    separation: dict[str, int] = field(default_factory=dict)  # separation_figures: upward imports, metric names as strings


def measure(rev: str, label: str) -> Measure:
    """Measure ``rev`` in a detached worktree of its own (removed after), running that revision's ``turn-path``."""
    with tempfile.TemporaryDirectory(prefix="shape-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
        try:
            done = subprocess.run([sys.executable, str(tree / "scripts" / "turn-path")], cwd=tree, capture_output=True,
                                  text=True, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
            last = done.stdout.strip().splitlines()[-1]
            turn = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", last)}
            table = sizes(tree)
            values = list(table.values())
            largest = max(table, key=lambda p: table[p])
            return Measure(
                rev=rev, label=label,
                sites={m.name: len(codemap.feeding_sites(there, tree)) if (there := m.at(tree)) else None for m in codemap.MACHINES},
                modules=len(values), median=statistics.median(values), p90=int(_sizes.percentile(values, 0.9)),
                largest=(table[largest], largest), over=sum(1 for n in values if n > CAP), turn=turn,
                doors=len(lane_side_doors(tree)),
                folders=", ".join(f"{f.removeprefix('service/captain').lstrip('/') or '.'} {n}" for f, n in captain_folders(tree).items()),
                separation=separation_figures(tree),
            )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def short(rev: str) -> str:
    """The abbreviated commit id of ``rev`` (kept as written if it is already one)."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def measured_block(columns: list[Measure]) -> str:
    """The measured block: one column per revision."""
    head = "| | " + " | ".join(f"{c.label} (`{short(c.rev)}`)" for c in columns) + " |"
    rows = [head, "|---|" + "---|" * len(columns)]

    def row(name: str, cells: list[str]) -> None:
        rows.append(f"| {name} | " + " | ".join(cells) + " |")

    for m in codemap.MACHINES:
        row(f"feeding sites: {m.name}", ["—" if c.sites[m.name] is None else str(c.sites[m.name]) for c in columns])
    row("modules", [str(c.modules) for c in columns])
    row("median lines", [f"{c.median:g}" for c in columns])
    row("p90 lines", [str(c.p90) for c in columns])
    row("largest", [f"{c.largest[0]} (`{c.largest[1]}`)" for c in columns])
    row(f"modules over {CAP} lines", [str(c.over) for c in columns])
    row("lane side doors", ["?" if c.doors is None else str(c.doors) for c in columns])
    row("captain modules per folder", [c.folders or "?" for c in columns])
    for key, name in (("files", "files one turn enters"), ("cross_file_calls", "distinct cross-file calls"),
                      ("steps", "cross-file steps"), ("returns", "steps into a file entered before"),
                      ("reentries", "re-entries (into a file still on the stack)")):
        row(name, [str(c.turn.get(key, "?")) for c in columns])
    for name in SEPARATION:
        row(name, [str(c.separation.get(name, "?")) for c in columns])
    return "\n".join(rows) + "\n"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the block between ``<!-- shape: NAME -->`` and ``<!-- /shape -->`` replaced by ``body``."""
    pattern = re.compile(rf"(<!-- shape: {re.escape(name)}[^>]*-->\n)(.*?)(<!-- /shape -->)", re.DOTALL)
    if not pattern.search(text):
        raise LookupError(f"no <!-- shape: {name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)
