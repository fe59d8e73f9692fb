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


PURE_CORES = (
    "service/captain/lane.py",  # the lane state machine
    "supervisor/lifecycle.py",  # the child lifecycle
    "supervisor/sparelife.py",  # the warm spare's slot
    "supervisor/treestate.py",  # the tree's own state
    "supervisor/watchdog.py",  # heartbeat liveness and the stall watchdog's rule
    "bridge/admission.py",
    "bridge/dedupe.py",  # the de-duplication memory
    "bridge/engagement.py",  # engagement by age and count
    "bridge/fairness.py",  # turns per person and per room
    "bridge/waiting.py",  # messages waiting for a turn slot
    "bridge/journal_state.py",  # the journal folded into entries
    "bridge/packing.py",  # a waiting message packed in memory
    "bridge/chunks.py",
    "clankie/backoff.py",
    "clankie/framing.py",
    "clankie/errors.py",
)
"""The pure cores: no I/O, no clock; they may import each other and nothing else of the project."""

IO_MODULES = frozenset(
    {"asyncio", "socket", "os", "time", "logging", "subprocess", "threading", "select", "selectors", "pathlib",
     "shutil", "io", "tempfile", "datetime", "psutil", "ssl", "http", "urllib", "ctypes", "sqlite3", "mmap"}
)
CLOCK_CALLS = frozenset({"monotonic", "time", "now", "utcnow", "today", "perf_counter", "sleep", "boottime", "wall"})


def test_pure_cores_do_no_io() -> None:
    """Each pure core (lane, lifecycle, admission, chunks, backoff, protocol, framing) imports no I/O module,
    no impure module of the project, and calls no clock: time comes in as ``now``."""
    protocol = tuple(str(p.relative_to(ROOT)) for p in sources("clankie/protocol"))
    assert protocol, "the protocol package is where the rule looks"
    cores = (*PURE_CORES, *protocol)
    pure = {rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for rel in cores}
    pure |= {"clankie.protocol"}
    for rel in cores:
        path = ROOT / rel
        names = imports_of(path)
        bad = {n for n in names if top(n) in IO_MODULES}
        assert not bad, f"{rel} imports {bad}"
        impure = {n for n in names if top(n) in PACKAGES and n not in pure}
        assert not impure, f"{rel} imports {impure}, which is not a pure core"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in CLOCK_CALLS, f"{rel}:{node.lineno} calls .{node.func.attr}()"


def environ_reads(path: Path) -> list[int]:
    """Lines where ``path`` reads ``os.environ`` (an assignment into it is a write, not a read)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
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
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "wait_for" and isinstance(node.value, ast.Name) \
                        and node.value.id == "asyncio":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], f"use clankie.waits.within: {found}"
