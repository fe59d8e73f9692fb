"""What the source tree says about itself, read statically: its modules, their docstrings, which claim to be pure, and
where each state machine is fed.

Nothing here imports the code it reads (``ast`` only), so it answers the same on any checkout. Three readers share it:
``scripts/gen-docs`` (the module tables and the shape section), ``scripts/shape`` and ``tests/test_import_rules.py``
(the pure cores are the modules whose docstrings say so).

The conventions it reads, recorded in ``docs/architecture.md`` ("Module docstrings"):

* a module's **summary** is its docstring's first paragraph; it is the module's row in its package's table;
* a module **says it is pure** when its summary says "pure" or "sans-IO", or a sentence of a later paragraph opens
  with "Pure" ("Pure: no I/O, no clock."); a module with only a pure part names the part mid-sentence
  (":func:`x` is the pure rule; :func:`y` the shell");
* a **state machine** is a module that says it is pure and whose summary says "state machine"; :data:`MACHINES` names
  each one's entries, and the check fails when a module says it is a machine and is not named there.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("clankie", "supervisor", "service", "bridge", "hosts")
"""The five packages of the product; ``clankie/testing`` is among them (its table is in ``docs/testing.md``)."""

_PURE_SUMMARY = re.compile(r"\b(pure|sans-io)\b", re.IGNORECASE)
_PURE_SENTENCE = re.compile(r"(?:^|[.!?]\s)Pure\b")
_MACHINE = re.compile(r"\bstate machine\b", re.IGNORECASE)
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def modules(root: Path = ROOT) -> list[str]:
    """Every module of the five packages, as a path relative to ``root`` (``service/captain/lanes/lane.py``), sorted."""
    return sorted(p.relative_to(root).as_posix() for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def package_of(rel: str) -> str:
    """The directory a module sits in: its package (``service/captain``)."""
    return rel.rsplit("/", 1)[0]


@cache
def tree(path: Path) -> ast.Module:
    """The parsed module at ``path``, parsed once per process (the docs, the shape and the tests read it many times)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


Binder = ast.Assign | ast.AnnAssign | ast.arg | ast.keyword | ast.FunctionDef | ast.AsyncFunctionDef


@cache
def _nodes(path: Path) -> tuple[list[Binder], list[tuple[ast.Name | ast.Attribute, str]]]:
    """The nodes of ``path`` that may bind a name to an instance (assignments, arguments, keywords, a function's
    return), and its uses of names and attributes."""
    binders: list[Binder] = [n for n in ast.walk(tree(path)) if isinstance(n, Binder)]
    return binders, _uses(tree(path))


def docstring(rel: str, root: Path = ROOT) -> str:
    """The module's docstring, cleaned of its indentation; empty when it has none."""
    return ast.get_docstring(tree(root / rel)) or ""


def empty(rel: str, root: Path = ROOT) -> bool:
    """The module holds nothing at all (an empty ``__init__.py``, a package marker): it needs no docstring."""
    return not tree(root / rel).body


def paragraphs(rel: str, root: Path = ROOT) -> list[str]:
    """The docstring's paragraphs, each on one line."""
    return [" ".join(p.split()) for p in docstring(rel, root).split("\n\n") if p.strip()]


def summary(rel: str, root: Path = ROOT) -> str:
    """The docstring's first paragraph as Markdown on one line (reST roles and double backquotes become code)."""
    first = next(iter(paragraphs(rel, root)), "")
    return _ROLE.sub(r"`\1`", first).replace("``", "`")


def says_pure(rel: str, root: Path = ROOT) -> bool:
    """The module's docstring claims the whole module is pure (see the module docstring for the convention)."""
    paras = paragraphs(rel, root)
    return bool(paras) and (bool(_PURE_SUMMARY.search(paras[0])) or any(_PURE_SENTENCE.search(p) for p in paras[1:]))


def pure_modules(root: Path = ROOT) -> list[str]:
    """Every module whose docstring says it is pure."""
    return [rel for rel in modules(root) if says_pure(rel, root)]


