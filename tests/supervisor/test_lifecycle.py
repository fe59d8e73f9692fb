"""The child lifecycle and restart policy (pure: no processes, explicit time)."""

from __future__ import annotations

import itertools
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clankie.errors import EX_CONFIG
from supervisor import sparelife
from supervisor.lifecycle import (
    IGNORED,
    INPUTS,
    OPERATOR,
    RESTART_REASONS,
    TRANSITIONS,
    Event,
    Exit,
    Lifecycle,
    LifecycleError,
    Policy,
    State,
    describe,
)


def _state(spare: sparelife.SpareLife) -> sparelife.SpareState:
    """Read afresh: after a move mypy would keep the state narrowed to what it was before."""
    return spare.state


def _next_start(spare: sparelife.SpareLife) -> float | None:
    return spare.next_start_at

def crash(life: Lifecycle, now: float, code: int = 1) -> State:
    return life.exit(Exit(code=code, signal=None, at=now), now)


def test_a1_crash_at_startup_follows_the_backoff_schedule() -> None:
    """A child that dies at once is restarted after 0.5, 1, 2, 4 … s, capped, and status shows backoff."""
    life = Lifecycle(policy=Policy(backoff_base=0.5, backoff_cap=4.0, intensity=100), rand=lambda: 1.0)
    now = 0.0
    for _ in range(6):
        life.start(now)
        assert crash(life, now + 0.05) is State.BACKOFF
        assert life.next_start_at == pytest.approx(now + 0.05 + life.delays[-1])
        now = life.next_start_at or now
    assert life.delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert life.last_exit is not None and life.last_exit.code == 1
    assert life.restarts == 5


def test_a2_crash_after_running_still_backs_off_and_resets_after_stable_uptime() -> None:
    """Crashes 1.5 s after READY keep growing the delay; a run longer than reset_after wipes it."""
    life = Lifecycle(policy=Policy(backoff_base=0.5, backoff_cap=30, reset_after=10, intensity=100), rand=lambda: 1.0)
    now = 0.0
    for _ in range(4):
        life.start(now)
        life.ready(now + 0.1)
        assert life.state is State.RUNNING
        crash(life, now + 1.6)
        now = life.next_start_at or 0.0
    assert life.delays == [0.5, 1.0, 2.0, 4.0]
    life.start(now)
    life.ready(now + 0.1)
    crash(life, now + 60.0)  # stable for 60 s > reset_after: back at once
    assert life.delays[-1] == 0.0
    now = life.next_start_at or 0.0
    life.start(now)
    crash(life, now + 1.0)  # a quick crash after that starts the schedule over
    assert life.delays[-1] == 0.5


def test_restart_intensity_makes_the_child_fatal_with_a_next_start() -> None:
    """Too many exits within the window give FATAL with the reason and a cooldown, not a hot loop."""
    life = Lifecycle(policy=Policy(backoff_base=0.01, intensity=3, window=60, fatal_cooldown=120), rand=lambda: 0.0)
    now = 0.0
    states = []
    for _ in range(4):
        life.start(now)
        states.append(crash(life, now + 0.1))
        now += 1
    assert states == [State.BACKOFF, State.BACKOFF, State.BACKOFF, State.FATAL]
    assert "restart intensity" in life.reason and "crashed: exited 1" in life.reason
    assert life.next_start_at == pytest.approx(3.1 + 120)
    assert not life.due(100.0) and life.due(124.0)


def test_config_error_exit_is_fatal_with_its_message_and_no_automatic_restart() -> None:
    """Exit 78 shows the child's message and waits for the operator."""
    life = Lifecycle()
    life.start(0.0)
    assert life.exit(Exit(code=EX_CONFIG, signal=None, at=1.0, message="CLANKIE_MODEL: bad"), 1.0) is State.FATAL
    assert life.reason == "config_error: CLANKIE_MODEL: bad"
    assert life.next_start_at is None and not life.due(1e9)
    assert life.start(5.0) is State.STARTING  # the operator's `clankiectl start`


