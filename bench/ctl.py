"""``clankiectl status`` as an operator runs it, against a real running tree: the CLI as it is, next to the same CLI
with the supervisor's runtime loaded first, as it was while ``clankiectl``'s argument parser took one constant from
``supervisor.tree`` (and so imported the whole tree: its children, spares, metrics, ``prometheus_client``,
``pydantic_settings``).

The tree is the real default tree in demo mode (service, bridge local-only, browser host with its Chromium, tldraw
host: ``CLANKIE_DEMO=1``), started once and left running. Each round, interleaved, runs each side once as a new
process, as a shell or a monitoring script does, and takes its wall time and its CPU (user + system of the reaped
process, ``RUSAGE_CHILDREN``). Both sides must exit 0 and print the same children.

Last line: ``bench ctl: now_cpu_ms=… before_cpu_ms=… cpu_ratio=… now_wall_ms=… before_wall_ms=… wall_ratio=…``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.interpreter import children_cpu, demo_tree

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv/bin/python"
NOW = [str(REPO / ".venv/bin/clankiectl"), "status"]
BEFORE = [str(PYTHON), "-c", "import sys, supervisor.tree\nfrom supervisor.ctl import main\nsys.argv[0] = 'clankiectl'\n"
          "sys.exit(main())", "status"]
"""The CLI with what its import of ``supervisor.tree`` loaded, loaded first: the same code path as before the move."""


def once(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """One run of ``argv``: its wall time, its CPU, its output (which must be a status of a running tree)."""
    cpu, start = children_cpu(), time.monotonic()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"bench ctl: {argv[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return wall, children_cpu() - cpu, done.stdout


def children_of(status: str) -> list[str]:
    """The child names of a rendered status, in order (the first word of each line that names one)."""
    names = ("service", "bridge", "browser", "tldraw")
    firsts = (words[0] for words in map(str.split, status.splitlines()) if words)
    return [word for word in firsts if word in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    opts = parser.parse_args()
    sides: dict[str, list[tuple[float, float]]] = {"now": [], "before": []}
    shown: dict[str, list[str]] = {}
    with demo_tree(PYTHON) as (_, run):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(run.state),
               "CLANKIE_STATE": str(run.state), "CLANKIE_RUNTIME_DIR": str(run.runtime)}
        for argv in (NOW, BEFORE):  # one untimed run each: the page cache and the bytecode caches warm on both
            once(argv, env)
        for n in range(opts.rounds):
            for name, argv in (("now", NOW), ("before", BEFORE)) if n % 2 == 0 else (("before", BEFORE),
                                                                                   ("now", NOW)):
                wall, cpu, out = once(argv, env)
                sides[name].append((wall, cpu))
                shown[name] = children_of(out)
    if shown["now"] != shown["before"] or len(shown["now"]) != 4:
        raise SystemExit(f"bench ctl: the two sides showed different children: {shown}")
    med = {name: (statistics.median(w for w, _ in xs) * 1000, statistics.median(c for _, c in xs) * 1000)
           for name, xs in sides.items()}
    print(f"{opts.rounds} rounds, medians: now {med['now'][1]:.0f} ms CPU, {med['now'][0]:.0f} ms wall; "
          f"before {med['before'][1]:.0f} ms CPU, {med['before'][0]:.0f} ms wall")
    print("bench ctl: " + " ".join([
        f"now_cpu_ms={med['now'][1]:.0f}", f"before_cpu_ms={med['before'][1]:.0f}",
        f"cpu_ratio={med['now'][1] / med['before'][1]:.2f}",
        f"now_wall_ms={med['now'][0]:.0f}", f"before_wall_ms={med['before'][0]:.0f}",
        f"wall_ratio={med['now'][0] / med['before'][0]:.2f}",
    ]))


if __name__ == "__main__":
    main()
