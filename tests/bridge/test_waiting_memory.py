"""What the bridge holds per waiting message is a small index entry, not the turn (issue 25 item 1: ≤ 2 kB), and
a message buffered for a catch-up turn is held the same way: one record, its journal entry (issue 28)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable, Sequence

from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import GUILD, PERSON, Harness, running
from tests.bridge.test_e2e_bounds import held_until
from tests.bridge.test_e2e_turns import addressed

ROOMS = tuple(str(400 + i) for i in range(60))
PER_ROOM = 5
BUDGET = 2048  # bytes per waiting message, everything the bridge allocates for it


def bridge_bytes(stats: list[tracemalloc.StatisticDiff]) -> int:
    """What the bridge allocated (the fake Discord's own records, in the same process, are not the bridge's)."""
    return sum(s.size_diff for s in stats if not any(
        "fake_discord" in f.filename or "/tests/" in f.filename for f in s.traceback))


async def allocated_per_message(h: Harness, rooms: Sequence[str], per_room: int, held: Callable[[], int]) -> float:
    """Send ``per_room`` messages to each of ``rooms``; once ``held()`` counts them all, the bridge's allocations
    since the first one, per message."""
    gc.collect()
    tracemalloc.start(12)
    try:
        before = tracemalloc.take_snapshot()
        for k in range(per_room):
            for room in rooms:
                await h.fake.message(room, f"a question about the match, number {k}", author_id=PERSON)
        count = per_room * len(rooms)
        await h.until(lambda: held() == count, timeout=60)
        gc.collect()
        stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
    finally:
        tracemalloc.stop()
    return bridge_bytes(stats) / count


def test_a_waiting_message_costs_the_bridge_under_two_kilobytes(env: dict[str, str]) -> None:
    """300 messages in 60 rooms wait behind one held turn: the bridge's allocations grow by under 2 kB a message
    (the fake Discord's own records, in the same process, are not the bridge's and are left out)."""
    release = asyncio.Event()
    fake = FakeDiscord(guilds={GUILD: ["399", *ROOMS]})

    async def main() -> None:
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "1"}, script=held_until(release), fake=fake) as h:
            await h.fake.message("399", "the turn that holds the only slot", author_id=PERSON)
            await h.service.wait_submits(1)
            per_message = await allocated_per_message(h, ROOMS, PER_ROOM, lambda: len(h.app.bridge.waiting))
            assert per_message < BUDGET, f"{per_message:.0f} B per waiting message"
            release.set()
            await h.until(lambda: len(h.app.bridge.waiting) == 0, timeout=60)

    asyncio.run(main())


def test_a_buffered_message_costs_the_bridge_under_two_kilobytes(env: dict[str, str]) -> None:
    """300 messages buffered for catch-up turns in 20 drifted rooms (15 each, under the backlog's 20): the bridge's
    allocations grow by under 2 kB a message. The backlog holds ids; the payload is the journal entry's alone."""
    rooms = ROOMS[:20]
    per_room = 15
    fake = FakeDiscord(guilds={GUILD: list(rooms)})

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text:
            return TurnResult.settled("hi!", turn_id="t")
        return TurnResult.silent(turn_id="t")

    async def main() -> None:
        async with running(env, script=script, clock=FakeClock(), overrides=addressed(declines=1), fake=fake) as h:
            for room in rooms:  # answered once, then one decline: every room drifts
                for text in ("hey clankie", "meh"):
                    m = await h.fake.message(room, text, author_id=PERSON)
                    await h.until(lambda m=m: h.outcomes(str(m["id"]))[-1:] in (["settled"], ["silent"]))  # type: ignore[misc]  # bound per pass
            per_message = await allocated_per_message(h, rooms, per_room, lambda: h.app.bridge.pending_triggers)
            assert per_message < BUDGET, f"{per_message:.0f} B per buffered message"

    asyncio.run(main())
