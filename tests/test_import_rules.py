"""ARCHITECTURE §2 import rules, checked over the source tree with ast."""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("clankie", "supervisor", "service", "bridge", "hosts")


@functools.lru_cache(maxsize=4096)
def _parse(source: str, filename: str) -> ast.Module:
    """One parse per distinct source and name in a worker: the rules below walk the same ~600 files (read only)."""
    return ast.parse(source, filename=filename)


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, shared by every rule that reads it (keyed by its text, so a rewritten probe is new)."""
    return _parse(path.read_text(encoding="utf-8"), str(path))


def imports_of(path: Path) -> set[str]:
    """Top-level module names a file imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def runtime_imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Like :func:`imports_of`, without the imports under ``if TYPE_CHECKING:`` (names for annotations, never run);
    ``from package import module`` names the module (a package of the project under ``root``)."""
    tree = parsed(path)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name | ast.Attribute)
        and (node.test.id if isinstance(node.test, ast.Name) else node.test.attr) == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            package = root / node.module.replace(".", "/")
            subs = {f"{node.module}.{a.name}" for a in node.names if (package / f"{a.name}.py").exists()}
            names |= subs if subs and len(subs) == len(node.names) else {node.module}  # `from clankie import allow`
    return names


def write_sources(root: Path, files: dict[str, str]) -> None:
    """A probe's source tree under ``root``: each relative path with its text."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


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
    only the agent runtime's provider module imports anthropic, only service/otel.py imports opentelemetry."""
    homes: dict[str, Callable[[Path], bool]] = {
        "discord": lambda rel: rel.parts[0] == "bridge",
        "playwright": lambda rel: rel.parts[:2] == ("hosts", "browser"),
        "anthropic": lambda rel: rel.parts[:2] == ("service", "agent") and rel.stem.startswith("provider"),
        "opentelemetry": lambda rel: rel.as_posix() == "service/otel.py",  # the otel extra, imported only when tracing is on
    }
    for package in PACKAGES:
        for path in sources(package):
            rel = path.relative_to(ROOT)
            for lib, allowed in homes.items():
                if any(top(n) == lib for n in imports_of(path)):
                    assert allowed(rel), f"{rel} imports {lib}"


