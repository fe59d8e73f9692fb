"""A model route's circuit breaker as a pure state machine (no I/O, no clock reads: every method takes ``now``).

States: ``closed`` (the route takes calls), ``open`` (it failed: no call
goes to it until ``retry_at``), ``half_open`` (one call, the probe, is
finding out whether it is back). Events: ``failed`` and ``succeeded`` (a
call that was not the probe answered), ``probe`` (a call goes as the probe),
``probe_failed``, ``probe_succeeded``, ``probe_abandoned`` (the probe ended
without an answer: aborted). Every move is a row of :data:`TRANSITIONS`; a
pair that is not one is a bug on our side and raises
:class:`~clankie.errors.LocalProtocolError`, leaving the state as it was.

The wait before a probe starts at ``base`` (or the server's own wait, when
a 429 named one longer) and doubles after each failed probe up to ``cap``,
so a route that stays down costs one call per ``cap`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clankie.errors import LocalProtocolError

State = Literal["closed", "open", "half_open"]
Event = Literal["failed", "succeeded", "probe", "probe_failed", "probe_succeeded", "probe_abandoned"]

TRANSITIONS: dict[tuple[State, Event], State] = {
    ("closed", "succeeded"): "closed",
    ("closed", "failed"): "open",
    ("open", "succeeded"): "open",  # a call sent before it opened: only the probe closes it
    ("open", "failed"): "open",  # a call sent before it opened
    ("open", "probe"): "half_open",  # only once retry_at has passed (Breaker.take)
    ("half_open", "succeeded"): "half_open",
    ("half_open", "failed"): "half_open",
    ("half_open", "probe_succeeded"): "closed",
    ("half_open", "probe_failed"): "open",
    ("half_open", "probe_abandoned"): "open",  # the next call probes at once
}

BASE_SECONDS = 5.0
CAP_SECONDS = 20.0


@dataclass(slots=True)
class Breaker:
    """One route's breaker; see the module docstring."""

    base: float = BASE_SECONDS
    cap: float = CAP_SECONDS
    state: State = "closed"
    retry_at: float = 0.0  # open: when the next call may probe
    wait: float = 0.0  # open: the wait that set retry_at (the next failed probe doubles it)
    down_since: float | None = None  # when it left closed (None while closed)
    opened: int = 0  # times it went from closed to open (failovers away from it)

    def apply(self, event: Event, now: float, hint: float | None = None) -> State:
        """Move on ``event`` at ``now``; ``hint`` is a wait the server named (a 429's retry-after)."""
        try:
            new = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise LocalProtocolError(f"route breaker: {event} in state {self.state}") from None
        if new == "open" and self.state != "open":
            if self.state == "closed":
                self.opened += 1
                self.down_since = now
                self.wait = self.base
            elif event == "probe_failed":
                self.wait = min(self.cap, max(self.base, self.wait * 2))
            else:  # the probe was abandoned: the next call probes at once
                self.wait = 0.0
            self.retry_at = now + max(self.wait, hint or 0.0)
        if new == "closed":
            self.down_since = None
            self.wait = 0.0
        self.state = new
        return new

    def due(self, now: float) -> bool:
        """Is it open with its wait over, so the next call may go as its probe?"""
        return self.state == "open" and now >= self.retry_at

    @property
    def up(self) -> bool:
        return self.state == "closed"