def test_a6_exit_during_a_requested_stop_is_stopped_not_crashed() -> None:
    """A child that exits 0 while we stop it is `stopped`, not restarted, no backoff."""
    life = Lifecycle()
    life.start(0.0)
    life.ready(0.1)
    life.stop()
    assert life.exit(Exit(code=0, signal=None, at=1.0, requested=True), 1.0) is State.STOPPED
    assert life.next_start_at is None and life.delays == [] and life.ended == "exited 0"


def test_heartbeat_kill_restarts_through_backoff_with_the_reason() -> None:
    """A child killed for missing heartbeats comes back through backoff; the reason says heartbeat."""
    life = Lifecycle(rand=lambda: 0.0)
    life.start(0.0)
    life.ready(0.1)
    life.kill("heartbeat")
    assert life.state is State.STOPPING
    ex = Exit(code=None, signal=signal.SIGKILL, at=2.0, requested=True)
    assert life.exit(ex, 2.0) is State.BACKOFF
    assert life.reason == "heartbeat" and life.ended == "killed after grace"


def test_operator_restart_skips_backoff() -> None:
    """`clankiectl restart` takes the child down and straight back up."""
    life = Lifecycle()
    life.start(0.0)
    life.ready(0.1)
    life.kill("restart", counts_as_crash=False)
    assert life.exit(Exit(code=0, signal=None, at=1.0, requested=True), 1.0) is State.STOPPED
    assert life.restart_now and life.delays == []
    assert life.start(1.0) is State.STARTING and life.restarts == 1


def test_each_restart_is_counted_by_why_the_life_before_it_ended() -> None:
    """crash, watchdog (a heartbeat or stall kill), spawn_error, operator (a restart, a stop then a start, or a start
    out of backoff or fatal): the reasons a restart-loop alert tells apart."""
    life = Lifecycle(rand=lambda: 0.0)
    life.start(0.0)
    life.ready(0.1)
    assert life.restarts_by == dict.fromkeys(RESTART_REASONS, 0) and life.restart_reason == ""
    steps: list[tuple[str, str]] = []

    def restarted(why: str, operator: bool = False) -> None:
        life.start(life.next_start_at or 0.0, OPERATOR if operator else "")
        steps.append((why, life.restart_reason))

    life.exit(Exit(code=1, signal=None, at=1.0), 1.0)  # a crash: back after its backoff
    restarted("crash")
    life.kill("stalled: silent", now=2.0)
    life.exit(Exit(code=None, signal=signal.SIGKILL, at=2.0), 2.0)
    restarted("watchdog")
    life.spawn_failed(3.0, "ENOENT")
    restarted("spawn_error")
    life.kill("restart", counts_as_crash=False, now=4.0)
    life.exit(Exit(code=0, signal=None, at=4.0), 4.0)  # the RESTART action's start carries no reason
    restarted("operator")
    life.stop(5.0)
    life.exit(Exit(code=0, signal=None, at=5.0), 5.0)
    restarted("operator", operator=True)
    life.exit(Exit(code=1, signal=None, at=6.0), 6.0)  # crashed, in backoff: the operator starts it now
    restarted("operator", operator=True)
    life.exit(Exit(code=EX_CONFIG, signal=None, at=7.0, message="bad"), 7.0)
    assert life.state is State.FATAL
    restarted("operator", operator=True)
    assert [why for why, _ in steps] == [got for _, got in steps]
    assert life.restarts_by == {"crash": 1, "watchdog": 1, "spawn_error": 1, "operator": 4}
    assert sum(life.restarts_by.values()) == life.restarts


def test_a12_exit_descriptions_are_faithful() -> None:
    """exit 0, exit 3, SIGSEGV with core, SIGABRT and SIGTERM each read correctly."""
    assert describe(Exit(code=0, signal=None, at=0)) == "exited 0"
    assert describe(Exit(code=3, signal=None, at=0)) == "exited 3"
    assert describe(Exit(code=None, signal=signal.SIGSEGV, at=0, core=True)) == "killed by SIGSEGV (core dumped)"
    assert describe(Exit(code=None, signal=signal.SIGABRT, at=0)) == "killed by SIGABRT"
    assert describe(Exit(code=None, signal=signal.SIGTERM, at=0)) == "killed by SIGTERM"


