"""The lane state machine, on its own: every (state, event) pair and the burst/stall stories."""

from __future__ import annotations

import copy
import itertools
import typing

import pytest

from service.captain.lanes.lane import (
    TRANSITIONS,
    AbortAgent,
    AbortRequested,
    DropLane,
    Event,
    Fail,
    Finish,
    FlushSteers,
    HoldSteer,
    IllegalLaneEvent,
    Lane,
    LaneState,
    RunEnded,
    RunStreaming,
    ShutDown,
    StartRun,
    Steer,
    TurnArrived,
    joining,
)

EVENTS = [
    TurnArrived("d9", "r9"),
    RunStreaming(),
    RunEnded(None),
    RunEnded("captain_model_failed"),
    RunEnded("captain_model_failed", "r-old"),
    AbortRequested("stalled"),
    AbortRequested("operator"),
    AbortRequested("operator", "r-old"),
    ShutDown(),
]


def lane_in(state: LaneState, oneshot: bool = False) -> Lane:
    """A lane in ``state`` whose run (if it has one) is ``r1``, owned by ``turn-1-d1``."""
    lane = Lane("k", oneshot=oneshot)
    if state is LaneState.IDLE:
        return lane
    lane.handle(TurnArrived("d1", "r1"), 0)
    if state is LaneState.STARTING:
        return lane
    lane.handle(RunStreaming(), 1)
    if state is LaneState.RUNNING:
        return lane
    lane.handle(ShutDown() if state is LaneState.CLOSING else AbortRequested("stalled"), 2)
    assert lane.state is state
    return lane


ID, ST, RU, CL, DR = LaneState.IDLE, LaneState.STARTING, LaneState.RUNNING, LaneState.CLOSING, LaneState.DROPPED
T, S, E0, EC, ESTALE, AS, AO, ASTALE, X = EVENTS
FAILED = Fail(("turn-1-d1",), "captain_model_failed")
STALL = [AbortAgent("r1", "stalled"), Fail(("turn-1-d1",), "captain_turn_stalled"), DropLane()]
RAISES = None

SPEC: dict[tuple[LaneState, object], tuple[LaneState, list[object]] | None] = {
    # an idle lane: a turn starts a run; late news and aborts find nothing; shutdown forgets it
    (ID, T): (ST, [StartRun("turn-1-d9", "r9")]),
    (ID, S): (ID, []), (ID, E0): (ID, []), (ID, EC): (ID, []), (ID, ESTALE): (ID, []),
    (ID, AS): (ID, []), (ID, AO): (ID, []), (ID, ASTALE): (ID, []),
    (ID, X): (DR, [DropLane()]),
    # a run accepted, not streaming: turns are held; it cannot answer yet; a stale id is ignored
    (ST, T): (ST, [HoldSteer("turn-2-d9")]),
    (ST, S): (RU, []),
    (ST, E0): RAISES,
    (ST, EC): (ID, [FAILED]), (ST, ESTALE): (ST, []),
    (ST, AS): (DR, STALL), (ST, AO): (ST, [AbortAgent("r1", "operator")]), (ST, ASTALE): (ST, []),
    (ST, X): (CL, [AbortAgent("r1", "shutdown"), DropLane()]),
    # a streaming run: turns are steered into it; a second start is late news
    (RU, T): (RU, [Steer("turn-2-d9")]),
    (RU, S): (RU, []),
    (RU, E0): (ID, [Finish("turn-1-d1", ())]), (RU, EC): (ID, [FAILED]), (RU, ESTALE): (RU, []),
    (RU, AS): (DR, STALL), (RU, AO): (RU, [AbortAgent("r1", "operator")]), (RU, ASTALE): (RU, []),
    (RU, X): (CL, [AbortAgent("r1", "shutdown"), DropLane()]),
    # dropped at shutdown, its run still ending: the run's end settles its turns; a start is aborted again
    (CL, T): RAISES,
    (CL, S): (CL, [AbortAgent("r1", "shutdown")]),
    (CL, E0): (DR, [Finish("turn-1-d1", ())]), (CL, EC): (DR, [FAILED]), (CL, ESTALE): (CL, []),
    (CL, AS): (CL, []), (CL, AO): (CL, []), (CL, ASTALE): (CL, []), (CL, X): (CL, []),
    # dropped: forgotten; only the aborted run starting after all is news (it is aborted again)
    (DR, T): RAISES,
    (DR, S): (DR, [AbortAgent("r1", "stalled")]),
    (DR, E0): (DR, []), (DR, EC): (DR, []), (DR, ESTALE): (DR, []),
    (DR, AS): (DR, []), (DR, AO): (DR, []), (DR, ASTALE): (DR, []), (DR, X): (DR, []),
}
ONESHOT = {  # a one-shot lane differs only where its run ends: the machine drops it
    (ST, EC): (DR, [FAILED, DropLane()]),
    (RU, E0): (DR, [Finish("turn-1-d1", ()), DropLane()]),
    (RU, EC): (DR, [FAILED, DropLane()]),
}


