"""What the tree tells systemd (``STATUS=``) and ``clankiectl status`` about itself in one line.

Read-only views of the children: how many run, which do not and why, and
whether the state filesystem or a child's log is failing.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clankie.paths import LOW_SPACE, free_bytes
from supervisor.lifecycle import State
from supervisor.process import Child


def disk_problem(children: Iterable[Child], state_dir: Path) -> str:
    """One line when the state filesystem is full or a child's log cannot be written, else ""."""
    kids = list(children)
    failing = [c.name for c in kids if c.log.problem]
    why = next((c.log.problem for c in kids if c.log.problem), "")
    free = free_bytes(state_dir)
    parts = []
    if free is not None and free < LOW_SPACE:
        parts.append(f"state filesystem full ({free} bytes free)")
    if failing:
        parts.append(f"logs not written ({why}): {', '.join(failing)}")
    return "; ".join(parts)


def status_line(children: Iterable[Child], now: float, disk: str) -> str:
    """``2/4 running; service backoff (crashed: exited 1) [2 crashes in a row: backoff 1.0s]; ...``"""
    kids = list(children)
    running = sum(1 for c in kids if c.life.state is State.RUNNING)
    parts = [f"{running}/{len(kids)} running"]
    if disk:
        parts.append(disk)
    for child in kids:
        st = child.life.state
        if st is State.RUNNING:
            continue
        if st is State.STARTING and child.life.started_at is not None:
            if now - child.life.started_at > child.spec.start_timeout:
                parts.append(f"{child.name} not ready after {child.spec.start_timeout:g}s")
                continue
        text = f"{child.name} {st.value}"
        if st in (State.FATAL, State.BACKOFF) and child.life.reason:
            text += f" ({child.life.reason[:80]})"
        if st is State.BACKOFF and child.life.waiting:
            text += f" [{child.life.waiting}]"
        parts.append(text)
    return "; ".join(parts)
