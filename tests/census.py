"""Where the suite's CPU goes: a pytest plugin that counts each test's CPU, and the summary of a run.

``scripts/suite-census`` runs the suite with ``-p tests.census`` and ``CLANKIE_CENSUS_DIR`` set. Around each test the
plugin reads the worker's ``getrusage``: its own CPU and its reaped children's. A tree's supervisor is the worker's
child and reaps its own children (it is their subreaper), so a tree test's count holds the whole tree it started. What
a test leaves unreaped is counted where it is reaped; a daemon that double-forks away (PostgreSQL's postmaster), or a
child orphaned by a SIGKILLed supervisor (init reaps it), is not counted at all: the count is a worker's, not a
process's (docs/benchmarks.md, "The twelfth session").

Without ``CLANKIE_CENSUS_DIR`` the plugin does nothing.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter, defaultdict
from collections.abc import Generator, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import pytest

CENSUS_DIR_ENV = "CLANKIE_CENSUS_DIR"


@dataclass(frozen=True)
class Cost:
    """One test's line: its node id, the worker that ran it, its wall and CPU seconds (the worker's and its reaped
    children's)."""

    nodeid: str
    worker: int
    wall: float
    own_cpu: float
    children_cpu: float

    @property
    def cpu(self) -> float:
        return self.own_cpu + self.children_cpu

    @property
    def group(self) -> str:
        """Where the test lives: ``tests/<dir>`` for a directory's tests, the file for one at the top of tests/."""
        parts = self.nodeid.split("::", 1)[0].split("/")
        return "/".join(parts[:2]) if len(parts) > 2 else parts[-1]


@dataclass(frozen=True)
class Summary:
    """A run's costs: totals, each group's (tests, CPU s), the costliest tests and the CPU of the cheap majority."""

    tests: int
    cpu: float
    own_cpu: float
    groups: tuple[tuple[str, int, float], ...]  # by CPU, costliest first
    costliest: tuple[Cost, ...]
    cheap_tests: int  # tests under CHEAP CPU s each
    cheap_cpu: float


CHEAP = 0.1
"""CPU seconds under which a test counts as cheap."""


def summarize(costs: Iterable[Cost], top: int = 20) -> Summary:
    """Sum a run's lines by group, and pick its ``top`` costliest tests."""
    rows = list(costs)
    cpu: defaultdict[str, float] = defaultdict(float)
    count: Counter[str] = Counter()
    for row in rows:
        cpu[row.group] += row.cpu
        count[row.group] += 1
    cheap = [row for row in rows if row.cpu < CHEAP]
    return Summary(
        tests=len(rows),
        cpu=sum(row.cpu for row in rows),
        own_cpu=sum(row.own_cpu for row in rows),
        groups=tuple((group, count[group], cpu[group]) for group in sorted(cpu, key=cpu.__getitem__, reverse=True)),
        costliest=tuple(sorted(rows, key=lambda row: row.cpu, reverse=True)[:top]),
        cheap_tests=len(cheap),
        cheap_cpu=sum(row.cpu for row in cheap),
    )


def read_dir(directory: Path) -> list[Cost]:
    """Every line the workers of one run wrote under ``directory``."""
    return [Cost(**json.loads(line)) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines() if line]


def render(summary: Summary) -> str:
    """The summary as the script prints it; its last line is ``census: key=value ...``."""
    lines = [f"{'CPU s':>8} {'tests':>6}  group"]
    lines += [f"{spent:8.1f} {n:6d}  {group}" for group, n, spent in summary.groups]
    lines += ["", f"{'CPU s':>8} {'wall s':>7}  costliest tests"]
    lines += [f"{row.cpu:8.1f} {row.wall:7.1f}  {row.nodeid}" for row in summary.costliest]
    lines += ["", f"{summary.cheap_tests} tests under {CHEAP} CPU s each: {summary.cheap_cpu:.1f} CPU s between them",
              f"census: tests={summary.tests} cpu_s={summary.cpu:.1f} workers_own_cpu_s={summary.own_cpu:.1f} "
              f"cheap_tests={summary.cheap_tests} cheap_cpu_s={summary.cheap_cpu:.1f}"]
    return "\n".join(lines)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class _Recorder:
    """Writes one line a test to this worker's own file under the census directory."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / f"{os.getpid()}.jsonl"
        self._out: IO[str] | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        own, children, started = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
        yield
        cost = Cost(nodeid=item.nodeid, worker=os.getpid(), wall=time.monotonic() - started,
                    own_cpu=_cpu(resource.RUSAGE_SELF) - own, children_cpu=_cpu(resource.RUSAGE_CHILDREN) - children)
        if self._out is None:
            self._out = self._path.open("a", encoding="utf-8")
        self._out.write(json.dumps(asdict(cost)) + "\n")
        self._out.flush()

    def pytest_unconfigure(self) -> None:
        if self._out is not None:
            self._out.close()


def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get(CENSUS_DIR_ENV)
    if directory:
        config.pluginmanager.register(_Recorder(Path(directory)), "clankie-census-recorder")