def _codemap() -> ModuleType:
    """``scripts/codemap.py``, the one reader of what the modules' docstrings claim (shared with ``scripts/gen-docs``)."""
    spec = importlib.util.spec_from_file_location("codemap", ROOT / "scripts" / "codemap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("codemap", module)
    spec.loader.exec_module(module)
    return module


codemap = _codemap()


def _shape_report() -> ModuleType:
    """``scripts/shape_report.py``, whose ``upward_imports`` is also the shape's figure (``scripts/shape``)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("shape_report")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_the_agent_runtime_imports_nothing_of_its_host() -> None:
    """service/agent/ imports service.agent and the kernel, never the service around it (its telemetry, the captain),
    by an absolute, relative or lazy import: the host plugs what the runtime reports into the runtime's own port
    (``service/agent/observe.py``). How each kind of import is seen: ``tests/test_shape_separation.py``."""
    assert _shape_report().upward_imports(ROOT) == []
PURE_CORES: tuple[str, ...] = tuple(codemap.pure_modules())
"""The pure cores: every module whose docstring says it is pure (``docs/architecture.md``, "Module docstrings"), read
from the docstrings so a new one is covered when it says so. No I/O, no clock; they may import each other and nothing
else of the project."""

IO_MODULES = frozenset(
    {"asyncio", "socket", "os", "time", "logging", "subprocess", "threading", "select", "selectors", "pathlib",
     "shutil", "io", "tempfile", "datetime", "psutil", "ssl", "http", "urllib", "ctypes", "sqlite3", "mmap"}
)
NO_IO_PARTS = {"urllib.parse": "string parsing", "pathlib": "paths as values", "datetime": "dates as values"}
"""Parts of the modules above a pure core may import, because the uses that would be I/O or a clock are caught by name
below (a filesystem call on a path, a clock read)."""
CLOCK_CALLS = frozenset({"monotonic", "time", "now", "utcnow", "today", "perf_counter", "sleep", "boottime", "wall"})
FILE_CALLS = frozenset({"open", "read_text", "read_bytes", "write_text", "write_bytes", "exists", "is_file", "is_dir",
                        "mkdir", "unlink", "rmdir", "stat", "lstat", "iterdir", "glob", "rglob", "resolve", "touch",
                        "chmod", "samefile", "expanduser", "home", "cwd", "fromtimestamp"})
"""Calls on a path (or a date) that reach the disk or the clock; ``fromtimestamp`` reads the local zone unless given one,
so a pure core converts with ``datetime.fromtimestamp(t, UTC)``, which is allowed."""


def impurities(path: Path, pure: set[str]) -> list[str]:
    """What keeps ``path`` from being a pure core: an I/O import, an impure project import, a clock or file call."""
    names = runtime_imports_of(path)
    found = [f"imports {n}" for n in sorted(names) if top(n) in IO_MODULES and not _no_io_part(n)]
    found += [f"imports {n}, which is not a pure core" for n in sorted(names) if top(n) in PACKAGES and n not in pure]
    touches_files = bool({"pathlib", "datetime"} & {top(n) for n in names})  # the file calls are read only where a path or date can be
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            zoned = attr == "fromtimestamp" and len(node.args) + len(node.keywords) >= 2
            if attr in CLOCK_CALLS or (attr in FILE_CALLS and not zoned and touches_files):
                found.append(f"line {node.lineno} calls .{attr}()")
    return found


def _no_io_part(name: str) -> bool:
    return any(name == part or name.startswith(part + ".") for part in NO_IO_PARTS)


def _dotted(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_the_pure_cores_are_read_from_the_docstrings() -> None:
    """The list is the docstrings' and it is not empty: every state machine, the watchdog and the browser's
    lifecycle say they are pure and so are checked below."""
    named = {m.module for m in codemap.MACHINES} | {"supervisor/watchdog.py", "hosts/browser/lifecycle.py", "bridge/admission.py"}
    assert named <= set(PURE_CORES), named - set(PURE_CORES)
    assert "supervisor/process.py" not in PURE_CORES, "a shell does not say it is pure"


def test_pure_cores_do_no_io() -> None:
    """Each pure core imports no I/O module, no impure module of the project, and calls no clock: time comes in as
    ``now``. The protocol package is pure as a whole (records and the method table)."""
    protocol = tuple(str(p.relative_to(ROOT)) for p in sources("clankie/protocol"))
    assert protocol, "the protocol package is where the rule looks"
    cores = (*PURE_CORES, *protocol)
    pure = {_dotted(rel) for rel in cores} | {"clankie.protocol"}
    found = {rel: bad for rel in cores if (bad := impurities(ROOT / rel, pure))}
    assert found == {}, found


def test_the_purity_rule_sees_io(tmp_path: Path) -> None:
    """The rule names an I/O import, a clock read and a disk call, and lets a path value and a parse pass."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import time\nfrom pathlib import Path\nfrom urllib.parse import quote\nimport service.captain.lanes.shell\n"
        "def f(p: Path) -> bytes:\n    return (p / quote('x')).read_bytes()\ndef g() -> float:\n    return time.monotonic()\n",
        encoding="utf-8",
    )
    assert impurities(probe, set()) == [
        "imports time", "imports service.captain.lanes.shell, which is not a pure core", "line 6 calls .read_bytes()",
        "line 8 calls .monotonic()",
    ]


def test_type_only_imports_do_not_count_and_a_submodule_is_named_as_one(tmp_path: Path) -> None:
    """An import under ``if TYPE_CHECKING:`` never runs; ``from clankie import allow`` imports ``clankie.allow``."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nfrom clankie import allow\nif TYPE_CHECKING:\n    import asyncio\n",
        encoding="utf-8",
    )
    assert runtime_imports_of(probe) == {"typing", "clankie.allow"}
    assert "asyncio" in imports_of(probe)  # the layering rules still see it


def environ_reads(path: Path) -> list[int]:
    """Lines where ``path`` reads ``os.environ`` (an assignment into it is a write, not a read)."""
    tree = parsed(path)
    stores = {
        id(t.value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Subscript)
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "environb", "getenv"} and id(node) not in stores:
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in {"environ", "environb", "getenv"} for a in node.names):
                lines.append(node.lineno)
    return sorted(lines)


def test_only_paths_reads_the_environment() -> None:
    """ARCHITECTURE §5: the environment is read in one place, clankie.paths.process_environment()."""
    allowed = {Path("clankie/paths.py")}
    for package in PACKAGES:
        for path in sources(package):
            rel = path.relative_to(ROOT)
            if rel not in allowed:
                assert not environ_reads(path), f"{rel}:{environ_reads(path)} reads os.environ"


def test_the_environment_rule_sees_a_read(tmp_path: Path) -> None:
    """The rule finds a read (attribute, getenv, from-import) and lets a write pass."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nos.environ['X'] = '1'\n", encoding="utf-8")
    assert environ_reads(probe) == []
    probe.write_text("import os\nfrom os import environ\nx = os.environ.get('X')\ny = os.getenv('Y')\n", encoding="utf-8")
    assert environ_reads(probe) == [2, 3, 4]


