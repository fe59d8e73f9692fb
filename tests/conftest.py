"""Shared fixtures: isolated state and runtime dirs, settings, a fake clock."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clankie import observability
from clankie import settings as settings_mod
from clankie.peers import HANDED
from clankie.testing.clock import FakeClock


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (real trees, real browsers) run first, in their usual order: ``scripts/test`` has
    pytest-xdist hand each worker one test at a time (``--maxschedchunk=1``), so they spread over every worker
    instead of ending the run on one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
