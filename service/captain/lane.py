"""The lane state machine: who owns a room's run, who is steered into it, and how each turn ends.

Pure and h11-like: :meth:`Lane.handle` takes one event and the current time
and returns the actions the shell must carry out, in order; its one caller is
the lane's shell (:meth:`service.captain.shell.LaneShell.feed`). An event the
current state does not accept raises :class:`IllegalLaneEvent` and leaves the
lane exactly as it was. A dropped lane keeps the id of the run it aborted. The transition table is :data:`TRANSITIONS`; each
row's handler takes its own event class, and mypy checks every row pairs the
right one (:func:`_row`).

States::

    idle      --TurnArrived-->    starting   (StartRun: this turn owns the reply)
    starting  --TurnArrived-->    starting   (HoldSteer: run accepted, not streaming yet)
    starting  --RunStreaming-->   running    (FlushSteers: held messages go into the run)
    running   --TurnArrived-->    running    (Steer)
    starting|running --RunEnded-->   idle    (Finish / Fail every attached turn)
    starting|running --AbortRequested(operator)--> same   (AbortAgent; RunEnded follows)
    starting|running --AbortRequested(stalled)-->  dropped (AbortAgent, Fail all stalled, DropLane)
    dropped   --RunEnded|RunStreaming-->  dropped (late news from the aborted run)
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from clankie.errors import LocalProtocolError
from clankie.protocol import Code

STALLED = Code.CAPTAIN_TURN_STALLED


class LaneState(enum.StrEnum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    DROPPED = "dropped"


LIVE = (LaneState.STARTING, LaneState.RUNNING)
"""The states with a live run: the shell feeds a run's end only then."""


class IllegalLaneEvent(LocalProtocolError):
    """The shell fed an event the lane's state does not accept (our bug, never the peer's)."""