def says_machine(rel: str, root: Path = ROOT) -> bool:
    """The module says it is a pure state machine."""
    return says_pure(rel, root) and bool(_MACHINE.search(next(iter(paragraphs(rel, root)), "")))


# ---------------------------------------------------------------- the state machines and who feeds them


@dataclass(frozen=True)
class Machine:
    """A pure state machine and the callables that move it: a method set of ``cls``, or module functions."""

    module: str  # path, e.g. "service/captain/lanes/lane.py"
    name: str  # what the docs call it
    entries: tuple[str, ...]  # the names whose calls feed it an event
    cls: str | None = None  # the class whose instances hold the state; None when the entries are functions
    formerly: tuple[str, ...] = ()  # where the module was before a move (a measure of an older revision finds it there)

    def at(self, root: Path) -> Machine | None:
        """This machine as the tree at ``root`` has it: under its path, or the first former one there; None if none."""
        for path in (self.module, *self.formerly):
            if (root / path).exists():
                return self if path == self.module else replace(self, module=path)
        return None

    @property
    def dotted(self) -> str:
        return self.module.removesuffix(".py").replace("/", ".")


MACHINES = (
    Machine("service/captain/lanes/lane.py", "the lane", ("handle",), "Lane", formerly=("service/captain/lane.py",)),
    Machine("supervisor/lifecycle.py", "a child's lifecycle",
            ("handle", "start", "ready", "stop", "kill", "spawn_failed", "exit"), "Lifecycle"),
    Machine("supervisor/sparelife.py", "a child's spare slot", ("handle", "want", "parked", "take", "exit", "due", "drop"), "SpareLife"),
    Machine("supervisor/treestate.py", "the tree", ("move",)),
    Machine("hosts/browser/lifecycle.py", "the browser", ("apply",), "Lifecycle"),
    Machine("service/agent/breaker.py", "a model route's breaker", ("apply",), "Breaker"),
    Machine("bridge/gateway_link.py", "a shard's gateway link", ("move",), "Link"),
    Machine("clankie/store/lease.py", "a shard's lease", ("handle",), "Lease"),
)
"""Every module that says it is a pure state machine, with its entries (``scripts/gen-docs`` checks the list is whole).
The watchdog (``supervisor/watchdog.py``) is pure but not a machine: it has rules over time, no table of states."""


@dataclass(frozen=True)
class Site:
    """One use of a machine's entry outside its module: a call, or the entry handed on to be called later (a
    callback feeds the machine as surely as a call)."""

    module: str
    line: int
    entry: str
    caller: str  # the qualified name of the function the use is in ("LaneShell.feed"), or "<module>"


def _bindings(path: Path, cls: str) -> tuple[set[str], set[str], list[tuple[str, str]], set[str]]:
    """Names and attributes the module at ``path`` binds to an instance of ``cls`` (``self.life = SpareLife(...)``, ``life: Lifecycle``,
    ``machine=Lane(key)``, ``def f(lane: Lane)``, ``machine = lane.machine``), those it binds to some other call, and the
    functions it declares as returning one (``def link(self, shard) -> Link``: ``self.link(shard).move(...)`` holds one)."""

    def mentions(expr: ast.expr | None) -> bool:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return re.search(rf"\b{re.escape(cls)}\b", expr.value) is not None
        return expr is not None and any((isinstance(n, ast.Name) and n.id == cls) or (isinstance(n, ast.Attribute) and n.attr == cls)
                                        for n in ast.walk(expr))

    ours: set[str] = set()
    other: set[str] = set()
    aliases: list[tuple[str, str]] = []
    makers: set[str] = set()
    for node in _nodes(path)[0]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and mentions(node.returns):
            makers.add(node.name)
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = [n for n in map(_name_of, node.targets if isinstance(node, ast.Assign) else [node.target]) if n]
            if isinstance(node.value, ast.Call):
                (ours if mentions(node.value.func) else other).update(targets)
            elif (held := _name_of(node.value)) is not None:
                aliases += [(held, t) for t in targets]
        if isinstance(node, ast.AnnAssign) and mentions(node.annotation):
            ours.update(n for n in [_name_of(node.target)] if n)
        elif isinstance(node, ast.arg) and mentions(node.annotation):
            ours.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg and isinstance(node.value, ast.Call) and mentions(node.value.func):
            ours.add(node.arg)
    return ours, other - ours, aliases, makers


