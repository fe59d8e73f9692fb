"""What the bridge holds per waiting message is a small index entry, not the turn (issue 25 item 1: ≤ 2 kB)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import GUILD, PERSON, running
from tests.bridge.test_e2e_bounds import held_until

ROOMS = tuple(str(400 + i) for i in range(60))
PER_ROOM = 5
BUDGET = 2048  # bytes per waiting message, everything the bridge allocates for it


def test_a_waiting_message_costs_the_bridge_under_two_kilobytes(env: dict[str, str]) -> None:
    """300 messages in 60 rooms wait behind one held turn: the bridge's allocations grow by under 2 kB a message
    (the fake Discord's own records, in the same process, are not the bridge's and are left out)."""
    release = asyncio.Event()
    fake = FakeDiscord(guilds={GUILD: ["399", *ROOMS]})

    async def main() -> None:
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "1"}, script=held_until(release), fake=fake) as h:
            await h.fake.message("399", "the turn that holds the only slot", author_id=PERSON)
            await h.service.wait_submits(1)
            gc.collect()
            tracemalloc.start(12)
            try:
                before = tracemalloc.take_snapshot()
                for k in range(PER_ROOM):
                    for room in ROOMS:
                        await h.fake.message(room, f"a question about the match, number {k}", author_id=PERSON)
                count = PER_ROOM * len(ROOMS)
                await h.until(lambda: len(h.app.bridge.waiting) == count, timeout=60)
                gc.collect()
                stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
            finally:
                tracemalloc.stop()
            mine = sum(s.size_diff for s in stats if not any(
                "fake_discord" in f.filename or "/tests/" in f.filename for f in s.traceback))
            assert mine / count < BUDGET, f"{mine / count:.0f} B per waiting message"
            release.set()
            await h.until(lambda: len(h.app.bridge.waiting) == 0, timeout=60)

    asyncio.run(main())