def test_the_spec_names_every_state_and_event_sample() -> None:
    """The table below is the whole product: every state against every sample event, for room and one-shot lanes."""
    assert set(SPEC) == set(itertools.product(LaneState, EVENTS))
    assert {(s, type(e)) for s, e in SPEC} == set(itertools.product(LaneState, typing.get_args(Event)))


@pytest.mark.parametrize("oneshot", [False, True], ids=["room", "oneshot"])
@pytest.mark.parametrize(("state", "event"), list(itertools.product(LaneState, EVENTS)))
def test_every_state_event_pair_moves_as_the_spec_says_or_is_refused_without_change(
    state: LaneState, event: object, oneshot: bool
) -> None:
    """Each pair either moves to its next state with its actions, or raises and leaves the lane exactly as it was."""
    lane = lane_in(state, oneshot)
    before = copy.deepcopy(lane)
    expected = ONESHOT.get((state, event), SPEC[(state, event)]) if oneshot else SPEC[(state, event)]
    if expected is RAISES:
        with pytest.raises(IllegalLaneEvent):
            lane.handle(event, 5)  # type: ignore[arg-type]  # deliberately an event the state does not accept
        assert lane == before
        return
    next_state, actions = expected
    assert lane.handle(event, 5) == actions  # type: ignore[arg-type]  # each sample is an Event
    assert lane.state is next_state


def test_a_row_is_legal_exactly_where_the_spec_does_not_raise() -> None:
    """The table's rows are the pairs the spec moves (one row raises for one event value: a starting lane refuses
    an answer before it streams)."""
    moves = {(s, type(e)) for (s, e), want in SPEC.items() if want is not RAISES}
    assert moves == set(TRANSITIONS)


def test_late_news_moves_nothing_so_callers_feed_without_looking() -> None:
    """A run's end after the lane moved on, a stale run id, an abort of an idle lane: all answer [] and keep the lane."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    lane.handle(RunEnded(None, "r1"), 2)  # the agent's RunEnd
    assert lane.handle(RunEnded("captain_session_failed", "r1"), 3) == []  # the owner task's, after it
    lane.handle(TurnArrived("m2", "r2"), 4)
    assert lane.handle(RunEnded("captain_session_failed", "r1"), 5) == []  # r1's news reaches r2's lane
    assert lane.handle(AbortRequested("operator", "r1"), 6) == []
    assert (lane.state, lane.run_id, lane.owner) == (LaneState.STARTING, "r2", "turn-2-m2")


def test_a_one_shot_lane_is_dropped_by_its_machine_when_its_run_ends() -> None:
    """No lasting session: the lane's one turn settles and the machine answers DropLane; it keeps its run's id."""
    lane = Lane("k", oneshot=True)
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    assert lane.handle(RunEnded(None, "r1"), 2) == [Finish("turn-1-m1", ()), DropLane()]
    assert (lane.state, lane.run_id, lane.at_rest) == (LaneState.DROPPED, "r1", False)
    assert lane.handle(RunEnded("captain_session_failed", "r1"), 3) == []


def test_shutdown_drops_the_lane_and_its_turns_settle_when_the_run_ends() -> None:
    """Shutdown aborts the run and drops the lane at once; the attached turns wait for the run's end (its code)."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    lane.handle(TurnArrived("m2", "r2"), 2)
    assert lane.handle(ShutDown(), 3) == [AbortAgent("r1", "shutdown"), DropLane()]
    assert (lane.state, lane.live, lane.attached) == (LaneState.CLOSING, False, ("turn-1-m1", "turn-2-m2"))
    assert lane.handle(RunEnded("shutting_down", "r1"), 4) == [Fail(("turn-1-m1", "turn-2-m2"), "shutting_down")]
    assert _settled(lane) == (LaneState.DROPPED, ())