def test_events_the_table_does_not_list_are_refused() -> None:
    """A READY in STOPPED or an EXIT in BACKOFF is a bug in the shell, not a silent state change."""
    assert (State.STOPPED, Event.EXIT) not in TRANSITIONS
    life = Lifecycle()
    with pytest.raises(LifecycleError):
        life.exit(Exit(code=0, signal=None, at=0), 0.0)
    assert life.ready(0.0) is State.STOPPED  # a stray ready is ignored, not a transition


def test_a_refused_exit_leaves_the_bookkeeping_as_it_was() -> None:
    """An exit fed in BACKOFF (no process there) raises and changes neither the last exit nor how it ended."""
    life = Lifecycle(rand=lambda: 0.0)
    life.start(0.0)
    crash(life, 1.0)
    before = (life.state, life.last_exit, life.ended, life.reason, life.next_start_at, list(life.moves))
    with pytest.raises(LifecycleError):
        life.exit(Exit(code=3, signal=None, at=2.0), 2.0)
    assert (life.state, life.last_exit, life.ended, life.reason, life.next_start_at, list(life.moves)) == before


def test_spawn_failure_backs_off_like_a_crash() -> None:
    """ENOENT at exec shows spawn_error with the errno and waits out a backoff."""
    life = Lifecycle(rand=lambda: 1.0)
    life.start(0.0)
    assert life.spawn_failed(0.0, "ENOENT") is State.BACKOFF
    assert life.reason == "spawn_error ENOENT" and life.next_start_at == 0.5


def test_a_child_ready_for_stable_after_is_restarted_at_once_and_crashes_in_a_row_back_off() -> None:
    """Ready 10 s: the crash restarts at once and says so; short lives in a row wait, counted, in `waiting`."""
    life = Lifecycle(policy=Policy(backoff_base=0.5, stable_after=10.0, reset_after=1e9, intensity=100), rand=lambda: 1.0)
    life.start(0.0)
    life.ready(0.5)
    crash(life, 11.0)  # ready for 10.5 s
    assert life.delays == [0.0] and life.next_start_at == 11.0
    assert life.waiting == "it had been stable: restarted at once" and life.streak == 1
    now = 11.0
    for n in range(2, 5):
        life.start(now)
        life.ready(now + 0.5)
        crash(life, now + 3.0)  # ready 2.5 s each time: a row
        assert life.streak == n  # one count per short life
        now = life.next_start_at or now
    assert life.delays == [0.0, 0.5, 1.0, 2.0]
    assert life.waiting == "4 crashes in a row: backoff 2.0s"
    life.start(now)
    assert life.waiting == ""  # starting again: nothing to wait for
    life.ready(now + 0.1)
    crash(life, now + 20.0)
    assert life.delays[-1] == 0.0 and life.streak == 1  # a stable life wipes the row


def test_the_spare_slot_follows_its_table() -> None:
    """off → warming → parked → taken (off); a death backs off and comes due; illegal events raise."""
    from supervisor.sparelife import SPARE_TRANSITIONS, SpareEvent, SpareLife, SpareLifeError, SpareState

    spare = SpareLife(base=0.5, cap=4.0, rand=lambda: 1.0)
    assert spare.take() is False  # nothing parked: the child starts cold
    assert spare.want() is True and spare.state is SpareState.WARMING
    assert spare.want() is False  # one at a time
    assert spare.parked() is SpareState.PARKED
    assert spare.take() is True
    assert _state(spare) is SpareState.OFF and spare.taken == 1
    assert spare.want() is True
    assert spare.exit(10.0, "killed by SIGKILL") is SpareState.BACKOFF
    assert spare.next_start_at == 10.5 and "killed by SIGKILL" in spare.reason
    assert not spare.due(10.4) and spare.due(10.5) and spare.state is SpareState.WARMING
    assert spare.exit(11.0, "exited 1") is SpareState.BACKOFF and spare.next_start_at == 12.0  # the next waits longer
    assert spare.want() is False and _state(spare) is SpareState.BACKOFF  # it comes when its backoff ends
    assert spare.drop() is SpareState.OFF and _next_start(spare) is None
    assert spare.exit(13.0, "exited 0") is SpareState.OFF  # a dropped spare's death changes nothing
    assert spare.parked() is SpareState.OFF  # nor does a late `parked`
    assert (SpareState.OFF, SpareEvent.TAKE) not in SPARE_TRANSITIONS
    with pytest.raises(SpareLifeError):
        spare._go(SpareEvent.PARKED)
    assert spare.spawned == 3


