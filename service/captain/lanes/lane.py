"""The lane state machine: who owns a room's run, who is steered into it, and how each turn ends.

Pure and h11-like: :meth:`Lane.handle` takes one event and the current time
and returns the actions the shell must carry out, in order; its one caller is
the lane's shell (:meth:`service.captain.lanes.shell.LaneShell.feed`). An event the
current state does not accept raises :class:`IllegalLaneEvent` and leaves the
lane exactly as it was. A dropped lane keeps the id of the run it aborted. The transition table is :data:`TRANSITIONS`; each
row's handler takes its own event class, and mypy checks every row pairs the
right one (:func:`_row`).

Every decision about a lane is made here (h11's rule: what affects the machine
lives in its file). Late news has rows, so a caller feeds without looking at
the state first: a run's end or start arriving after the lane moved on, or
naming a run that is no longer the lane's (a stale ``run_id``), is ignored; an
abort of a lane with no live run aborts nothing (its caller learns that from
the actions: no :class:`AbortAgent`). A one-shot lane is dropped by the
machine when its run ends; shutdown is an event fed to every lane (and to the lanes of a shard whose
lease this tree lost, in the PostgreSQL profile); whether a
lane may be evicted is a question asked of the machine (:attr:`Lane.at_rest`).

States::

    idle      --TurnArrived-->    starting   (StartRun: this turn owns the reply)
    starting  --TurnArrived-->    starting   (HoldSteer: run accepted, not streaming yet)
    starting  --RunStreaming-->   running    (FlushSteers: held messages go into the run)
    running   --TurnArrived-->    running    (Steer)
    starting|running --RunEnded-->   idle    (Finish / Fail every attached turn)
    starting|running --AbortRequested(operator)--> same   (AbortAgent; RunEnded follows)
    starting|running --AbortRequested(stalled)-->  dropped (AbortAgent, Fail all stalled, DropLane)
    starting|running --RunEnded-->   dropped  (a one-shot lane: Finish / Fail, then DropLane)
    idle      --ShutDown-->       dropped    (DropLane)
    starting|running --ShutDown-->   closing (AbortAgent, DropLane; the turns wait for the run's end)
    closing   --RunEnded-->       dropped    (Finish / Fail every attached turn)
    closing|dropped --RunStreaming--> same   (AbortAgent again: the aborted run started after all)
    late news (a run's end or start with no live run, a stale run id, an abort or a shutdown with nothing
    left to stop) moves nothing and answers [].
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
    CLOSING = "closing"
    DROPPED = "dropped"


LIVE = (LaneState.STARTING, LaneState.RUNNING)
"""The states with a live run (:attr:`Lane.live`)."""


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
    """The run settled. ``code`` None: it produced an answer; else every attached turn fails with it.

    ``run_id`` names the run that ended; news of another run than the lane's (None: the lane's own) is ignored.
    """

    code: str | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class AbortRequested:
    """Abort the live run (``run_id`` None: whichever it is; another id than the live run's aborts nothing)."""

    reason: Literal["stalled", "operator"]
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class ShutDown:
    """Abort the live run, if any, and forget the lane: the service is stopping (``shutdown``), or this tree no
    longer holds the room's shard (``moved``: another tree answers the room now)."""

    reason: Literal["shutdown", "moved"] = "shutdown"


Event = TurnArrived | RunStreaming | RunEnded | AbortRequested | ShutDown

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
    (:mod:`service.captain.deliveries.store`). A :class:`HoldSteer` is not: a held
    turn joins the run when it is flushed into it.
    """
    if isinstance(action, StartRun | Steer):
        return (action.turn_id,)
    if isinstance(action, FlushSteers):
        return action.turn_ids
    return ()


# ------------------------------------------------------------------- the machine


SHUTDOWN = "shutdown"
"""The abort reason of a run cut by :class:`ShutDown` as the service stops (its outcome's ``abort_reason``)."""
MOVED = "moved"
"""The abort reason of a run cut by :class:`ShutDown` because the room's shard is another tree's now."""


@dataclass
class Lane:
    """One room's lane decisions. ``key`` is the lane key; time is only recorded, never read.

    A ``oneshot`` lane (no lasting session) answers one turn: the machine drops it when its run ends.
    """

    key: str
    oneshot: bool = False
    state: LaneState = LaneState.IDLE
    run_id: str | None = None
    owner: str | None = None
    steerers: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    turns_started: int = 0
    run_started_at: float | None = None
    last_change_at: float | None = None
    aborted_for: str | None = None  # why a closing or dropped lane's run was aborted (None: it was not)

    @property
    def attached(self) -> tuple[str, ...]:
        """Every turn waiting on the live run, owner first."""
        return tuple(([self.owner] if self.owner else []) + self.steerers + self.held)

    @property
    def state_name(self) -> str:
        """The state's name, as reported (``clankiectl lanes``)."""
        return self.state.value

    @property
    def live(self) -> bool:
        """A run is live: started and not yet ended, aborted or cut by shutdown."""
        return self.state in LIVE

    @property
    def at_rest(self) -> bool:
        """No run and no turn in the machine, and not dropped: as far as the machine knows, safe to evict."""
        return self.state is LaneState.IDLE

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

    def _stale(self, run_id: str | None) -> bool:
        """News of a run that is not the lane's (an earlier one's late end)."""
        return run_id is not None and run_id != self.run_id

    def _ended(self, event: RunEnded, now: float) -> list[Action]:
        if self._stale(event.run_id):
            return []
        if event.code is None and self.state is LaneState.STARTING:
            raise IllegalLaneEvent(f"lane {self.key}: a run cannot answer before it streams")
        attached = self.attached
        owner, steerers, run_id = self.owner, tuple(self.steerers + self.held), self.run_id
        settled: list[Action]
        if event.code is not None:
            settled = [Fail(attached, event.code)]
        else:
            assert owner is not None
            settled = [Finish(owner, steerers)]
        if self.state is LaneState.CLOSING:  # the lane was dropped at shutdown: its turns were waiting for this
            self._clear(LaneState.DROPPED)
            self.run_id = run_id
            return settled
        if self.oneshot:  # no lasting session: the lane's one turn is done, the lane goes
            self._clear(LaneState.DROPPED)
            self.run_id = run_id
            return [*settled, DropLane()]
        self._clear(LaneState.IDLE)
        return settled

    def _abort(self, event: AbortRequested, now: float) -> list[Action]:
        assert self.run_id is not None  # a starting or running lane has its run
        if self._stale(event.run_id):
            return []
        abort = AbortAgent(self.run_id, event.reason)
        if event.reason == "operator":
            return [abort]
        attached = self.attached
        self._clear(LaneState.DROPPED)
        self.run_id, self.aborted_for = abort.run_id, event.reason  # a dropped lane still names its aborted run: it
        return [abort, Fail(attached, STALLED), DropLane()]        # may go on writing (a zombie)

    def _shutdown(self, event: ShutDown, now: float) -> list[Action]:
        """Abort the live run and drop the lane; its turns stay attached and settle when the run ends."""
        assert self.run_id is not None  # a starting or running lane has its run
        self.state, self.aborted_for = LaneState.CLOSING, event.reason
        return [AbortAgent(self.run_id, event.reason), DropLane()]

    def _shutdown_idle(self, event: ShutDown, now: float) -> list[Action]:
        self.state = LaneState.DROPPED
        return [DropLane()]

    def _late_start(self, event: RunStreaming, now: float) -> list[Action]:
        """The aborted run of a closing or dropped lane started after all (it was waiting): abort it again."""
        if self.run_id is None or self.aborted_for is None:
            return []  # a dropped one-shot lane's run already ended, or an idle lane was shut down
        return [AbortAgent(self.run_id, self.aborted_for)]

    def _late(self, event: Event, now: float) -> list[Action]:
        """Late news: a run's end or start with no live run, an abort or a shutdown with nothing left to stop."""
        return []

    def _clear(self, state: LaneState) -> None:
        self.state, self.run_id, self.owner = state, None, None
        self.steerers, self.held, self.run_started_at = [], [], None


_Handler = Callable[[Lane, Event, float], list[Action]]
_Key = tuple[LaneState, type[Event]]
E = TypeVar("E", TurnArrived, RunStreaming, RunEnded, AbortRequested, ShutDown)


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
    _row(LaneState.IDLE, RunStreaming, Lane._late),
    _row(LaneState.IDLE, RunEnded, Lane._late),
    _row(LaneState.IDLE, AbortRequested, Lane._late),
    _row(LaneState.IDLE, ShutDown, Lane._shutdown_idle),
    _row(LaneState.STARTING, TurnArrived, Lane._hold),
    _row(LaneState.STARTING, RunStreaming, Lane._streaming),
    _row(LaneState.STARTING, RunEnded, Lane._ended),
    _row(LaneState.STARTING, AbortRequested, Lane._abort),
    _row(LaneState.STARTING, ShutDown, Lane._shutdown),
    _row(LaneState.RUNNING, TurnArrived, Lane._steer),
    _row(LaneState.RUNNING, RunStreaming, Lane._late),
    _row(LaneState.RUNNING, RunEnded, Lane._ended),
    _row(LaneState.RUNNING, AbortRequested, Lane._abort),
    _row(LaneState.RUNNING, ShutDown, Lane._shutdown),
    _row(LaneState.CLOSING, RunStreaming, Lane._late_start),
    _row(LaneState.CLOSING, RunEnded, Lane._ended),
    _row(LaneState.CLOSING, AbortRequested, Lane._late),
    _row(LaneState.CLOSING, ShutDown, Lane._late),
    _row(LaneState.DROPPED, RunStreaming, Lane._late_start),
    _row(LaneState.DROPPED, RunEnded, Lane._late),
    _row(LaneState.DROPPED, AbortRequested, Lane._late),
    _row(LaneState.DROPPED, ShutDown, Lane._late),
])
"""Every legal (state, event) pair; anything else is an :class:`IllegalLaneEvent`."""