def test_no_bounded_wait_can_lose_a_cancellation() -> None:
    """``asyncio.wait_for`` is not used in the product: on 3.11 it can swallow a cancellation (clankie.waits)."""
    found = []
    for package in PACKAGES:
        for path in sources(package):
            for node in ast.walk(parsed(path)):
                if isinstance(node, ast.Attribute) and node.attr == "wait_for" and isinstance(node.value, ast.Name) \
                        and node.value.id == "asyncio":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], f"use clankie.waits.within: {found}"


def raises_in_star_handlers(tree: ast.Module) -> list[int]:
    """Lines of the ``raise`` statements inside ``except*`` handlers (a nested function's own are its own)."""
    found: list[int] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Raise):
            found.append(node.lineno)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for child in ast.iter_child_nodes(node):
                walk(child)

    for node in ast.walk(tree):
        if isinstance(node, ast.TryStar):
            for handler in node.handlers:
                for stmt in handler.body:
                    walk(stmt)
    return found


def test_nothing_is_raised_inside_an_except_star_handler() -> None:
    """Python before 3.11.4 (Debian 12 has 3.11.2) wraps what an ``except*`` handler raises in an ExceptionGroup
    (CPython gh-103590): a ConfigError raised there reached the bridge's exit as a group, exit 1 instead of 78. A
    handler keeps what it caught; the raise comes after the ``try``."""
    found = [f"{path.relative_to(ROOT)}:{line}" for package in PACKAGES for path in sources(package)
             for line in raises_in_star_handlers(parsed(path))]
    assert found == [], f"raise after the try, not in the except* handler: {found}"


def test_the_except_star_rule_sees_a_raise() -> None:
    """The rule above finds a raise in a handler, and leaves alone one after the ``try`` or in a nested function."""
    tree = ast.parse(
        "try:\n    pass\nexcept* ValueError as g:\n    raise g.exceptions[0]\n"
        "try:\n    pass\nexcept* KeyError as g:\n    kept = g\n    def later() -> None:\n        raise kept\n"
        "raise SystemExit\n"
    )
    assert raises_in_star_handlers(tree) == [4]


# ---------------------------------------------------------------- the operator's CLI is a client, not a supervisor

CLI = "supervisor.ctl"
CLI_NEVER = ("supervisor.app", "supervisor.tree", "supervisor.process", "supervisor.metrics", "prometheus_client",
             "pydantic_settings", "psutil")
"""What ``clankiectl`` never loads: the running supervisor (its tree, its children, its metrics) and the libraries only
a serving process needs (``clankiectl doctor`` loads aiohttp for its HTTP probes, when it runs them). The CLI is a
client of ``control.sock``, and an operator's every ``clankiectl status`` pays its imports: 0.44-0.59 CPU s a call
while one constant brought in the supervisor's tree, 0.35-0.41 without (``bench/ctl.py``, docs/benchmarks.md)."""


def import_closure(start: str, root: Path = ROOT) -> dict[str, str]:
    """Every module ``start`` can load at run time (a lazy import counts, a ``TYPE_CHECKING`` one does not), each with
    the project module that imports it first: the project's modules under ``root`` with their packages, and the
    top-level names of the rest."""
    first: dict[str, str] = {start: start}
    todo = [start]
    while todo:
        name = todo.pop()
        base = root / name.replace(".", "/")
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not path.is_file():
            continue  # a name inside a module (`from clankie.protocol import X` names the module already)
        for imported in sorted(runtime_imports_of(path, root)):
            parts = imported.split(".")
            found = [".".join(parts[:i]) for i in range(1, len(parts) + 1)] if parts[0] in PACKAGES else [parts[0]]
            for module in found:  # a submodule runs its packages' __init__ first
                if module not in first:
                    first[module] = name
                    todo.append(module)
    return first


def test_clankiectl_loads_no_part_of_the_running_supervisor() -> None:
    closure = import_closure(CLI)
    assert {name: closure[name] for name in CLI_NEVER if name in closure} == {}, "imported by the module named"