def test_the_table_names_fatal_for_each_way_there() -> None:
    """EX_CONFIG and the restart intensity reach FATAL through rows of the table, like any other move."""
    from supervisor.lifecycle import TRANSITIONS as T

    assert T[(State.RUNNING, Event.EXIT_CONFIG)] is State.FATAL
    assert T[(State.EXITED, Event.GIVE_UP)] is State.FATAL
    life = Lifecycle(policy=Policy(intensity=0))
    life.start(0.0)
    crash(life, 1.0)
    assert life.state is State.FATAL and list(life.moves)[-2:] == [
        (State.STARTING, Event.EXIT, State.EXITED),
        (State.EXITED, Event.GIVE_UP, State.FATAL),
    ]


_inputs = st.sampled_from(INPUTS)
_codes = st.sampled_from([0, 1, EX_CONFIG, None])


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(st.tuples(_inputs, _codes, st.booleans(), st.floats(0.0, 100.0)), max_size=40),
    intensity=st.integers(0, 3),
)
def test_every_move_the_core_makes_is_a_row_of_the_table(
    steps: list[tuple[Event, int | None, bool, float]], intensity: int
) -> None:
    """Random input sequences: each state change is a table row, and the rows chain from the old state to the new."""
    life = Lifecycle(policy=Policy(intensity=intensity, window=1e9), rand=lambda: 0.5)
    now = 0.0
    for event, code, flag, dt in steps:
        now += dt
        before = life.state
        life.moves.clear()  # keep only this call's moves
        ex = Exit(code=code, signal=None if code is not None else 9, at=now, requested=before is State.STOPPING)
        try:
            actions = life.handle(event, now, ex=ex, reason="heartbeat", counts_as_crash=flag)
        except LifecycleError:
            assert (before, event) not in TRANSITIONS or event is Event.EXIT
            assert life.state is before and not life.moves  # a refusal changes nothing
            continue
        made = list(life.moves)
        assert all(TRANSITIONS.get((a, e)) is b for a, e, b in made), made
        if made:
            assert made[0][0] is before and made[-1][2] is life.state
            assert all(x[2] is y[0] for x, y in itertools.pairwise(made))
        else:
            assert life.state is before and (before, event) in IGNORED and actions == []


def test_the_spare_slot_says_what_its_shell_does() -> None:
    """Each event's actions, as `Spare._obey` carries them out: a want arms the delay and its end spawns; a death
    schedules the next; parking is reported; a take hands the process over; a drop cancels and terminates."""
    from supervisor.sparelife import SpareAction as A
    from supervisor.sparelife import SpareEvent as E
    from supervisor.sparelife import SpareLife, SpareState

    spare = SpareLife(base=0.5, cap=4.0, rand=lambda: 1.0)
    assert spare.handle(E.WANT, 0.0) == [A.ARM] and _state(spare) is SpareState.OFF  # nothing yet: the delay first
    assert spare.handle(E.WARM, 0.5) == [A.SPAWN] and _state(spare) is SpareState.WARMING
    assert spare.handle(E.WANT, 0.6) == [] and spare.handle(E.WARM, 0.6) == []  # one at a time
    assert spare.handle(E.PARKED, 1.0) == [A.REPORT]
    assert spare.handle(E.PARKED, 1.1) == []  # said twice, reported once
    assert spare.handle(E.TAKE, 2.0) == [A.HAND_OVER] and _state(spare) is SpareState.OFF
    spare.handle(E.WANT, 3.0)
    spare.handle(E.WARM, 3.5)
    assert spare.handle(E.EXIT, 4.0, how="exited 1") == [A.SCHEDULE] and _next_start(spare) == 4.5
    assert spare.handle(E.WANT, 4.1) == [A.SCHEDULE]  # the child is back: the backoff's end is still the time
    assert spare.handle(E.DUE, 4.4) == [] and spare.handle(E.DUE, 4.5) == [A.SPAWN]
    assert spare.handle(E.DROP, 5.0) == [A.UNSCHEDULE, A.TERMINATE] and _state(spare) is SpareState.OFF
