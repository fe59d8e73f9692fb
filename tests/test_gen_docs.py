"""The generated docs (state machines, settings reference, module tables, the shape) match the code:
scripts/gen-docs --check, and the rules it checks by."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    loader.exec_module(module)
    return module


@pytest.fixture
def gen(tmp_path: Path) -> ModuleType:
    """scripts/gen-docs loaded as a module, writing to and checking a copy of docs/ (the checkout untouched)."""
    module = _load("gen_docs", ROOT / "scripts" / "gen-docs")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    setattr(module, "OUT", tmp_path)  # noqa: B010  (a module loaded from a path: mypy cannot see its names)
    return module


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for package in ("clankie", "supervisor", "service", "bridge", "hosts"):
        (root / package).mkdir(exist_ok=True)
    return root


def test_generated_docs_are_up_to_date() -> None:
    """A table, a setting, a module or a docstring changed without re-running scripts/gen-docs fails here."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-docs"), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_check_sees_drift(gen: ModuleType, tmp_path: Path) -> None:
    """--check exits 1 when a generated file differs, or a module table or the shape block is stale."""
    assert gen.main(["--check"]) == 0
    (tmp_path / "docs" / "state-machines.md").write_text("stale\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0  # rewritten
    bridge = tmp_path / "docs" / "bridge.md"
    text = bridge.read_text(encoding="utf-8")
    bridge.write_text(text.replace("| `bridge/chunks.py` |", "| `bridge/chunks.py` | stale |", 1), encoding="utf-8")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and bridge.read_text(encoding="utf-8") == text  # the prose around it kept
    arch = tmp_path / "docs" / "architecture.md"
    arch.write_text(arch.read_text(encoding="utf-8").replace("Modules: ", "Modules: 1", 1), encoding="utf-8")
    assert gen.main(["--check"]) == 1


def test_every_module_sits_in_exactly_one_table() -> None:
    """Each package directory of the five packages is named by one block, so every module has one row."""
    gen = _load("gen_docs_whole", ROOT / "scripts" / "gen-docs")
    assert gen.coverage() == []
    blocks = [m.group("body") for rel in gen.marked_docs() for m in gen.MODULES.finditer((ROOT / rel).read_text(encoding="utf-8"))]
    named = [line.split("`")[1] for body in blocks for line in body.splitlines() if line.startswith("| `")]
    assert sorted(named) == gen.codemap.modules()  # each once: no module left out, none twice


def test_a_topic_table_names_its_modules_and_a_missing_one_is_reported(gen: ModuleType, tmp_path: Path) -> None:
    """docs/spend.md's table lists the modules it names, each with its summary; a name that is no module fails."""
    spend = (tmp_path / "docs" / "spend.md").read_text(encoding="utf-8")
    assert "| `service/captain/spend/budget.py` | Day budgets, pure:" in spend
    (tmp_path / "docs" / "spend.md").write_text(spend.replace("<!-- modules-named: ", "<!-- modules-named: service/gone.py ", 1),
                                               encoding="utf-8")
    assert "docs/spend.md names service/gone.py, which is not a module" in gen.coverage()
    assert gen.main(["--check"]) == 1


def test_the_tables_check_finds_a_missing_package_a_second_table_and_an_empty_docstring(gen: ModuleType,
                                                                                          tmp_path: Path) -> None:
    """A package no block names, one two blocks name, and a module with code but no docstring are each reported,
    and --check fails on them; an empty package marker needs no docstring."""
    src = _tree(tmp_path / "src", {
        "bridge/__init__.py": "",
        "bridge/a.py": '"""A: the first module. More words."""\n',
        "bridge/b.py": "x = 1\n",
        "hosts/tool/c.py": '"""C."""\n',
    })
    docs = tmp_path / "docs"
    for page in docs.glob("*.md"):
        page.unlink()
    (docs / "one.md").write_text("# One\n\n<!-- modules: bridge -->\n<!-- /modules -->\n", encoding="utf-8")
    (docs / "two.md").write_text("Prose.\n<!-- modules: bridge -->\nold\n<!-- /modules -->\nMore prose.\n", encoding="utf-8")
    setattr(gen, "SRC", src)  # noqa: B010
    setattr(gen, "TARGETS", {})  # noqa: B010
    problems = gen.coverage()
    assert "package bridge/ has a table in docs/one.md, docs/two.md: one table each" in problems
    assert "package hosts/tool/ has no module table: add <!-- modules: hosts/tool --> ... <!-- /modules --> to a doc" in problems
    assert "bridge/b.py has no docstring: its first paragraph is its row" in problems
    assert not any(p.startswith("bridge/__init__.py") for p in problems)
    assert gen.main(["--check"]) == 1
    gen.main([])
    assert (docs / "two.md").read_text(encoding="utf-8") == (
        "Prose.\n<!-- modules: bridge -->\n"
        "| module | what it is (its docstring's first paragraph) |\n|---|---|\n"
        "| `bridge/__init__.py` | *(empty: a package marker)* |\n"
        "| `bridge/a.py` | A: the first module. More words. |\n"
        "| `bridge/b.py` | **no docstring** |\n"
        "<!-- /modules -->\nMore prose.\n"
    )


def test_a_summary_is_the_first_paragraph_as_markdown(tmp_path: Path) -> None:
    """reST roles and double backquotes become code; the paragraph is joined onto one line."""
    codemap = _load("codemap_summary", ROOT / "scripts" / "codemap.py")
    src = _tree(tmp_path, {"clankie/m.py": '"""The :class:`Clock` and\n``now``, wrapped.\n\nSecond paragraph."""\n'})
    assert codemap.summary("clankie/m.py", src) == "The `Clock` and `now`, wrapped."


@pytest.mark.parametrize(("doc", "pure"), [
    ("Splitting a reply (pure).", True),
    ("Sans-IO frame codec.", True),
    ("The lane state machine.\n\nPure and h11-like: it takes now.", True),
    ("The allow-rule.\n\nA DM is in no guild. Pure: no I/O, no clock.", True),
    ("Which files to delete, and deleting them.\n\n:func:`choose` is the pure rule; :func:`prune` the shell.", False),
    ("Injected time.\n\nA pure core takes ``now``; a shell takes a clock.", False),
    ("", False),
])
def test_a_module_says_it_is_pure_in_its_summary_or_a_sentence_opening_pure(tmp_path: Path, doc: str, pure: bool) -> None:
    """The convention tests/test_import_rules.py holds the pure cores to (docs/architecture.md, "Module docstrings")."""
    codemap = _load("codemap_pure", ROOT / "scripts" / "codemap.py")
    src = _tree(tmp_path, {"clankie/m.py": f'"""{doc}"""\n' if doc else "x = 1\n"})
    assert codemap.says_pure("clankie/m.py", src) is pure


def test_feeding_sites_count_calls_on_a_holder_of_the_machine_and_nothing_else(tmp_path: Path) -> None:
    """A call of an entry on something that holds the machine counts (bound here, or a field another module
    declares), and so does the entry handed on as a callback; the same method name on something else does not,
    nor does the machine's own module."""
    codemap = _load("codemap_sites", ROOT / "scripts" / "codemap.py")
    src = _tree(tmp_path, {
        "supervisor/machine.py": '"""A pure state machine."""\nclass M:\n    def feed(self) -> None:\n        self.feed()\n',
        "supervisor/record.py": "from supervisor.machine import M\nclass Rec:\n    machine: M\n",
        "supervisor/shell.py": (
            "from supervisor.machine import M\n"
            "class Shell:\n"
            "    def __init__(self) -> None:\n        self.m = M()\n        self.other = Other()\n"
            "    def go(self, rec) -> None:\n        self.m.feed()\n        rec.machine.feed()\n        self.other.feed()\n"
            "    def later(self) -> object:\n        return self.m.feed\n"
        ),
    })
    machine = codemap.Machine("supervisor/machine.py", "the machine", ("feed",), "M")
    sites = codemap.feeding_sites(machine, src)
    assert [(s.module, s.caller, s.line) for s in sites] == [
        ("supervisor/shell.py", "Shell.go", 7), ("supervisor/shell.py", "Shell.go", 8), ("supervisor/shell.py", "Shell.later", 11),
    ]
    assert codemap.undeclared_machines(src) == sorted(["supervisor/machine.py", *(m.module for m in codemap.MACHINES)])


def test_todays_machines_are_fed_where_the_shape_section_says() -> None:
    """The lane and the child lifecycle have one feeding site each (issue 28); the figures the shape block shows."""
    codemap = _load("codemap_today", ROOT / "scripts" / "codemap.py")
    sites = {m.name: [(s.module, s.caller) for s in codemap.feeding_sites(m)] for m in codemap.MACHINES}
    assert sites["the lane"] == [("service/captain/lanes/shell.py", "LaneShell.feed")]
    assert sites["a child's lifecycle"] == [("supervisor/process.py", "Child._feed")]
    assert sites["the tree"] == [("supervisor/tree.py", "Tree._move")]
    assert sites["a shard's gateway link"] == [("bridge/gateway_session.py", "SessionKeeper._move")]


def test_a_call_of_a_function_declared_to_return_the_machine_holds_one(tmp_path: Path) -> None:
    """``self.link(shard).move(...)`` feeds the link when ``link`` is declared ``-> Link`` (the gateway keeper's one
    site); a function returning something else does not make its result a holder."""
    codemap = _load("codemap_makers", ROOT / "scripts" / "codemap.py")
    src = _tree(tmp_path, {
        "bridge/machine.py": '"""A pure state machine."""\nclass M:\n    def move(self) -> None:\n        pass\n',
        "bridge/shell.py": (
            "from bridge.machine import M\n"
            "class Keeper:\n"
            "    def link(self) -> M:\n        return M()\n"
            "    def other(self) -> object:\n        return object()\n"
            "    def _move(self) -> None:\n        self.link().move()\n        self.other().move()\n"
        ),
    })
    machine = codemap.Machine("bridge/machine.py", "the machine", ("move",), "M")
    assert [(s.module, s.caller, s.line) for s in codemap.feeding_sites(machine, src)] == [("bridge/shell.py", "Keeper._move", 8)]


def test_the_measured_block_is_replaced_alone_and_names_its_revisions() -> None:
    """scripts/shape --write rewrites only the measured block; a machine missing at a revision shows as "—"."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import shape_report  # type: ignore[import-not-found]  # scripts/ is not a package
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    sites = {m.name: (None if m.name == "the tree" else 1) for m in shape_report.codemap.MACHINES}
    column = shape_report.Measure(rev="HEAD", label="now", sites=sites, modules=3, median=2.0, p90=3, largest=(3, "x.py"),
                                  over=0, turn={"files": 1, "cross_file_calls": 2, "steps": 3, "returns": 4, "reentries": 0})
    block = shape_report.measured_block([column])
    assert block.splitlines()[0] == f"| | now (`{head.stdout.strip()}`) |"
    assert "| feeding sites: the tree | — |" in block and "| steps into a file entered before | 4 |" in block
    text = "a\n<!-- shape: static -->\nkept\n<!-- /shape -->\n<!-- shape: measured -->\nold\n<!-- /shape -->\nb\n"
    assert shape_report.replace_block(text, "measured", "new\n") == text.replace("old", "new")
    with pytest.raises(LookupError):
        shape_report.replace_block("no block\n", "measured", "new\n")


def test_every_source_path_a_doc_names_exists() -> None:
    """A page that names `service/captain/lanes/live.py` after it is gone has drifted (benchmarks.md is history, and
    keeps the names of its day)."""
    import re

    pattern = re.compile(r"\b(?:clankie|supervisor|service|bridge|hosts|scripts|tests)/[\w/-]+\.py\b")
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "benchmarks.md"] + [ROOT / "README.md"]
    missing = sorted({f"{page.name}: {path}" for page in pages for path in pattern.findall(page.read_text(encoding="utf-8"))
                      if not (ROOT / path).exists()})
    assert missing == []


def test_lane_side_doors_are_state_reads_and_drops_outside_the_machine_and_its_funnel(tmp_path: Path) -> None:
    """A read of ``machine.state`` anywhere but the lane's module, and a kit's or registry's ``drop`` called anywhere
    but ``LaneShell.feed``, is a side door; a question asked of the machine, the drop handed on, or the drop carried
    out in the funnel is not. Today's tree has none (the shape block says 0)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import shape_report  # scripts/ is not a package (the ignore is on the first import)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    src = _tree(tmp_path, {
        "service/captain/lanes/lane.py": "class Lane:\n    def f(self) -> bool:\n        return self.machine.state is None\n",
        "service/captain/lanes/shell.py": (
            "class LaneShell:\n"
            "    def feed(self) -> None:\n        self.kit.drop(self)\n"
            "    def peek(self) -> bool:\n        return self.machine.state is None and self.machine.at_rest\n"
        ),
        "service/captain/lanes/captain.py": (
            "def close(registry, lane, kit) -> object:\n"
            "    registry.drop(lane)\n    x = kit.drop\n    dropped.drop(lane)\n    return lane.machine.live\n"
        ),
    })
    doors = [(d.module, d.line, d.caller, d.what) for d in shape_report.lane_side_doors(src)]
    assert doors == [("service/captain/lanes/captain.py", 2, "close", "drop"), ("service/captain/lanes/shell.py", 5, "LaneShell.peek", "machine.state")]
    assert shape_report.lane_side_doors() == []
    assert shape_report.captain_folders(src) == {"service/captain/lanes": 3}
