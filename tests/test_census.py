"""The suite's CPU census (tests/census.py, scripts/suite-census): each test's CPU counted with what it started."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.census import CENSUS_DIR_ENV, Cost, read_dir, render, summarize

REPO = Path(__file__).resolve().parents[1]


def _cost(nodeid: str, own: float, children: float = 0.0) -> Cost:
    return Cost(nodeid=nodeid, worker=1, wall=1.0, own_cpu=own, children_cpu=children)


def test_a_run_is_summed_by_directory_and_the_costliest_come_first() -> None:
    """A test under tests/<dir>/ counts for that directory, one at the top of tests/ for its file; the costliest are
    sorted by all their CPU, their children's included; the cheap ones are counted apart."""
    summary = summarize([
        _cost("tests/integration/test_a.py::test_tree", 0.5, 4.0),
        _cost("tests/integration/deep/test_b.py::test_other", 1.0),
        _cost("tests/test_gen_docs.py::test_docs", 2.0),
        _cost("tests/clankie/test_c.py::test_pure[1]", 0.01),
        _cost("tests/clankie/test_c.py::test_pure[2]", 0.03),
    ], top=2)
    assert summary.tests == 5
    assert summary.cpu == pytest.approx(7.54)
    assert summary.own_cpu == pytest.approx(3.54)
    assert [(group, n) for group, n, _ in summary.groups] == [("tests/integration", 2), ("test_gen_docs.py", 1), ("tests/clankie", 2)]
    assert [spent for _, _, spent in summary.groups] == pytest.approx([5.5, 2.0, 0.04])
    assert [c.nodeid for c in summary.costliest] == ["tests/integration/test_a.py::test_tree", "tests/test_gen_docs.py::test_docs"]
    assert summary.cheap_tests == 2 and summary.cheap_cpu == pytest.approx(0.04)
    assert render(summary).splitlines()[-1] == ("census: tests=5 cpu_s=7.5 workers_own_cpu_s=3.5 cheap_tests=2 "
                                                "cheap_cpu_s=0.0")


def test_a_tests_children_are_counted_with_it_and_a_test_that_starts_none_has_none(tmp_path: Path) -> None:
    """A real pytest run with the plugin: the test whose child burns 0.3 CPU s (by the child's own clock) is charged
    at least that much of children's CPU; the test that starts nothing is charged none."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(textwrap.dedent("""
        import subprocess, sys

        BURN = "import time\\nwhile time.process_time() < 0.3:\\n    pass\\n"

        def test_burner():
            subprocess.run([sys.executable, "-c", BURN], check=True)

        def test_idle():
            assert True
    """), encoding="utf-8")
    out = tmp_path / "census"
    out.mkdir()
    env = {**os.environ, CENSUS_DIR_ENV: str(out), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.census", "-p", "no:cacheprovider",
                           str(sample)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    costs = {c.nodeid.split("::")[-1]: c for c in read_dir(out)}
    assert set(costs) == {"test_burner", "test_idle"}
    assert costs["test_burner"].children_cpu >= 0.3
    assert costs["test_idle"].children_cpu == 0.0
