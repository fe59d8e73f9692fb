"""The one polling helper: returns the first truthy look, fails naming what it waited for, naps as told."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.polling import until, until_probe, until_sync


def test_until_returns_the_first_truthy_value() -> None:
    looks = itertools.count()

    async def main() -> int:
        return await until(lambda: n if (n := next(looks)) >= 3 else None, what="the third look")

    assert asyncio.run(main()) == 3


def test_until_fails_naming_what_it_waited_for() -> None:
    async def main() -> None:
        await until(lambda: None, timeout=0.05, what="a receipt")

    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for a receipt"):
        asyncio.run(main())


def test_a_description_given_as_a_function_shows_the_last_state_seen() -> None:
    seen: list[int] = []

    async def main() -> None:
        await until(lambda: seen.append(len(seen)), timeout=0.05, what=lambda: f"five looks, saw {len(seen)}")

    with pytest.raises(AssertionError, match=r"waiting for five looks, saw [1-9]"):
        asyncio.run(main())


def test_until_probe_awaits_each_look() -> None:
    heartbeats = iter(["up", "up", "down"])

    async def main() -> str:
        async def next_beat() -> str | None:
            await asyncio.sleep(0)
            beat = next(heartbeats)
            return beat if beat == "down" else None

        return await until_probe(next_beat, what="a heartbeat saying down", step=0)

    assert asyncio.run(main()) == "down"


def test_a_nap_ends_as_soon_as_the_state_changed() -> None:
    """With a change event the next look follows the change, not the end of a long step."""

    async def main() -> None:
        changed = asyncio.Event()
        state: list[str] = []

        async def nap(step: float) -> None:
            await changed.wait()
            changed.clear()

        async def change() -> None:
            await asyncio.sleep(0)
            state.append("posted")
            changed.set()

        task = asyncio.create_task(change())
        assert await until(lambda: state, timeout=60, what="the post", step=60, nap=nap) == ["posted"]
        await task

    asyncio.run(main())


def test_until_sync_polls_outside_an_event_loop() -> None:
    looks = itertools.count()
    assert until_sync(lambda: n if (n := next(looks)) >= 2 else None, what="the second look", step=0.001) == 2
    with pytest.raises(AssertionError, match=r"timed out after 0.01s waiting for nothing"):
        until_sync(lambda: None, timeout=0.01, what="nothing", step=0.001)