# ------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class TurnArrived:
    """A turn for this lane; ``run_id`` names the run if this turn starts one."""

    delivery_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class RunStreaming:
    """The agent accepted the run: steers can now be delivered into it."""


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The run settled. ``code`` None: it produced an answer; else every attached turn fails with it."""

    code: str | None = None


@dataclass(frozen=True, slots=True)
class AbortRequested:
    reason: Literal["stalled", "operator"]


Event = TurnArrived | RunStreaming | RunEnded | AbortRequested

# ------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class StartRun:
    turn_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class HoldSteer:
    turn_id: str


@dataclass(frozen=True, slots=True)
class FlushSteers:
    turn_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Steer:
    turn_id: str


@dataclass(frozen=True, slots=True)
class AbortAgent:
    run_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Finish:
    """The owner's result comes from the run's answer; the steerers were absorbed into it."""

    owner: str
    steerers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fail:
    turn_ids: tuple[str, ...]
    code: str


@dataclass(frozen=True, slots=True)
class DropLane:
    """Forget this lane: the next message rebuilds it cold from disk."""


Action = StartRun | HoldSteer | FlushSteers | Steer | AbortAgent | Finish | Fail | DropLane


def joining(action: Action) -> tuple[str, ...]:
    """The turns ``action`` makes part of the live run: its owner, or steers handed to the agent.

    Only these are charged if the service dies during the run
    (:mod:`service.captain.deliveries`). A :class:`HoldSteer` is not: a held
    turn joins the run when it is flushed into it.
    """
    if isinstance(action, StartRun | Steer):
        return (action.turn_id,)
    if isinstance(action, FlushSteers):
        return action.turn_ids
    return ()


# ------------------------------------------------------------------- the machine


@dataclass
class Lane:
    """One room's lane decisions. ``key`` is the lane key; time is only recorded, never read."""

    key: str
    state: LaneState = LaneState.IDLE
    run_id: str | None = None
    owner: str | None = None
    steerers: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    turns_started: int = 0
    run_started_at: float | None = None
    last_change_at: float | None = None

    @property
    def attached(self) -> tuple[str, ...]:
        """Every turn waiting on the live run, owner first."""
        return tuple(([self.owner] if self.owner else []) + self.steerers + self.held)

    def handle(self, event: Event, now: float) -> list[Action]:
        handler = TRANSITIONS.get((self.state, type(event)))
        if handler is None:
            raise IllegalLaneEvent(f"lane {self.key}: {type(event).__name__} is illegal while {self.state.value}")
        actions = handler(self, event, now)
        self.last_change_at = now
        return actions

    # -- transitions (each may mutate only after it knows the event is legal)

    def _new_turn_id(self, delivery_id: str) -> str:
        self.turns_started += 1
        return f"turn-{self.turns_started}-{delivery_id}"

    def _start(self, event: TurnArrived, now: float) -> list[Action]:
        turn = self._new_turn_id(event.delivery_id)
        self.state, self.run_id, self.owner = LaneState.STARTING, event.run_id, turn
        self.steerers, self.held, self.run_started_at = [], [], now
        return [StartRun(turn, event.run_id)]

    def _hold(self, event: TurnArrived, now: float) -> list[Action]:
        turn = self._new_turn_id(event.delivery_id)
        self.held.append(turn)
        return [HoldSteer(turn)]

    def _streaming(self, event: RunStreaming, now: float) -> list[Action]:
        held, self.held = tuple(self.held), []
        self.steerers.extend(held)
        self.state = LaneState.RUNNING
        return [FlushSteers(held)] if held else []

    def _steer(self, event: TurnArrived, now: float) -> list[Action]:
        turn = self._new_turn_id(event.delivery_id)
        self.steerers.append(turn)
        return [Steer(turn)]

    def _ended(self, event: RunEnded, now: float) -> list[Action]:
        if event.code is None and self.state is LaneState.STARTING:
            raise IllegalLaneEvent(f"lane {self.key}: a run cannot answer before it streams")
        attached = self.attached
        owner, steerers = self.owner, tuple(self.steerers + self.held)
        self._clear(LaneState.IDLE)
        if event.code is not None:
            return [Fail(attached, event.code)]
        assert owner is not None
        return [Finish(owner, steerers)]

    def _abort(self, event: AbortRequested, now: float) -> list[Action]:
        assert self.run_id is not None  # a starting or running lane has its run
        abort = AbortAgent(self.run_id, event.reason)
        if event.reason == "operator":
            return [abort]
        attached = self.attached
        self._clear(LaneState.DROPPED)
        self.run_id = abort.run_id  # a dropped lane still names its aborted run: it may go on writing (a zombie)
        return [abort, Fail(attached, STALLED), DropLane()]

    def _late_end(self, event: RunEnded | RunStreaming, now: float) -> list[Action]:
        return []

    def _clear(self, state: LaneState) -> None:
        self.state, self.run_id, self.owner = state, None, None
        self.steerers, self.held, self.run_started_at = [], [], None


_Handler = Callable[[Lane, Event, float], list[Action]]
_Key = tuple[LaneState, type[Event]]
E = TypeVar("E", TurnArrived, RunStreaming, RunEnded, AbortRequested)


def _row(state: LaneState, event: type[E], move: Callable[[Lane, E, float], list[Action]]) -> tuple[_Key, _Handler]:
    """One legal pair. mypy checks that ``move`` takes ``event``; the entry hands it the event, narrowed."""

    @functools.wraps(move)
    def entry(lane: Lane, got: Event, now: float) -> list[Action]:
        if not isinstance(got, event):  # never from handle(), which found this row by type(got)
            raise IllegalLaneEvent(f"lane {lane.key}: the {event.__name__} row got a {type(got).__name__}")
        return move(lane, got, now)

    return (state, event), entry


TRANSITIONS: dict[_Key, _Handler] = dict([
    _row(LaneState.IDLE, TurnArrived, Lane._start),
    _row(LaneState.STARTING, TurnArrived, Lane._hold),
    _row(LaneState.STARTING, RunStreaming, Lane._streaming),
    _row(LaneState.STARTING, RunEnded, Lane._ended),
    _row(LaneState.STARTING, AbortRequested, Lane._abort),
    _row(LaneState.RUNNING, TurnArrived, Lane._steer),
    _row(LaneState.RUNNING, RunEnded, Lane._ended),
    _row(LaneState.RUNNING, AbortRequested, Lane._abort),
    _row(LaneState.DROPPED, RunEnded, Lane._late_end),
    _row(LaneState.DROPPED, RunStreaming, Lane._late_end),
])
"""Every legal (state, event) pair; anything else is an :class:`IllegalLaneEvent`."""