def test_a_lost_shard_aborts_the_run_as_moved_and_its_turns_fail_with_the_runs_code() -> None:
    """The tree lost the room's shard (the PostgreSQL profile): the same as a shutdown, but the run's abort says
    ``moved``, so its turns fail ``captain_shard_moved`` and are not left for a restart that is not coming."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    assert lane.handle(ShutDown("moved"), 2) == [AbortAgent("r1", "moved"), DropLane()]
    assert lane.handle(RunEnded("captain_shard_moved", "r1"), 3) == [Fail(("turn-1-m1",), "captain_shard_moved")]


def _settled(lane: Lane) -> tuple[LaneState, tuple[str, ...]]:
    """The lane's state and attached turns, read through a call (mypy narrows the attributes after an assert)."""
    return lane.state, lane.attached


def test_only_an_idle_lane_is_at_rest() -> None:
    """Eviction asks the machine: a lane is at rest only when idle (a dropped lane is gone, not resting)."""
    assert [s for s in LaneState if lane_in(s).at_rest] == [LaneState.IDLE]
    assert [s for s in LaneState if lane_in(s).live] == [LaneState.STARTING, LaneState.RUNNING]


def test_a_row_refuses_an_event_of_another_class_without_change() -> None:
    """Each row's handler is typed by its event class; called with another one (never through handle), it refuses."""
    lane = lane_in(LaneState.IDLE)
    before = copy.deepcopy(lane)
    with pytest.raises(IllegalLaneEvent):
        TRANSITIONS[(LaneState.IDLE, TurnArrived)](lane, RunEnded(None), 5)
    assert lane == before


def test_idle_lane_turn_starts_the_run_and_owns_it() -> None:
    """The first message in an idle room starts the run and is its owner."""
    lane = Lane("k")
    assert lane.handle(TurnArrived("m1", "r1"), 0) == [StartRun("turn-1-m1", "r1")]
    assert lane.state is LaneState.STARTING and lane.owner == "turn-1-m1" and lane.run_id == "r1"


def test_burst_is_one_run_with_one_owner_and_absorbed_steerers() -> None:
    """A burst of three: the first owns the reply, the others are steered and absorbed."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    assert lane.handle(TurnArrived("m2", "rX"), 4) == [Steer("turn-2-m2")]
    assert lane.handle(TurnArrived("m3", "rY"), 10) == [Steer("turn-3-m3")]
    assert lane.run_id == "r1"
    assert lane.handle(RunEnded(None), 12) == [Finish("turn-1-m1", ("turn-2-m2", "turn-3-m3"))]
    assert lane.state is LaneState.IDLE and lane.attached == ()


def test_message_between_accepted_and_streaming_is_held_then_steered() -> None:
    """A message arriving before the run streams is held and delivered into the same run (one answer)."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    assert lane.handle(TurnArrived("m2", "r2"), 0.1) == [HoldSteer("turn-2-m2")]
    assert lane.handle(RunStreaming(), 0.2) == [FlushSteers(("turn-2-m2",))]
    assert lane.handle(RunEnded(None), 3) == [Finish("turn-1-m1", ("turn-2-m2",))]


def test_streaming_with_nothing_held_does_nothing() -> None:
    """A run that starts streaming with no held messages needs no flush."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    assert lane.handle(RunStreaming(), 1) == []
    assert lane.state is LaneState.RUNNING


def test_failed_run_fails_owner_and_steerers_with_its_code() -> None:
    """Steered into a run that fails: every attached turn fails with the run's code."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    lane.handle(TurnArrived("m2", "r2"), 2)
    assert lane.handle(RunEnded("captain_model_failed"), 3) == [
        Fail(("turn-1-m1", "turn-2-m2"), "captain_model_failed")
    ]
    assert lane.state is LaneState.IDLE


