"""Liveness and the external stall watchdog (ARCHITECTURE §8): pure cores.

:class:`Liveness` watches one child's heartbeats on the **monotonic** clock:
a child that has not beaten for ``timeout`` seconds is wedged (SIGSTOP, a
blocked loop) and must be killed. Time spent suspended does not count, so a
laptop lid does not kill the tree.

:class:`StallWatchdog` enforces "no run goes silent for ``stall_seconds``".
The service reports each live run's age (seconds since its last event,
measured on ``CLOCK_BOOTTIME``) in every heartbeat; the supervisor stamps the
heartbeat with its own boottime on receipt. On every tick the age of a run is
``last_event_age_s + (boot_now - received_at)``, so a host suspend between
ticks counts in full and fires on the next tick. A stalled run is aborted
once (``abort_run``, reason ``stalled``); if the abort is not confirmed within
``grace`` seconds, or the service stops heartbeating, the verdict is to kill
and restart the service cold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clankie.protocol import Heartbeat


class Liveness:
    """Heartbeat deadline for one child, on the monotonic clock.

    A process just spawned has ``first`` seconds (at least ``timeout``) for its first beat: its cold imports
    come before it can beat, and on a loaded machine they take longer than a beat may be late (the service's
    took 55 s once). After the first beat, or for a process that was already running (a warm spare taking
    the child's place), ``timeout`` seconds between two beats.
    """

    def __init__(self, timeout: float, first: float | None = None) -> None:
        self.timeout = timeout
        self.first = max(timeout, first if first is not None else timeout)
        self.last_beat: float | None = None
        self._armed_at: float | None = None
        self._until_first = self.first

    def arm(self, now: float, *, cold: bool = True) -> None:
        """The process was spawned (``cold``) or took the child's place: it has ``first`` seconds to send its
        first beat when cold, ``timeout`` when it ran already."""
        self._armed_at = now
        self.last_beat = None
        self._until_first = self.first if cold else self.timeout

    def disarm(self) -> None:
        self._armed_at = None

    def beat(self, now: float) -> None:
        self.last_beat = now

    def expired(self, now: float) -> bool:
        if self._armed_at is None:
            return False
        deadline = self.deadline()
        return deadline is not None and now > deadline

    def deadline(self) -> float | None:
        if self._armed_at is None:
            return None
        if self.last_beat is None:
            return self._armed_at + self._until_first
        return self.last_beat + self.timeout


@dataclass(frozen=True, slots=True)
class Abort:
    """Verdict: ask the service to abort this run (reason ``stalled``)."""

    lane: str
    run_id: str
    age_s: float


@dataclass(frozen=True, slots=True)
class KillService:
    """Verdict: kill the service and restart it cold."""

    reason: str


Verdict = Abort | KillService


@dataclass
class StallWatchdog:
    """Decides, tick by tick, which runs to abort and when to kill the service."""

    stall_seconds: float
    grace_seconds: float
    last: Heartbeat | None = None
    received_at: float | None = None  # boottime when `last` arrived
    pending: dict[str, float] = field(default_factory=dict)  # run_id -> boottime the abort was sent
    aborted: set[str] = field(default_factory=set)  # run_ids already handled (once per run)

    def reset(self) -> None:
        """The service (re)started: forget every run."""
        self.last = None
        self.received_at = None
        self.pending.clear()
        self.aborted.clear()

    def observe(self, beat: Heartbeat, boot_now: float) -> None:
        self.last = beat
        self.received_at = boot_now
        live = {r.run_id for r in beat.runs}
        for run_id in list(self.pending):
            if run_id not in live:
                del self.pending[run_id]  # the run ended: abort confirmed in effect
        self.aborted &= live | set(self.pending)

    def confirmed(self, run_id: str, aborted: bool) -> None:
        """The service answered ``abort_run``; True means it is gone (or going)."""
        if aborted:
            self.pending.pop(run_id, None)

    def ages(self, boot_now: float) -> dict[str, float]:
        if self.last is None or self.received_at is None:
            return {}
        since = max(0.0, boot_now - self.received_at)
        return {r.run_id: r.last_event_age_s + since for r in self.last.runs}

    def tick(self, boot_now: float) -> list[Verdict]:
        """Everything to do now; each stalled run yields an Abort exactly once."""
        for run_id, sent in self.pending.items():
            if boot_now - sent > self.grace_seconds:
                return [KillService(f"stalled run {run_id} not aborted within {self.grace_seconds:g}s")]
        verdicts: list[Verdict] = []
        if self.last is None:
            return verdicts
        since = max(0.0, boot_now - (self.received_at or boot_now))
        for run in self.last.runs:
            age = run.last_event_age_s + since
            if age >= self.stall_seconds and run.run_id not in self.aborted:
                self.aborted.add(run.run_id)
                self.pending[run.run_id] = boot_now
                verdicts.append(Abort(run.lane, run.run_id, age))
        return verdicts
