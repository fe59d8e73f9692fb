"""What docs/state-machines.md says under each table holds: every (state, event) pair that is neither a row nor
ignored raises the machine's error and leaves its state, and an ignored pair moves nothing."""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest

from clankie.errors import LocalProtocolError
from hosts.browser import lifecycle as browser
from service.captain.lanes import lane
from supervisor import lifecycle, sparelife, treestate


def _lane_event(kind: type) -> lane.Event:
    samples: dict[type, lane.Event] = {
        lane.TurnArrived: lane.TurnArrived("d1", "r1"),
        lane.RunStreaming: lane.RunStreaming(),
        lane.RunEnded: lane.RunEnded(),
        lane.AbortRequested: lane.AbortRequested("operator"),
        lane.ShutDown: lane.ShutDown(),
    }
    return samples[kind]


LANE_EVENTS = typing.get_args(lane.Event)
LANE_REFUSED = [(s, e) for s in lane.LaneState for e in LANE_EVENTS if (s, e) not in lane.TRANSITIONS]


@pytest.mark.parametrize(("state", "event"), LANE_REFUSED, ids=lambda x: getattr(x, "__name__", str(x)))
def test_a_lane_pair_not_in_its_table_raises(state: lane.LaneState, event: type) -> None:
    machine = lane.Lane("k", state=state)
    with pytest.raises(lane.IllegalLaneEvent):
        machine.handle(_lane_event(event), 1.0)
    assert machine.state is state


LIFE_REFUSED = [(s, e) for s in lifecycle.State for e in lifecycle.INPUTS
                if (s, e) not in lifecycle.TRANSITIONS and (s, e) not in lifecycle.IGNORED]
DERIVED = [e for e in lifecycle.Event if e not in lifecycle.INPUTS]


@pytest.mark.parametrize(("state", "event"), LIFE_REFUSED, ids=str)
def test_a_lifecycle_input_neither_listed_nor_ignored_raises(state: lifecycle.State, event: lifecycle.Event) -> None:
    life = lifecycle.Lifecycle(state=state)
    ex = lifecycle.Exit(code=1, signal=None, at=0.0)
    with pytest.raises(lifecycle.LifecycleError):
        life.handle(event, 1.0, ex=ex)
    assert life.state is state


@pytest.mark.parametrize("event", DERIVED, ids=str)
def test_a_derived_lifecycle_event_fed_by_the_shell_raises(event: lifecycle.Event) -> None:
    life = lifecycle.Lifecycle(state=lifecycle.State.EXITED)
    with pytest.raises(lifecycle.LifecycleError):
        life.handle(event, 1.0)


@pytest.mark.parametrize(("state", "event"), sorted(lifecycle.IGNORED, key=str), ids=str)
def test_an_ignored_lifecycle_input_moves_nothing(state: lifecycle.State, event: lifecycle.Event) -> None:
    life = lifecycle.Lifecycle(state=state)
    assert life.handle(event, 1.0) == [] and life.state is state


SPARE_FEEDS: dict[sparelife.SpareEvent, Callable[[sparelife.SpareLife], object]] = {
    sparelife.SpareEvent.WANT: lambda s: s.handle(sparelife.SpareEvent.WANT, 1.0),
    sparelife.SpareEvent.WARM: lambda s: s.want(),
    sparelife.SpareEvent.PARKED: lambda s: s.parked(),
    sparelife.SpareEvent.TAKE: lambda s: s.take(),
    sparelife.SpareEvent.EXIT: lambda s: s.exit(1.0, "exited 1"),
    sparelife.SpareEvent.DUE: lambda s: s.due(1.0),
    sparelife.SpareEvent.DROP: lambda s: s.drop(),
}


def test_the_spare_slot_has_no_pair_left_to_raise() -> None:
    """Rows and ignored pairs cover every pair: the doc says none raises, and that is the table's own claim."""
    pairs = {(s, e) for s in sparelife.SpareState for e in sparelife.SpareEvent}
    assert pairs == set(sparelife.SPARE_TRANSITIONS) | sparelife.SPARE_IGNORED
    assert not set(sparelife.SPARE_TRANSITIONS) & sparelife.SPARE_IGNORED


@pytest.mark.parametrize(("state", "event"), sorted(sparelife.SPARE_IGNORED, key=str), ids=str)
def test_an_ignored_spare_event_moves_nothing(state: sparelife.SpareState, event: sparelife.SpareEvent) -> None:
    slot = sparelife.SpareLife(state=state)
    SPARE_FEEDS[event](slot)
    assert slot.state is state


def test_due_in_backoff_waits_for_its_time() -> None:
    """The one row that waits on time: `due` in `backoff` before next_start_at is a no-op."""
    slot = sparelife.SpareLife(state=sparelife.SpareState.BACKOFF, next_start_at=5.0)
    assert slot.due(4.0) is False
    assert slot.state is sparelife.SpareState.BACKOFF
    assert slot.due(5.0) is True
    assert _state(slot) is sparelife.SpareState.WARMING


def _state(slot: sparelife.SpareLife) -> sparelife.SpareState:
    """The slot's state, read through a call (mypy narrows the attribute after the first assert)."""
    return slot.state


TREE_REFUSED = [(s, e) for s in treestate.TreeState for e in treestate.TreeEvent if (s, e) not in treestate.TREE_TRANSITIONS]


@pytest.mark.parametrize(("state", "event"), TREE_REFUSED, ids=str)
def test_a_tree_pair_not_in_its_table_raises(state: treestate.TreeState, event: treestate.TreeEvent) -> None:
    with pytest.raises(treestate.TreeStateError):
        treestate.move(state, event)


BROWSER_REFUSED = [(s, e) for s in typing.get_args(browser.State) for e in typing.get_args(browser.Event)
                   if (s, e) not in browser.TRANSITIONS]


@pytest.mark.parametrize(("state", "event"), BROWSER_REFUSED)
def test_a_browser_pair_not_in_its_table_raises(state: browser.State, event: browser.Event) -> None:
    life = browser.Lifecycle(state=state)
    with pytest.raises(LocalProtocolError):
        life.apply(event, 1.0)
    assert life.state == state


def test_every_machine_has_pairs_that_raise_except_the_spare_slot() -> None:
    """The parametrized tests above are not empty: each machine but the spare slot refuses some pair."""
    assert LANE_REFUSED and LIFE_REFUSED and DERIVED and TREE_REFUSED and BROWSER_REFUSED