def test_run_failing_before_it_streams_fails_held_turns_too() -> None:
    """A run refused before streaming (no API key) fails the owner and anyone held behind it."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(TurnArrived("m2", "r2"), 0)
    assert lane.handle(RunEnded("captain_provider_unconfigured"), 0) == [
        Fail(("turn-1-m1", "turn-2-m2"), "captain_provider_unconfigured")
    ]


def test_stall_fails_every_attached_turn_and_drops_the_lane() -> None:
    """A stalled run fails owner, steerers and held turns as stalled and the lane is dropped."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(TurnArrived("m2", "r2"), 0)
    lane.handle(RunStreaming(), 1)
    lane.handle(TurnArrived("m3", "r3"), 2)
    actions = lane.handle(AbortRequested("stalled"), 300)
    assert actions == [
        AbortAgent("r1", "stalled"),
        Fail(("turn-1-m1", "turn-2-m2", "turn-3-m3"), "captain_turn_stalled"),
        DropLane(),
    ]
    assert lane.state is LaneState.DROPPED
    assert lane.handle(RunEnded("captain_session_failed"), 301) == []  # the aborted run's late end


def test_operator_abort_keeps_the_lane_and_lets_the_run_end_report() -> None:
    """An operator abort only aborts the agent; the run's end then reports for everyone."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    assert lane.handle(AbortRequested("operator"), 2) == [AbortAgent("r1", "operator")]
    assert lane.state is LaneState.RUNNING
    assert lane.handle(RunEnded("captain_session_failed"), 3) == [Fail(("turn-1-m1",), "captain_session_failed")]


def test_turn_ids_count_per_lane_and_carry_the_delivery() -> None:
    """Turn ids are ``turn-<n>-<delivery>`` with n counting every turn this lane object saw."""
    lane = Lane("k")
    for n, delivery in enumerate(["a", "b", "c"], start=1):
        (start,) = lane.handle(TurnArrived(delivery, f"r{n}"), n)
        assert isinstance(start, StartRun) and start.turn_id == f"turn-{n}-{delivery}"
        lane.handle(RunStreaming(), n)
        lane.handle(RunEnded(None), n)


def test_dropped_lane_refuses_new_turns() -> None:
    """The registry never routes a turn to a dropped lane; doing so is a bug that raises."""
    lane = lane_in(LaneState.DROPPED)
    with pytest.raises(IllegalLaneEvent):
        lane.handle(TurnArrived("m9", "r9"), 9)


def test_only_the_owner_and_steers_handed_to_the_agent_join_the_run() -> None:
    """StartRun, Steer and FlushSteers make their turns part of the run; a held turn is not, until it is flushed."""
    lane = Lane("k")
    [start] = lane.handle(TurnArrived("d1", "r1"), 0)
    [hold] = lane.handle(TurnArrived("d2", "r2"), 1)
    [flush] = lane.handle(RunStreaming(), 2)
    [steer] = lane.handle(TurnArrived("d3", "r3"), 3)
    assert [joining(a) for a in (start, hold, flush, steer)] == [("turn-1-d1",), (), ("turn-2-d2",), ("turn-3-d3",)]
    assert [joining(a) for a in lane.handle(RunEnded(None), 4)] == [()]
    lane.handle(TurnArrived("d4", "r4"), 5)
    assert all(joining(a) == () for a in lane.handle(AbortRequested("stalled"), 6))


def test_a_dropped_lane_still_names_its_aborted_run() -> None:
    """After a stalled abort the lane keeps the aborted run's id (it may go on writing: a zombie is named by it),
    and nothing else of the run: no owner, no turns attached."""
    lane = Lane("k")
    lane.handle(TurnArrived("m1", "r1"), 0)
    lane.handle(RunStreaming(), 1)
    lane.handle(AbortRequested("stalled"), 2)
    assert (lane.state, lane.run_id, lane.owner, lane.attached) == (LaneState.DROPPED, "r1", None, ())
    assert lane.handle(RunEnded("captain_session_failed"), 3) == [] and lane.run_id == "r1"
