"""The task set: holds each background task until it ends, refuses past its bound, closes by cancelling and waiting."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging

import pytest

from clankie.tasks import TaskSet, TaskSetFull


async def _forever(started: asyncio.Event | None = None) -> None:
    if started is not None:
        started.set()
    await asyncio.Event().wait()


async def _secret_failure() -> None:
    await asyncio.sleep(0)
    raise RuntimeError("the words a person said")


def test_a_task_is_held_while_it_runs_and_forgotten_when_it_ends() -> None:
    async def main() -> None:
        tasks = TaskSet("sends", limit=4)
        go = asyncio.Event()
        task = tasks.spawn(go.wait(), name="send-1")
        assert len(tasks) == 1 and list(tasks) == [task] and task.get_name() == "send-1"
        go.set()
        await task
        assert len(tasks) == 0 and not tasks

    asyncio.run(main())


def test_a_held_task_outlives_every_other_reference() -> None:
    """The loop holds tasks weakly; the set's reference is what keeps an unreferenced one running to its end."""
    done: list[bool] = []

    async def work(go: asyncio.Event) -> None:
        await go.wait()
        done.append(True)

    async def main() -> None:
        tasks = TaskSet("sends", limit=4)
        go = asyncio.Event()
        tasks.spawn(work(go))
        gc.collect()
        go.set()
        await tasks.join()
        assert done == [True]

    asyncio.run(main())


def test_at_the_bound_spawn_refuses_and_closes_the_coroutine_unrun() -> None:
    async def main() -> None:
        tasks = TaskSet("handlers", limit=2)
        tasks.spawn(_forever())
        tasks.spawn(_forever())
        assert tasks.full
        refused = _forever()
        with pytest.raises(TaskSetFull) as caught:
            tasks.spawn(refused)
        assert caught.value.code == "task_set_full" and caught.value.limit == 2
        assert inspect.getcoroutinestate(refused) == inspect.CORO_CLOSED  # closed: no "never awaited" warning, nothing ran
        assert len(tasks) == 2
        await tasks.aclose()

    asyncio.run(main())


def test_a_slot_frees_as_soon_as_a_task_ends() -> None:
    async def main() -> None:
        tasks = TaskSet("handlers", limit=1)
        go = asyncio.Event()
        first = tasks.spawn(go.wait())
        assert tasks.full
        go.set()
        await first
        assert len(tasks) == 0
        tasks.spawn(_forever())
        assert len(tasks) == 1
        await tasks.aclose()

    asyncio.run(main())


def test_aclose_cancels_every_task_and_waits_until_each_has_ended() -> None:
    async def main() -> None:
        tasks = TaskSet("watchers", limit=8)
        started = [asyncio.Event() for _ in range(3)]
        held = [tasks.spawn(_forever(s)) for s in started]
        for s in started:
            await s.wait()
        await tasks.aclose()
        assert all(t.cancelled() for t in held)
        assert len(tasks) == 0

    asyncio.run(main())


def test_a_task_that_shields_itself_from_cancel_is_waited_for_no_longer_than_the_timeout() -> None:
    async def stubborn(release: asyncio.Event) -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    async def main() -> None:
        tasks = TaskSet("background", limit=2)
        release = asyncio.Event()
        task = tasks.spawn(stubborn(release))
        await asyncio.sleep(0)
        await tasks.aclose(timeout=0.05)
        assert not task.done() and len(tasks) == 1  # still held: never dropped while it runs
        release.set()
        await task
        assert len(tasks) == 0

    asyncio.run(main())


def test_join_waits_for_every_task_without_cancelling_any() -> None:
    async def main() -> None:
        tasks = TaskSet("closing", limit=4)
        go = asyncio.Event()
        held = [tasks.spawn(go.wait()) for _ in range(2)]
        waiting = asyncio.ensure_future(tasks.join())
        await asyncio.sleep(0)
        assert not waiting.done()
        go.set()
        await waiting
        assert all(t.done() and not t.cancelled() for t in held)

    asyncio.run(main())


def test_cancel_without_waiting_leaves_the_tasks_to_end_on_their_own() -> None:
    async def main() -> None:
        tasks = TaskSet("handlers", limit=2)
        started = asyncio.Event()
        task = tasks.spawn(_forever(started))
        await started.wait()
        tasks.cancel()
        assert not task.done()  # cancel asks; the task ends on its next step
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(tasks) == 0

    asyncio.run(main())


def test_a_set_is_used_again_after_aclose() -> None:
    async def main() -> None:
        tasks = TaskSet("closing", limit=1)
        tasks.spawn(_forever())
        await tasks.aclose()
        go = asyncio.Event()
        go.set()
        await tasks.spawn(go.wait())
        assert len(tasks) == 0

    asyncio.run(main())


def test_a_failed_task_is_logged_once_by_name_and_type_never_by_its_message(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        tasks = TaskSet("sends", limit=2)
        task = tasks.spawn(_secret_failure(), name="typing")
        await tasks.join()
        assert task.done() and len(tasks) == 0

    with caplog.at_level(logging.ERROR, logger="clankie.tasks"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "clankie.tasks"]
    assert lines == ["sends: task typing failed with RuntimeError"]
    assert "the words a person said" not in caplog.text  # nor did asyncio log it as never retrieved


def test_a_cancelled_task_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        tasks = TaskSet("sends", limit=2)
        tasks.spawn(_forever())
        await asyncio.sleep(0)
        await tasks.aclose()
        assert tasks.failed == 0

    with caplog.at_level(logging.ERROR, logger="clankie.tasks"):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.name == "clankie.tasks"]


def test_an_eager_task_that_ends_at_once_is_never_held() -> None:
    """On 3.12+ an eager task that needs no waiting ends inside spawn; before 3.12 it is held until its first step."""

    async def answer() -> int:
        return 42

    async def main() -> None:
        tasks = TaskSet("handlers", limit=1)
        task = tasks.spawn(answer(), eager=True)
        assert await task == 42
        assert len(tasks) == 0 and not tasks.full

    asyncio.run(main())


def test_a_set_holds_at_least_one_task() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TaskSet("nothing", limit=0)
