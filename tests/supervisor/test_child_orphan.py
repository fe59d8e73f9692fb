"""exit_if_orphaned runs on the child's loop: it must never block it."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest

from clankie import child

REAL_POLL = select.poll


class SpyPoll:
    """Records every timeout a poll was given (select.poll stand-in around the real one)."""

    timeouts: list[float | None] = []

    def __init__(self) -> None:
        self._real = REAL_POLL()

    def register(self, fd: int, events: int) -> None:
        self._real.register(fd, events)

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        SpyPoll.timeouts.append(timeout)
        return self._real.poll(timeout)


def test_a_live_supervisor_is_checked_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the supervisor alive the check returns at once: a zero-timeout poll, no blocking select."""
    SpyPoll.timeouts = []
    monkeypatch.setattr(child.select, "poll", SpyPoll)

    def no_select(*a: object) -> None:
        raise AssertionError("exit_if_orphaned must not block in select()")

    monkeypatch.setattr(child.select, "select", no_select)
    child.exit_if_orphaned({child.SUPERVISOR_PID_ENV: str(os.getppid())})
    assert SpyPoll.timeouts == [0]


def test_a_dead_supervisor_takes_the_child_down() -> None:
    """A child whose recorded supervisor is gone kills its own group and does not carry on."""
    script = "from clankie import child; child.exit_if_orphaned({'CLANKIE_SUPERVISOR_PID': '999999999'}); print('alive')"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=20, start_new_session=True)
    assert b"alive" not in proc.stdout and proc.returncode in (-9, child.EXIT_ORPHANED)
