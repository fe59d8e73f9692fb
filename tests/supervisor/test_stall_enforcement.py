"""The stall watchdog enforced on a real child over the real link, with a fake clock."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from clankie import settings as settings_mod
from clankie.testing.clock import FakeClock
from supervisor.lifecycle import Policy, State
from supervisor.spec import ChildSpec
from supervisor.tree import Tree
from tests.polling import until
from tests.supervisor.harness import FIXTURE, events


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


START_BEATS = 2
"""A child's link beats once as it opens (its beat loop's first) and once in ``ready``, in either order, and then, at an
interval of an hour, no more. Both are waited for: one that landed while a test moves the clock would stamp the run's
age again, later, and a window the test counts to 300 s would not be crossed where it expects (seen once on a loaded
machine: no abort at "300 s", the run aged 1 s at some tick between)."""


def make_tree(env: dict[str, str], clock: FakeClock, ev: Path, abort: str) -> Tree:
    settings = settings_mod.load(
        env, stall_seconds=300, stall_tick_seconds=5, stall_abort_grace_seconds=15, heartbeat_timeout_seconds=1e6
    )
    spec = ChildSpec(
        name="service",
        argv=(sys.executable, str(FIXTURE), "--run-age", "1", "--abort", abort, "--events", str(ev)),
        heartbeat_seconds=3600,  # the two start beats and no more (START_BEATS): the run's age is known exactly
        watch_stalls=True,
        proxy=True,
        stop_timeout=2.0,
        policy=Policy(backoff_base=1.0, backoff_cap=1.0),
    )
    return Tree(settings, [spec], clock=clock, env=env, subreaper=False, forward_fd=None, rand=lambda: 1.0)


def run_tree(env: dict[str, str], tmp_path: Path, abort: str, body: Callable[[Tree, FakeClock, Path], Awaitable[None]]) -> None:
    async def go() -> None:
        clock = FakeClock()
        ev = tmp_path / "events"
        tree = make_tree(env, clock, ev, abort)
        done = asyncio.Event()
        task = asyncio.create_task(tree.run(done))
        child = tree.children["service"]
        try:
            await until(lambda: child.life.state is State.RUNNING and child.last_heartbeat is not None
                        and child.last_heartbeat.seq >= START_BEATS, what="service ready, both of its start beats in")
            await body(tree, clock, ev)
        finally:
            done.set()
            await asyncio.wait_for(task, 10)

    asyncio.run(go())


def test_a_suspend_between_ticks_aborts_the_stalled_run_on_the_next_tick_once(env: dict[str, str], tmp_path: Path) -> None:
    """After an hour of host suspend the service is told abort_run(stalled) on the next tick, and only once."""

    async def body(tree: Tree, clock: FakeClock, ev: Path) -> None:
        clock.advance(5)
        await settle()
        assert events(ev, "REQUEST-abort_run") == []
        clock.suspend(3600)
        clock.advance(5)
        await until(lambda: events(ev, "ABORTED"), what="abort to reach the child")
        for _ in range(5):
            clock.advance(5)
            await settle()
        await asyncio.sleep(0.1)  # sleep: a second abort must not reach the child in this window
        assert len(events(ev, "REQUEST-abort_run")) == 1
        assert tree.children["service"].life.state is State.RUNNING  # confirmed: no kill

    run_tree(env, tmp_path, "yes", body)


def test_a_run_silent_past_the_window_is_aborted_on_the_tick_that_crosses_it(env: dict[str, str], tmp_path: Path) -> None:
    """No event for 300 s (plain time, no suspend): abort on the first tick past the window."""

    async def body(tree: Tree, clock: FakeClock, ev: Path) -> None:
        for _ in range(59):  # 295 s of ticks: age 296
            clock.advance(5)
            await settle()
        assert events(ev, "REQUEST-abort_run") == []
        clock.advance(5)
        await until(lambda: events(ev, "ABORTED"), what="abort at 300 s")

    run_tree(env, tmp_path, "yes", body)


def test_an_unconfirmed_abort_restarts_the_service_cold(env: dict[str, str], tmp_path: Path) -> None:
    """A service that will not abort the stalled run is killed after the grace and comes back as a new process."""

    async def body(tree: Tree, clock: FakeClock, ev: Path) -> None:
        child = tree.children["service"]
        first_pid = child.pid
        clock.suspend(400)
        clock.advance(5)
        await until(lambda: events(ev, "REQUEST-abort_run"), what="abort request")
        clock.advance(5)
        await settle()
        assert child.pid == first_pid
        clock.advance(15)  # the grace runs out
        await settle()
        await until(lambda: child.life.state is State.BACKOFF, what="service killed")
        assert child.life.reason.startswith("stalled")
        clock.advance(1)  # backoff (1 s) on the fake clock
        await until(lambda: child.life.state is State.RUNNING and child.pid != first_pid, what="service back")
        assert child.life.restarts == 1

    run_tree(env, tmp_path, "no", body)


def test_a_pending_abort_is_held_by_the_tree_and_cancelled_at_shutdown(env: dict[str, str], tmp_path: Path) -> None:
    """The abort_run call in flight is referenced by the tree (not garbage) and ends with the shutdown."""
    held: list[asyncio.Task[object]] = []

    async def body(tree: Tree, clock: FakeClock, ev: Path) -> None:
        clock.suspend(400)
        clock.advance(5)
        await until(lambda: events(ev, "REQUEST-abort_run"), what="abort request")
        held.extend(t for t in tree._background if t.get_name() == "abort-run-1")
        assert len(held) == 1 and not held[0].done()

    async def go() -> None:
        clock = FakeClock()
        ev = tmp_path / "events"
        tree = make_tree(env, clock, ev, "hang")
        done = asyncio.Event()
        task = asyncio.create_task(tree.run(done))
        child = tree.children["service"]
        await until(lambda: child.life.state is State.RUNNING and child.last_heartbeat is not None, what="service ready")
        await body(tree, clock, ev)
        done.set()
        await asyncio.wait_for(task, 10)
        assert held[0].done() and not tree._background

    asyncio.run(go())
