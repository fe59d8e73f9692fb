"""The lane state machine, on its own: every (state, event) pair and the burst/stall stories."""

from __future__ import annotations

import copy
import itertools

import pytest

from service.captain.lane import (
    TRANSITIONS,
    AbortAgent,
    AbortRequested,
    DropLane,
    Fail,
    Finish,
    FlushSteers,
    HoldSteer,
    IllegalLaneEvent,
    Lane,
    LaneState,
    RunEnded,
    RunStreaming,
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
    AbortRequested("stalled"),
    AbortRequested("operator"),
]


def lane_in(state: LaneState) -> Lane:
    lane = Lane("k")
    if state is LaneState.IDLE:
        return lane
    lane.handle(TurnArrived("d1", "r1"), 0)
    if state is LaneState.STARTING:
        return lane
    lane.handle(RunStreaming(), 1)
    if state is LaneState.RUNNING:
        return lane
    lane.handle(AbortRequested("stalled"), 2)
    assert lane.state is LaneState.DROPPED
    return lane


@pytest.mark.parametrize(("state", "event"), list(itertools.product(LaneState, EVENTS)))
def test_every_state_event_pair_is_either_in_the_table_or_refused_without_change(
    state: LaneState, event: object
) -> None:
    """Each event is either a legal transition or raises and leaves the lane exactly as it was."""
    lane = lane_in(state)
    before = copy.deepcopy(lane)
    legal = (state, type(event)) in TRANSITIONS
    if state is LaneState.STARTING and event == RunEnded(None):
        legal = False  # a run cannot answer before it streamed
    if legal:
        lane.handle(event, 5)  # type: ignore[arg-type]  # deliberately an event the state does not accept
    else:
        with pytest.raises(IllegalLaneEvent):
            lane.handle(event, 5)  # type: ignore[arg-type]  # deliberately an event the state does not accept
        assert lane == before


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
