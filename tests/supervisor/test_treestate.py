"""The tree's own state (pure) and the one entry through which the child lifecycle is fed."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from clankie.errors import ClankieError, LocalProtocolError
from supervisor.lifecycle import Action, Event, Exit, Lifecycle, LifecycleError, State
from supervisor.sparelife import SPARE_IGNORED, SPARE_TRANSITIONS, SpareEvent, SpareLifeError, SpareState
from supervisor.treestate import TREE_TRANSITIONS, TreeEvent, TreeState, TreeStateError, move

ROOT = Path(__file__).resolve().parents[2]


def test_the_tree_goes_starting_running_stopping_stopped_through_its_table() -> None:
    """Each move of a tree's life is one row; the walk ends in STOPPED."""
    state = TreeState.STARTING
    for event, expected in ((TreeEvent.RUN, TreeState.RUNNING), (TreeEvent.STOP, TreeState.STOPPING),
                            (TreeEvent.DONE, TreeState.STOPPED)):
        assert TREE_TRANSITIONS[(state, event)] is expected
        state = move(state, event)
        assert state is expected


@pytest.mark.parametrize(
    ("state", "event"),
    [(s, e) for s, e in itertools.product(TreeState, TreeEvent) if (s, e) not in TREE_TRANSITIONS],
)
def test_a_tree_move_its_table_does_not_list_raises(state: TreeState, event: TreeEvent) -> None:
    """A second stop, a run after the stop, a done before it: each is a bug in the tree and refused."""
    with pytest.raises(TreeStateError):
        move(state, event)


def test_the_state_machines_errors_are_ours_under_the_root() -> None:
    """An illegal move in any supervisor machine is a local bug: a LocalProtocolError under ClankieError."""
    for error in (LifecycleError, SpareLifeError, TreeStateError):
        assert issubclass(error, LocalProtocolError) and issubclass(error, ClankieError)


def test_every_spare_pair_is_a_row_or_ignored_never_both() -> None:
    """The spare slot's table and its ignored pairs cover every (state, event) between them, without overlap."""
    pairs = set(itertools.product(SpareState, SpareEvent))
    assert set(SPARE_TRANSITIONS) | SPARE_IGNORED == pairs
    assert not set(SPARE_TRANSITIONS) & SPARE_IGNORED


def test_the_actions_name_what_the_shell_must_do_at_each_step() -> None:
    """start: spawn; ready: want a spare; a crash: schedule; a start in backoff: unschedule then spawn;
    a stop of a live child: drop the spare and terminate; an operator restart's exit: restart."""
    life = Lifecycle(rand=lambda: 0.0)
    assert life.handle(Event.START, 0.0) == [Action.SPAWN]
    assert life.handle(Event.READY, 0.1) == [Action.WANT_SPARE]
    assert life.handle(Event.EXIT, 0.2, ex=_exit(1)) == [Action.SCHEDULE] and _state(life) is State.BACKOFF
    assert life.handle(Event.START, 0.3) == [Action.UNSCHEDULE, Action.SPAWN]
    assert life.handle(Event.KILL, 0.4, reason="restart", counts_as_crash=False) == [Action.TERMINATE]
    assert life.handle(Event.START, 0.4) == []  # on its way down: the exit decides
    assert life.handle(Event.EXIT, 0.5, ex=_exit(0)) == [Action.RESTART] and _restart_now(life)
    assert life.handle(Event.START, 0.5) == [Action.SPAWN] and not _restart_now(life)
    assert life.handle(Event.STOP, 0.6) == [Action.DROP_SPARE, Action.TERMINATE]
    assert life.handle(Event.EXIT, 0.7, ex=_exit(0)) == [Action.DROP_SPARE] and _state(life) is State.STOPPED
    assert life.handle(Event.KILL, 0.8, reason="restart") == []  # nothing to kill: the restart's START starts it


def test_a_stop_in_backoff_forgets_the_scheduled_start() -> None:
    """The shell cancels its timer on UNSCHEDULE: a stopped child is not started by a backoff that ran out."""
    life = Lifecycle(rand=lambda: 1.0)
    life.handle(Event.START, 0.0)
    life.handle(Event.EXIT, 0.1, ex=_exit(1))
    assert life.next_start_at is not None
    assert life.handle(Event.STOP, 0.2) == [Action.UNSCHEDULE, Action.DROP_SPARE] and life.next_start_at is None


def test_only_the_process_shell_feeds_the_lifecycle_and_only_from_one_place() -> None:
    """`Lifecycle.handle` (and none of its spellings) is called once in the supervisor: in `Child._feed`."""
    spellings = {"handle", "start", "ready", "stop", "kill", "spawn_failed", "exit"}
    sites = []
    for path in sorted((ROOT / "supervisor").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in spellings
                        and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "life"
                        and path.name != "spare.py"):  # a spare's `life` is its own slot (SpareLife)
                    sites.append((path.name, func.name, node.func.attr))
    assert sites == [("process.py", "_feed", "handle")]


def _state(life: Lifecycle) -> State:
    """Read afresh: after a move mypy would keep the state narrowed to what it was before."""
    return life.state


def _restart_now(life: Lifecycle) -> bool:
    return life.restart_now


def _exit(code: int) -> Exit:
    return Exit(code=code, signal=None, at=0.0)
