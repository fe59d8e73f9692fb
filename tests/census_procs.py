"""Where a run's CPU goes by process: a sampler of ``/proc`` for ``scripts/suite-census --by-process``.

The per-test census (tests/census.py) charges each test the CPU of what it reaped; it cannot say which kind of process
spent it, and it loses what a test leaves to init (a daemon that double-forks away, the children of a SIGKILLed
supervisor). This sampler looks at every process that started after it did, every ``interval`` seconds, and counts
those of this uid and their descendants of any uid (Chromium's sandboxed renderers run as ``nobody``); it keeps each
one's last ``utime + stime``, and sums them by kind (the module or program a command line names) when it
is stopped. A process's CPU after its last look and a process that lived less than one interval are not seen, so the
figures are floors (docs/benchmarks.md, "The sixteenth session").

``python -m tests.census_procs OUT`` samples until SIGTERM or SIGINT, then writes the table to OUT.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.procstat import stat_fields

WORKER_BOOT = "import sys;exec(eval(sys.stdin.readline()))"
"""The ``-c`` program execnet starts each xdist worker with."""


def kind_of(argv: Sequence[str]) -> str:
    """The kind a command line counts under: the module of ``python -m``, the script of ``python path`` (its entry point's
    name and first argument for the project's own, ``clankie run``), an xdist worker, or the program's own name."""
    if not argv:
        return "?"
    words = argv[0].split()  # Chromium's and PostgreSQL's children retitle themselves: one string, spaces in it
    program = os.path.basename(words[0]).rstrip(":") if words else ""
    if not program.startswith("python"):
        return program or "?"
    args = [a for a in argv[1:] if a not in ("-u", "-B", "-E", "-s", "-I")]
    if len(args) >= 2 and args[0] == "-m":
        return args[1]
    if len(args) >= 2 and args[0] == "-c":
        return "pytest worker" if args[1] == WORKER_BOOT else "python -c"
    if not args:
        return "python"
    script = Path(args[0])
    if script.parent.name == "bin" and len(args) >= 2 and not args[1].startswith("-"):
        return f"{script.name} {args[1]}"
    return "/".join(script.parts[-2:])


@dataclass(frozen=True)
class Look:
    """One process at one look: its start (clock ticks after boot, with its pid the process's identity), its CPU
    seconds so far, its command line, its parent and its uid."""

    pid: int
    start: int
    cpu: float
    argv: tuple[str, ...]
    ppid: int = 0
    uid: int = 0


def read_look(pid: int, tick: float, since: int = 0, known: Container[tuple[int, int]] = ()) -> Look | None:
    """``/proc/<pid>`` as a :class:`Look`, or None when the process is gone, a kernel thread or older than ``since``.
    A process ``known`` by its (pid, start) is read for its CPU alone: its command line and uid are not read again."""
    base = f"/proc/{pid}"
    try:
        fields = stat_fields(pid)
        start, cpu = int(fields[19]), (int(fields[11]) + int(fields[12])) * tick  # starttime; utime + stime
        if start < since:
            return None
        if (pid, start) in known:
            return Look(pid=pid, start=start, cpu=cpu, argv=())
        uid = os.stat(base).st_uid
        with open(f"{base}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return None
    if not cmdline:
        return None  # a kernel thread, or a zombie with nothing left to say
    argv = tuple(a.decode(errors="replace") for a in cmdline.rstrip(b"\0").split(b"\0"))
    return Look(pid=pid, start=start, cpu=cpu, argv=argv, ppid=int(fields[1]), uid=uid)


@dataclass
class Seen:
    kind: str
    cpu: float


class Census:
    """Every process seen, by identity: those of ``uid`` and their descendants; what started before ``since`` (clock
    ticks after boot) is left out."""

    def __init__(self, since: int, uid: int) -> None:
        self.since = since
        self.uid = uid
        self.seen: dict[tuple[int, int], Seen] = {}

    def add(self, looks: Iterable[Look]) -> None:
        """One look at the machine: a new process counts if it is ``uid``'s or its parent counts (at this look)."""
        counted: set[int] = set()  # the pids this look shows of processes already counted
        pending: list[Look] = []
        for look in looks:
            if look.start < self.since:
                continue
            known = self.seen.get((look.pid, look.start))
            if known is None:
                pending.append(look)
            else:
                known.cpu = max(known.cpu, look.cpu)
                counted.add(look.pid)
        while pending:  # to a fixed point: a parent may be listed after its child
            admitted = [look for look in pending if look.uid == self.uid or look.ppid in counted]
            if not admitted:
                break
            for look in admitted:
                self.seen[(look.pid, look.start)] = Seen(kind_of(look.argv), look.cpu)
            pending = [look for look in pending if (look.pid, look.start) not in self.seen]
            counted.update(look.pid for look in admitted)

    def by_kind(self) -> list[tuple[str, int, float]]:
        """(kind, processes, CPU s), costliest first."""
        cpu: defaultdict[str, float] = defaultdict(float)
        count: Counter[str] = Counter()
        for seen in self.seen.values():
            cpu[seen.kind] += seen.cpu
            count[seen.kind] += 1
        return [(kind, count[kind], cpu[kind]) for kind in sorted(cpu, key=cpu.__getitem__, reverse=True)]


SMALL = 0.1
"""CPU seconds under which a kind's whole share is shown only in the table's "other kinds" line."""


def render(rows: Sequence[tuple[str, int, float]]) -> str:
    """The table the script prints, every kind of at least :data:`SMALL` CPU s on its own line; its last line is
    ``census by process: processes=... cpu_s=...``."""
    shown = [row for row in rows if row[2] >= SMALL]
    rest = [row for row in rows if row[2] < SMALL]
    lines = [f"{'CPU s':>8} {'procs':>6}  {'each':>6}  kind"]
    lines += [f"{cpu:8.1f} {n:6d}  {cpu / n:6.2f}  {kind}" for kind, n, cpu in shown]
    if rest:
        lines.append(f"{sum(r[2] for r in rest):8.1f} {sum(r[1] for r in rest):6d}  {'':>6}  {len(rest)} other kinds")
    lines.append(f"census by process: processes={sum(r[1] for r in rows)} cpu_s={sum(r[2] for r in rows):.1f}")
    return "\n".join(lines)


def own_start() -> int:
    """This process's start, in the clock ticks after boot that ``/proc/<pid>/stat`` counts in."""
    return int(stat_fields("self")[19])


def sample(census: Census, stop: Callable[[], bool], interval: float = 0.1) -> None:
    """Look at every process every ``interval`` seconds until ``stop()``, then once more."""
    tick, me = 1.0 / os.sysconf("SC_CLK_TCK"), os.getpid()
    while True:
        last = stop()
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me]
        census.add([look for pid in pids if (look := read_look(pid, tick, census.since, census.seen)) is not None])
        if last:
            return
        time.sleep(interval)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.census_procs OUT", file=sys.stderr)
        return 64
    stopped: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stopped.append(signum))
    census = Census(own_start(), os.getuid())
    sample(census, lambda: bool(stopped))
    Path(argv[0]).write_text(render(census.by_kind()) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