def _name_of(expr: ast.expr) -> str | None:
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None


def feeding_sites(machine: Machine, root: Path = ROOT) -> list[Site]:
    """Every use of one of the machine's entries (a call, or a reference handed on) outside its own module and the tests.

    A function entry counts when used by its imported name or through its module. A method entry counts when it is
    read from a name or attribute that holds an instance of the machine's class: one its own module binds to one, or
    one any module of the same package binds to one (a field ``lane: Lane``, a keyword ``machine=Lane(key)``) and
    this module does not bind to something else; or from the call of a function the package declares as returning
    one (``self.link(shard).move(...)`` with ``def link(...) -> Link``). Static and by name, so a rename that hides a
    holder hides its calls:
    the tests pin the figures of today's tree.
    """
    top = machine.module.split("/")[0]
    scope = [rel for rel in modules(root) if rel.split("/")[0] == top]
    bindings = {rel: _bindings(root / rel, machine.cls) for rel in scope} if machine.cls else {}
    shared: set[str] = set().union(*(ours for ours, _, _, _ in bindings.values())) if bindings else set()
    makers: set[str] = set().union(*(made for _, _, _, made in bindings.values())) if bindings else set()
    sites: list[Site] = []
    for rel in scope:
        if rel == machine.module:
            continue
        if machine.cls is None:
            imported = _imports_machine(tree(root / rel), machine, rel)
            direct = imported & set(machine.entries)
            via_module = {machine.dotted.rsplit(".", 1)[1]} & imported
            holders: set[str] = set()
        else:
            ours, other, aliases, _ = bindings[rel]
            direct, via_module = set(), set()
            holders = set(ours) | (shared - other)
            holders |= {target for held, target in aliases if held in holders}
        for node, caller in _nodes(root / rel)[1]:
            if isinstance(node, ast.Name) and node.id in direct:
                sites.append(Site(rel, node.lineno, node.id, caller))
            elif isinstance(node, ast.Attribute) and node.attr in machine.entries:
                held = _name_of(node.value)
                made = isinstance(node.value, ast.Call) and _name_of(node.value.func) in makers
                if made or (held is not None and (held in holders or held in via_module)):
                    sites.append(Site(rel, node.lineno, node.attr, caller))
    return sorted(sites, key=lambda s: (s.module, s.line))


def _imports_machine(parsed: ast.Module, machine: Machine, rel: str) -> set[str]:
    """The local names under which ``parsed`` holds the machine's module or its names (empty: it does not import it)."""
    names: set[str] = set()
    package = package_of(rel).replace("/", ".")
    target = machine.dotted
    leaf = target.rsplit(".", 1)[1]
    for node in ast.walk(parsed):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                if base == target:
                    names.add(alias.asname or alias.name)
                elif f"{base}.{alias.name}" == target:
                    names.add(alias.asname or leaf)
        elif isinstance(node, ast.Import):
            names.update(alias.asname or alias.name for alias in node.names if alias.name == target)
    return names


def _uses(parsed: ast.Module) -> list[tuple[ast.Name | ast.Attribute, str]]:
    """Every name and attribute read in ``parsed`` (a call's callee among them), with the qualified name of the
    function or class body it is written in."""
    out: list[tuple[ast.Name | ast.Attribute, str]] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, (*scope, child.name))
                continue
            if isinstance(child, ast.Name | ast.Attribute) and isinstance(child.ctx, ast.Load):
                out.append((child, ".".join(scope) or "<module>"))
            visit(child, scope)

    visit(parsed, ())
    return out


def undeclared_machines(root: Path = ROOT) -> list[str]:
    """Modules that say they are a pure state machine but are not in :data:`MACHINES` (or the other way round)."""
    said = {rel for rel in modules(root) if says_machine(rel, root)}
    declared = {m.module for m in MACHINES}
    return sorted(said ^ declared)
