"""The whole tree on Debian's interpreter next to the same tree on another build of the same Python.

``scripts/bootstrap`` makes the venv from Debian's ``/usr/bin/python3`` (built with PGO and LTO, linked statically)
even where another ``python3`` comes first on PATH (``scripts/venv-python``). This measures what that choice is worth
where an operator and the suite feel it: the CPU and wall time of a real tree's life.

Each round, interleaved, on each interpreter: the supervisor on the real default tree in demo mode (service, bridge
local-only, browser host with its Chromium, tldraw host: ``CLANKIE_DEMO=1``), until ``clankiectl status`` says every
child runs; one ``say lobby hi`` turn; then SIGTERM and the supervisor's exit. CPU is the whole tree's and only
the tree's (user + system, ``RUSAGE_CHILDREN``: the supervisor is the subreaper of its children and waits for them
before it exits): the status polls and the turn are asked over the control socket from this process
(``tests/supervisor/harness.py``'s :class:`Running`), so no client interpreter is counted, and a slower side's extra
polls cost it nothing.

The other interpreter is ``--other`` (default: the first ``python3`` on PATH that is not Debian's). Its venv is made
once under /tmp from the same hash-pinned ``requirements.lock`` by the venv's own ``uv``; the project itself comes
from the checkout (``PYTHONPATH``), as in the tests.

Last line: ``bench interpreter: debian_cpu_s=… other_cpu_s=… cpu_ratio=… debian_ready_s=… other_ready_s=… …``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.errors import ClankieError
from clankie.protocol import SayRequest, TurnResult
from tests.supervisor.harness import Running

REPO = Path(__file__).resolve().parents[1]
DEBIAN = Path("/usr/bin/python3")
OTHER_VENV = Path("/tmp/clankie-bench-interpreter")


@dataclass(frozen=True)
class Life:
    """One tree's life on one interpreter: its CPU, and its wall time to every child running and to the answer."""

    cpu_s: float
    ready_s: float
    answered_s: float


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def other_python(named: str | None) -> Path:
    """The interpreter to compare with: ``named``, else the first python3 on PATH that is not Debian's."""
    if named is not None:
        found = shutil.which(named)
        if found is None:
            raise SystemExit(f"bench interpreter: no interpreter {named!r}")
        return Path(found)
    debian = DEBIAN.resolve()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(entry) / "python3"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            real = subprocess.run([str(candidate), "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            if Path(real) != debian:
                return Path(real)
    raise SystemExit("bench interpreter: no python3 on PATH other than Debian's; name one with --other")


def venv_for(python: Path) -> Path:
    """A venv of ``python`` with the lock's distributions (made once, kept under /tmp for the next run)."""
    venv = OTHER_VENV / python.resolve().as_posix().strip("/").replace("/", "_")
    exe = venv / "bin" / "python"
    if not exe.exists():
        print(f"making a venv of {python} at {venv}", flush=True)
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
        subprocess.run([str(REPO / ".venv/bin/uv"), "pip", "install", "-q", "--python", str(exe), "--require-hashes",
                        "--compile-bytecode", "-r", str(REPO / "requirements.lock")], check=True)
    return exe


def all_running(run: Running) -> bool:
    if not run.sock.exists():
        return False
    try:
        children = run.status().children
    except (OSError, ClankieError):  # bound, not yet listening, or not yet answering
        return False
    return bool(children) and all(child.state == "running" for child in children)


@contextlib.contextmanager
def demo_tree(python: Path, timeout: float = 120.0) -> Iterator[tuple[subprocess.Popen[bytes], Running]]:
    """The real default tree in demo mode, on ``python``, in a temp state and runtime of its own; yielded once every
    child runs (asked over the control socket from this process), SIGTERMed and waited for on the way out."""
    with tempfile.TemporaryDirectory(prefix="ck-bench-") as tmp:
        state, runtime = Path(tmp) / "state", Path(tmp) / "run"
        state.mkdir(mode=0o700)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state), "PYTHONPATH": str(REPO),
            "CLANKIE_STATE": str(state), "CLANKIE_RUNTIME_DIR": str(runtime), "CLANKIE_DEMO": "1",
        }
        start = time.monotonic()
        with open(Path(tmp) / "supervisor.log", "wb") as log:
            proc = subprocess.Popen([str(python), "-m", "supervisor", "run"], cwd=REPO, env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        run = Running(proc, runtime, state, Path(tmp) / "supervisor.log")
        try:
            while not all_running(run):
                if proc.poll() is not None:
                    raise SystemExit(f"bench: the tree on {python} exited {proc.returncode}")
                if time.monotonic() - start > timeout:
                    raise SystemExit(f"bench: the tree on {python} was not running after {timeout:g} s")
                time.sleep(0.05)
            yield proc, run
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def life(python: Path) -> Life:
    """One tree, from its start to its exit after one answered turn, on ``python``."""
    before = children_cpu()
    start = time.monotonic()
    with demo_tree(python) as (_, run):
        ready = time.monotonic() - start
        said = run.call("say", SayRequest(room="lobby", text="hi"), timeout=60)
        if not isinstance(said, TurnResult) or said.outcome != "settled":
            raise SystemExit(f"bench interpreter: the turn on {python} did not settle: {said!r}")
        answered = time.monotonic() - start
    return Life(children_cpu() - before, ready, answered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--other", help="the interpreter to compare with (default: PATH's first non-Debian python3)")
    opts = parser.parse_args()
    if not DEBIAN.exists():
        raise SystemExit("bench interpreter: no /usr/bin/python3 (not Debian?)")
    debian = REPO / ".venv/bin/python"
    if debian.resolve() != DEBIAN.resolve():
        raise SystemExit(f"bench interpreter: .venv is made from {debian.resolve()}, not Debian's (scripts/bootstrap)")
    other = venv_for(other_python(opts.other))
    sides: dict[str, list[Life]] = {"debian": [], "other": []}
    for python in (debian, other):  # one untimed life each: the page cache and the bytecode caches warm on both sides
        life(python)
    for n in range(opts.rounds):
        for name, python in (("debian", debian), ("other", other)) if n % 2 == 0 else (("other", other),
                                                                                       ("debian", debian)):
            sides[name].append(life(python))
        print(f"round {n + 1}: " + "  ".join(
            f"{name} {ls[-1].cpu_s:.2f} CPU s, ready {ls[-1].ready_s:.2f} s, answered {ls[-1].answered_s:.2f} s"
            for name, ls in sides.items()), flush=True)
    med = {name: {field: statistics.median(getattr(x, field) for x in ls) for field in ("cpu_s", "ready_s", "answered_s")}
           for name, ls in sides.items()}
    print(f"other interpreter: {other.resolve()}  ({opts.rounds} rounds, medians)")
    for field in ("cpu_s", "ready_s", "answered_s"):
        print(f"  {field:11s} debian {med['debian'][field]:6.2f}  other {med['other'][field]:6.2f}  "
              f"debian/other {med['debian'][field] / med['other'][field]:.2f}")
    print("bench interpreter: " + " ".join([
        f"debian_cpu_s={med['debian']['cpu_s']:.2f}", f"other_cpu_s={med['other']['cpu_s']:.2f}",
        f"cpu_ratio={med['debian']['cpu_s'] / med['other']['cpu_s']:.2f}",
        f"debian_ready_s={med['debian']['ready_s']:.2f}", f"other_ready_s={med['other']['ready_s']:.2f}",
        f"ready_ratio={med['debian']['ready_s'] / med['other']['ready_s']:.2f}",
        f"debian_answered_s={med['debian']['answered_s']:.2f}", f"other_answered_s={med['other']['answered_s']:.2f}",
    ]))


if __name__ == "__main__":
    main()
