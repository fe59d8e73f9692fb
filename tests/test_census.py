"""The suite's CPU census (tests/census.py, scripts/suite-census): each test's CPU counted with what it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import census_procs
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


# By process (tests/census_procs.py, scripts/suite-census --by-process)

@pytest.mark.parametrize(("argv", "kind"), [
    ([".venv/bin/python", "-m", "service"], "service"),
    (["/usr/bin/python3.11", "-u", "-m", "hosts.tldraw.rasterize_worker", "3", "4"], "hosts.tldraw.rasterize_worker"),
    ([".venv/bin/python", ".venv/bin/clankie", "run"], "clankie run"),
    ([".venv/bin/python", ".venv/bin/clankiectl", "--socket", "x", "status"], "bin/clankiectl"),
    ([".venv/bin/python", "/w/tests/supervisor/fixtures/child.py", "--events", "f"], "fixtures/child.py"),
    ([".venv/bin/python", "-u", "-c", census_procs.WORKER_BOOT], "pytest worker"),
    (["python3", "-c", "pass"], "python -c"),
    (["/usr/lib/chromium/chromium-headless-shell", "--type=renderer"], "chromium-headless-shell"),
    (["postgres: postgres t1 [local] idle"], "postgres"),
    (["/usr/lib/chromium/chromium-headless-shell --type=zygote --headless"], "chromium-headless-shell"),
    ([], "?"),
])
def test_a_process_counts_under_the_module_script_or_program_its_command_line_names(argv: list[str], kind: str) -> None:
    assert census_procs.kind_of(argv) == kind


ME, NOBODY = 1000, 65534


def _look(pid: int, start: int, cpu: float, *argv: str, ppid: int = 1, uid: int = ME) -> census_procs.Look:
    return census_procs.Look(pid=pid, start=start, cpu=cpu, argv=argv, ppid=ppid, uid=uid)


def test_each_process_is_counted_once_at_its_last_cpu_and_one_started_before_the_census_not_at_all() -> None:
    """A process is its pid and its start (a reused pid is another); its CPU is the most seen; kinds sum, costliest
    first; the table's last line totals them."""
    census = census_procs.Census(since=100, uid=ME)
    census.add([_look(7, 50, 9.0, "python", "-m", "bridge"), _look(8, 120, 0.5, "python", "-m", "service")])
    census.add([_look(8, 120, 1.5, "python", "-m", "service"), _look(9, 130, 0.25, "python", "-m", "bridge")])
    census.add([_look(8, 140, 0.25, "python", "-m", "service")])  # pid 8 again: a new process
    census.add([_look(11, 150, 0.04, "sleep"), _look(12, 150, 0.02, "true")])  # under 0.1 CPU s a kind: one line
    rows = census.by_kind()
    assert [(kind, n) for kind, n, _ in rows] == [("service", 2), ("bridge", 1), ("sleep", 1), ("true", 1)]
    assert [cpu for _, _, cpu in rows] == pytest.approx([1.75, 0.25, 0.04, 0.02])
    assert census_procs.render(census.by_kind()).splitlines()[-2:] == [
        "     0.1      2          2 other kinds", "census by process: processes=5 cpu_s=2.1"]


def test_another_uids_process_counts_only_below_one_that_counts() -> None:
    """Chromium's renderers run as nobody under the browser host: counted, even when listed before their parent; a
    stranger's process, or one whose parent died before this look, is not."""
    census = census_procs.Census(since=100, uid=ME)
    census.add([
        _look(30, 150, 0.5, "/usr/lib/chromium/chromium-headless-shell", "--type=renderer", ppid=20, uid=NOBODY),
        _look(20, 140, 1.0, "python", "-m", "hosts.browser", ppid=10),
        _look(40, 150, 9.0, "someone-elses-build", uid=NOBODY),
    ])
    census.add([_look(50, 160, 2.0, "/usr/lib/chromium/chromium-headless-shell", ppid=99, uid=NOBODY)])
    assert [(kind, n) for kind, n, _ in census.by_kind()] == [("hosts.browser", 1), ("chromium-headless-shell", 1)]


def test_the_sampler_counts_a_child_it_outlived_at_its_last_cpu(tmp_path: Path) -> None:
    """A real sampler and a burner started after it, alive (waiting on its stdin) when the sampler is stopped: the
    sampler's last look has its 0.3 CPU s. (Other workers' processes may be counted too, so the table is read for a
    floor; what is older than the census is left out by the unit tests above.)"""
    out = tmp_path / "by-process.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sampler = subprocess.Popen([sys.executable, "-m", "tests.census_procs", str(out)], env=env)
    burn = "import sys, time\nwhile time.process_time() < 0.3:\n    pass\nprint('burnt', flush=True)\nsys.stdin.read()\n"
    burner = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert burner.stdout is not None and burner.stdout.readline() == "burnt\n"
        sampler.send_signal(signal.SIGTERM)
        assert sampler.wait(timeout=60) == 0
    finally:
        sampler.kill()
        burner.communicate(timeout=60)
    rows = {line.split(None, 3)[3]: float(line.split()[0]) for line in out.read_text().splitlines()[1:-1]}
    assert rows["python -c"] >= 0.25  # clock ticks: 0.3 s of process time reads as 0.29-0.31


def test_a_look_reads_a_process_once_whole_then_only_its_cpu() -> None:
    """This process, read from /proc: whole when new; its CPU alone when known; nothing when older than the census."""
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    whole = census_procs.read_look(os.getpid(), tick)
    assert whole is not None and "python" in os.path.basename(whole.argv[0])
    assert (whole.ppid, whole.uid) == (os.getppid(), os.getuid()) and whole.cpu > 0
    again = census_procs.read_look(os.getpid(), tick, known={(whole.pid, whole.start)})
    assert again is not None and again.argv == () and again.start == whole.start and again.cpu >= whole.cpu
    assert census_procs.read_look(os.getpid(), tick, since=whole.start + 1) is None