def test_the_cli_rule_follows_a_chain_of_imports_and_skips_type_only_ones(tmp_path: Path) -> None:
    write_sources(tmp_path, {
        "supervisor/__init__.py": "", "supervisor/ctl.py": "from supervisor import ctl_args\n",
        "supervisor/ctl_args.py": "def later() -> None:\n    from supervisor.tree import STOP_BUDGET\n",
        "supervisor/tree.py": "import prometheus_client\n",
        "supervisor/ctl_render.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import supervisor.app\n",
    })
    closure = import_closure(CLI, tmp_path)
    assert closure["supervisor.tree"] == "supervisor.ctl_args" and closure["prometheus_client"] == "supervisor.tree"
    assert "supervisor.app" not in closure and "supervisor.ctl_render" not in closure


# ---------------------------------------------------------------- the captain's jobs and their facades

CAPTAIN = "service/captain"
JOBS_MAY_IMPORT: dict[str, set[str]] = {
    "lanes": {"media", "spend", "tools"},
    "deliveries": set(),
    "spend": set(),
    "media": set(),
    "tools": set(),
}
"""Which of the captain's jobs each job may import (through its facade): downward only, so no facade's import
runs into a half-made one."""


def _imported_modules(path: Path, root: Path) -> set[str]:
    """Dotted modules ``path`` imports, a ``from package import submodule`` naming the submodule."""
    names: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            package = root / node.module.replace(".", "/")
            subs = {f"{node.module}.{a.name}" for a in node.names if (package / f"{a.name}.py").exists()}
            names |= subs | ({node.module} if len(subs) < len(node.names) else set())
    return names


def _job_of(rel: str) -> str | None:
    """The captain's job a path or dotted module belongs to (``lanes``), or None."""
    parts = rel.removesuffix(".py").replace(".", "/").split("/")
    return parts[2] if len(parts) > 3 and parts[:2] == ["service", "captain"] else None


def behind_facades(root: Path) -> list[str]:
    """Each import, in the five packages, of a captain job's module from outside that job (its facade is the way
    in), and each import of one job by another that :data:`JOBS_MAY_IMPORT` does not allow."""
    jobs = {p.parent.name for p in (root / CAPTAIN).glob("*/__init__.py")}
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            mine = _job_of(rel)
            for name in sorted(_imported_modules(path, root)):
                job = _job_of(name) if name.startswith("service.captain.") else None
                if name.startswith("service.captain.") and name.count(".") == 2 and name.split(".")[2] in jobs:
                    job, behind = name.split(".")[2], False
                else:
                    behind = job is not None
                if job is None or job not in jobs or job == mine:
                    continue
                if behind:
                    found.append(f"{rel} imports {name}, behind the facade of service.captain.{job}")
                elif mine is not None and job not in JOBS_MAY_IMPORT.get(mine, set()):
                    found.append(f"{rel} imports service.captain.{job}: the job {mine} may not")
    return found


def test_no_caller_reaches_behind_a_captain_facade() -> None:
    """Outside a job of the captain, its modules are reached only through its facade (its ``__init__``); the tests
    and benches, which test and measure the modules, may go behind it."""
    assert {p.parent.name for p in (ROOT / CAPTAIN).glob("*/__init__.py")} == set(JOBS_MAY_IMPORT)
    assert behind_facades(ROOT) == []


def test_the_facade_rule_sees_a_reach_and_a_job_importing_upward(tmp_path: Path) -> None:
    write_sources(tmp_path, {
        "service/captain/lanes/__init__.py": "", "service/captain/lanes/shell.py": "",
        "service/captain/media/__init__.py": "from service.captain.lanes import shell\n",
        "service/captain/media/inbound.py": "from service.captain.media import x\n",
        "service/app.py": "from service.captain.lanes.shell import LaneShell\nfrom service.captain.lanes import Captain\n",
    })
    assert behind_facades(tmp_path) == [
        "service/app.py imports service.captain.lanes.shell, behind the facade of service.captain.lanes",
        "service/captain/media/__init__.py imports service.captain.lanes.shell, behind the facade of service.captain.lanes",
    ]
    (tmp_path / "service/captain/media/__init__.py").write_text("from service.captain.lanes import Captain\n")
    (tmp_path / "service/app.py").write_text("from service.captain.lanes import Captain\n")
    assert behind_facades(tmp_path) == ["service/captain/media/__init__.py imports service.captain.lanes: the job media may not"]
