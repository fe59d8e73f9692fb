"""Shared fixtures: isolated state and runtime dirs, settings, a fake clock."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clankie import heap, observability
from clankie import settings as settings_mod
from clankie.peers import HANDED
from clankie.testing.clock import FakeClock

LONG_UNMARKED = (
    "tests/test_gen_docs.py",
    "tests/service/test_warm.py",
    "tests/test_import_rules.py",
    "tests/bridge/test_waiting_memory.py",
    "tests/bridge/test_dedupe.py::test_a_remembered_id_costs_bytes_not_objects",
    "tests/bridge/test_gateway_resume.py::test_a_crash_loop_backs_identifies_off_and_warns_when_starts_run_low",
    "tests/hosts/tldraw/test_tldr_node.py::test_every_generated_document_validates",
    "tests/test_observability_doc.py",
    "tests/service/agent/test_session_files.py::test_lane_memory_stays_flat_over_many_turns",
    "tests/bridge/test_shards_e2e.py",
    "tests/supervisor/test_lifecycle.py::test_every_move_the_core_makes_is_a_row_of_the_table",
    "tests/bridge/test_e2e_bounds.py",
    "tests/hosts/tldraw/test_render.py::test_async_render_keeps_the_event_loop_live",
)
"""Tests (files, or one test each) not marked ``slow`` that take 10-60 s on a cold, busy machine (docs/benchmarks.md,
the suite's slowest): they start right after the slow ones. Collected in their usual place, the top-level files
(``tests/test_gen_docs.py``: 60, 41, 20 and 17 s) came last, and one worker ran them alone at the end of the run."""


def pytest_configure(config: pytest.Config) -> None:
    """A process that collects (an xdist worker, or a run without workers) holds the collector off while it imports
    every test module and settles once they are collected (:mod:`clankie.heap`, as every child does over its start):
    each worker's collection, and every full collection in its tests after, skips what the imports built."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # the xdist controller collects nothing
    heap.hold()


def pytest_collection_finish(session: pytest.Session) -> None:
    heap.settle()


def schedule(item: pytest.Item) -> int:
    """0: marked ``slow``; 1: one of :data:`LONG_UNMARKED`; 2: the rest."""
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 if any(item.nodeid == long or item.nodeid.startswith((f"{long}::", f"{long}[")) for long in LONG_UNMARKED) else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (real trees, real browsers) run first, then the long ones without a mark
    (:data:`LONG_UNMARKED`), each group in its usual order: ``scripts/test`` has pytest-xdist hand each worker one test
    at a time (``--maxschedchunk=1``), so they spread over every worker and the run ends on short tests on all of them
    instead of a long one on one."""
    items.sort(key=schedule)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A short runtime dir (socket paths must fit in 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as d:
        path = Path(d)
        path.chmod(0o700)
        yield path


@pytest.fixture
def env(state_dir: Path, runtime_dir: Path) -> dict[str, str]:
    """A minimal environment for a process under test: nothing leaks in from the developer's."""
    return {"CLANKIE_STATE": str(state_dir), "CLANKIE_RUNTIME_DIR": str(runtime_dir), "HOME": str(state_dir)}


@pytest.fixture
def settings(env: dict[str, str]) -> settings_mod.Settings:
    return settings_mod.load(env)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _forget_handed_peers() -> Iterator[None]:
    """A test that links to a fake supervisor in this process leaves the next test the uid rule alone again."""
    yield
    HANDED.pids = None


@pytest.fixture(autouse=True)
def _reset_observability() -> Iterator[None]:
    """What a test switched on (the meter, a tracer, the records' rotations) is off again for the next one."""
    yield
    observability.reset()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
