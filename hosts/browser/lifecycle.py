"""The browser's life as a pure state machine (no I/O, no clock reads).

States: ``absent`` (no Chromium executable), ``down`` (not running, will be
launched on the next request), ``starting``, ``up``, ``stopping`` (closed
after an idle period; a request arriving now waits, then launches it again). The host feeds it events
from Playwright and reads :meth:`Lifecycle.report` into its heartbeat.
An illegal event is a bug on our side and raises :class:`LocalProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from clankie.errors import LocalProtocolError

State = Literal["absent", "down", "starting", "up", "stopping"]
Event = Literal["launch", "launched", "failed", "missing", "disconnected", "idle", "stopped"]

TRANSITIONS: dict[tuple[State, Event], State] = {
    ("absent", "launch"): "starting",
    ("down", "launch"): "starting",
    ("starting", "launched"): "up",
    ("starting", "failed"): "down",
    ("starting", "missing"): "absent",
    ("starting", "disconnected"): "down",
    ("up", "disconnected"): "down",
    ("down", "disconnected"): "down",
    ("absent", "disconnected"): "absent",
    ("down", "missing"): "absent",
    ("absent", "missing"): "absent",
    ("up", "idle"): "stopping",
    ("stopping", "stopped"): "down",
    ("stopping", "disconnected"): "stopping",
}


def idle_due(now: float, last_done: float, idle_seconds: float, busy: int) -> bool:
    """Whether an up browser with ``busy`` requests in flight, last used at ``last_done``, should close now."""
    return busy == 0 and now - last_done >= idle_seconds


@dataclass(slots=True)
class Lifecycle:
    state: State = "down"
    launches: int = 0
    crashes: int = 0
    last_error: str | None = None
    up_since: float | None = None
    idle_stops: int = 0

    def apply(self, event: Event, now: float, error: str | None = None) -> State:
        try:
            new = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise LocalProtocolError(f"browser lifecycle: {event} in state {self.state}") from None
        if event == "launched":
            self.launches += 1
            self.up_since = now
        if event == "disconnected" and self.state == "up":
            self.crashes += 1
        if event == "stopped":
            self.idle_stops += 1
        if new not in ("up", "stopping"):
            self.up_since = None
        if error is not None:
            self.last_error = error
        self.state = new
        return new

    @property
    def restarts(self) -> int:
        """Launches after the first one."""
        return max(0, self.launches - 1)

    def report(self, now: float) -> dict[str, Any]:
        return {
            "browser": self.state,
            "launches": self.launches,
            "restarts": self.restarts,
            "crashes": self.crashes,
            "idle_stops": self.idle_stops,
            "last_error": self.last_error,
            "up_for_s": None if self.up_since is None else round(now - self.up_since, 1),
        }
