"""The process shell obeys its lifecycle's actions: real child processes over the real link, a fake clock.

Each test names the action it watches being carried out (or forgotten);
time moves only when the test advances the clock.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

from clankie import settings as settings_mod
from clankie.testing.clock import FakeClock
from supervisor.lifecycle import Event, Policy, State
from supervisor.process import Child
from supervisor.spec import ChildSpec
from supervisor.tree import Tree
from tests.polling import until
from tests.supervisor.harness import FIXTURE

BACKOFF = 5.0


def _state(child: Child) -> State:
    """Read afresh: the loop moves it between awaits."""
    return child.life.state


async def settle() -> None:
    """Let every task the last step woke run to its next await."""
    for _ in range(10):
        await asyncio.sleep(0)


def run_child(env: dict[str, str], args: tuple[str, ...], body: Callable[[Child, FakeClock], Awaitable[None]]) -> None:
    async def go() -> None:
        clock = FakeClock()
        settings = settings_mod.load(env, heartbeat_timeout_seconds=1e6, stall_tick_seconds=3600)
        spec = ChildSpec(name="kid", argv=(sys.executable, str(FIXTURE), *args), stop_timeout=2.0,
                         policy=Policy(backoff_base=BACKOFF, backoff_cap=BACKOFF, intensity=100))
        tree = Tree(settings, [spec], clock=clock, env=env, subreaper=False, forward_fd=None, rand=lambda: 1.0)
        done = asyncio.Event()
        task = asyncio.create_task(tree.run(done))
        try:
            await body(tree.children["kid"], clock)
        finally:
            done.set()
            await asyncio.wait_for(task, 10)

    asyncio.run(go())


def test_the_end_of_a_backoff_starts_the_child_again(env: dict[str, str]) -> None:
    """SCHEDULE: a crash waits its backoff on the clock, and when the clock passes it the child is started."""

    async def body(child: Child, clock: FakeClock) -> None:
        await until(lambda: _state(child) is State.BACKOFF, what="the first crash")
        assert child.pid is None and child.life.next_start_at == clock.monotonic() + BACKOFF
        clock.advance(BACKOFF)
        await until(lambda: child.life.restarts == 1 and _state(child) is State.BACKOFF, what="started and crashed again")

    run_child(env, ("--exit-now",), body)


def test_a_stop_during_a_backoff_forgets_the_scheduled_start(env: dict[str, str]) -> None:
    """UNSCHEDULE: a child stopped while it waits out a backoff is not started when the backoff would have ended."""

    async def body(child: Child, clock: FakeClock) -> None:
        await until(lambda: _state(child) is State.BACKOFF, what="the first crash")
        await child.stop()
        clock.advance(BACKOFF * 3)
        await settle()
        assert _state(child) is State.STOPPED and child.pid is None and child.life.restarts == 0
        assert list(child.life.moves)[-1] == (State.BACKOFF, Event.STOP, State.STOPPED)

    run_child(env, ("--exit-now",), body)


def test_an_operator_restart_starts_a_fatal_child_now(env: dict[str, str]) -> None:
    """A child that exited 78 waits for the operator; `restart` (KILL, ignored with nothing to kill; then START)
    starts it at once, with no clock moved."""

    async def body(child: Child, clock: FakeClock) -> None:
        await until(lambda: _state(child) is State.FATAL, what="the configuration error")
        assert child.life.reason == "config_error: CLANKIE_X: bad" and child.life.next_start_at is None
        child.restart()
        await until(lambda: child.life.restarts == 1 and _state(child) is State.FATAL, what="started and refused again")
        assert (State.FATAL, Event.START, State.STARTING) in child.life.moves

    run_child(env, ("--config-error", "CLANKIE_X: bad"), body)


def test_an_operator_restart_of_a_running_child_is_down_and_straight_up(env: dict[str, str]) -> None:
    """TERMINATE, then the exit's RESTART: a new process at once, no backoff given, no crash counted."""

    async def body(child: Child, clock: FakeClock) -> None:
        await until(lambda: _state(child) is State.RUNNING, what="ready")
        first = child.pid
        child.restart()
        assert _state(child) is State.STOPPING
        await until(lambda: _state(child) is State.RUNNING and child.pid not in (None, first), what="the new process")
        assert child.life.delays == [] and child.life.streak == 0 and child.life.ended == "exited 0"
        assert (State.STOPPING, Event.EXIT, State.STOPPED) in child.life.moves

    run_child(env, (), body)
