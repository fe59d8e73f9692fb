"""A restarted bridge: what it resumes, what it reads back from Discord, and where it stops."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from bridge.journal import Journal
from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, CHAN2, GUILD, OTHER_CHAN, OTHER_GUILD, PERSON, Harness, running


def settled(h: Harness, delivery_id: str) -> bool:
    return "settled" in h.outcomes(delivery_id)

def fake() -> FakeDiscord:
    return FakeDiscord(guilds={GUILD: [CHAN, CHAN2], OTHER_GUILD: [OTHER_CHAN]})


async def one_answered_message_per_room(env: dict[str, str], discord: FakeDiscord) -> None:
    """A first bridge life: one message in each room, answered (the journal now knows both rooms)."""
    async with running(env, fake=discord) as h:
        for room in (CHAN, CHAN2):
            m = await discord.message(room, f"first in {room}", author_id=PERSON)
            await h.until(functools.partial(settled, h, str(m["id"])))


async def while_down(discord: FakeDiscord, counts: dict[str, int]) -> list[dict[str, Any]]:
    """Messages people send while no bridge holds a gateway session (stored, dispatched to nobody)."""
    assert discord.connected == 0
    return [await discord.message(room, f"missed {room}-{i}", author_id=PERSON)
            for room, n in counts.items() for i in range(n)]


def answered_texts(h: Harness) -> list[str]:
    return [s.trigger.text for s in h.service.submits]


def test_messages_sent_while_down_are_admitted_oldest_first_and_once(env: dict[str, str]) -> None:
    """Each room is read after the newest message it had seen; duplicates of what was answered are not re-run."""

    async def main() -> None:
        discord = fake()
        await one_answered_message_per_room(env, discord)
        missed = await while_down(discord, {CHAN: 3, CHAN2: 2})
        async with running(env, fake=discord) as h:
            await h.until(lambda: all("settled" in h.outcomes(m["id"]) for m in missed))
            assert h.app.recovered.admitted == 5 and h.app.recovered.capped == 0
            assert answered_texts(h) == [m["content"] for m in missed if m["channel_id"] == CHAN2] + \
                   [m["content"] for m in missed if m["channel_id"] == CHAN]
            await discord.invalidate_sessions()  # a new session (not a resume) reads history again: nothing new
            await h.until(lambda: discord.readies >= 3)
            await h.until(lambda: h.app._recovering is not None and h.app._recovering.done())
            assert len(h.service.submits) == 5

    asyncio.run(main())


@pytest.mark.parametrize(
    ("overrides", "admitted"),
    [
        ({"CLANKIE_RECOVERY_MAX_ROOMS": "1"}, 2),  # only the most recently active room is read
        ({"CLANKIE_RECOVERY_MAX_MESSAGES": "3"}, 3),  # CHAN2's two, then the oldest of CHAN's three
    ],
)
def test_recovery_stops_at_its_caps_and_says_so(env: dict[str, str], overrides: dict[str, str], admitted: int) -> None:
    """Rooms and messages read per recovery are capped by settings; the cut is counted, not silent."""

    async def main() -> None:
        discord = fake()
        await one_answered_message_per_room(env, discord)
        missed = await while_down(discord, {CHAN: 3, CHAN2: 2})
        async with running(env, fake=discord, overrides=overrides) as h:
            await h.until(lambda: h.app._recovering is not None and h.app._recovering.done())
            await h.until(lambda: len(h.service.submits) == admitted)
            assert h.app.recovered.admitted == admitted and h.app.recovered.capped >= 1
            assert answered_texts(h)[:2] == [m["content"] for m in missed if m["channel_id"] == CHAN2][:admitted]

    asyncio.run(main())


def test_an_open_delivery_past_the_horizon_is_expired_not_answered_late(env: dict[str, str]) -> None:
    """A delivery the bridge died holding, found older than the horizon, gets an `expired` receipt and no turn."""
    clock = FakeClock()
    hang = asyncio.Event()

    async def never(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await hang.wait()
        return TurnResult.silent(turn_id="t")

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord, clock=clock, script=never) as h:
            m = await discord.message(CHAN, "are you there", author_id=PERSON)
            await h.service.wait_submits(1)
        hang.set()
        clock.advance(901.0)  # past the 900 s default horizon
        async with running(env, fake=discord, clock=clock) as h2:
            await h2.until(lambda: "expired" in h2.outcomes(m["id"]))
            assert h2.outcomes(m["id"]) == ["accepted", "expired"]
            assert h2.service.submits == [] and discord.posts_in(CHAN) == []
            assert h2.app.bridge.turns.counts().expired == 1
        assert Journal(h2.state_dir, retention=3600.0).state.open_entries() == []

    asyncio.run(main())


def test_an_open_delivery_inside_the_horizon_is_resubmitted_by_its_id(env: dict[str, str]) -> None:
    """The bridge died holding a turn: its successor submits the same record again and posts the one reply."""
    hang = asyncio.Event()

    async def never(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await hang.wait()
        return TurnResult.silent(turn_id="t")

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord, script=never) as h:
            m = await discord.message(CHAN, "still there?", author_id=PERSON)
            await h.service.wait_submits(1)
            first = h.service.submits[0]
        hang.set()
        async with running(env, fake=discord) as h2:
            await h2.until(lambda: "settled" in h2.outcomes(m["id"]))
            assert h2.service.submits == [first]  # the exact record: the service's idempotency holds
            assert h2.outcomes(m["id"]) == ["accepted", "recovered", "settled"]
            assert len(discord.posts_in(CHAN)) == 1

    asyncio.run(main())


def test_a_room_never_heard_from_is_read_when_discord_says_it_has_news(env: dict[str, str]) -> None:
    """A first message into an admitted room during an outage is found: the gateway names the room's newest id."""

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord) as h:
            m = await discord.message(CHAN, "hello", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
        first = await while_down(discord, {CHAN2: 1})
        outside = await discord.message(OTHER_CHAN, "not admitted here", author_id=PERSON)
        async with running(env, fake=discord) as h2:
            await h2.until(lambda: "settled" in h2.outcomes(first[0]["id"]))
            await h2.until(lambda: h2.app._recovering is not None and h2.app._recovering.done())
            assert h2.app.recovered.rooms == 1  # CHAN had nothing new; CHAN2 had; the other guild is not ours
            assert h2.outcomes(outside["id"]) == []

    asyncio.run(main())


def test_a_gap_the_last_bridge_never_read_back_is_read_by_the_next(env: dict[str, str]) -> None:
    """A bridge that dies before its recovery ran leaves its gap open in the journal; its successor reads it."""

    async def main() -> None:
        discord = fake()
        await one_answered_message_per_room(env, discord)
        missed = await while_down(discord, {CHAN: 1})
        discord.gateway_open.clear()  # this life never gets a session, so it never reads history back
        async with running(env, fake=discord, wait_connected=False) as h:
            await h.until(lambda: h.app.journal.state.quiet_since() is not None)
        discord.gateway_open.set()
        async with running(env, fake=discord) as h2:
            await h2.until(lambda: "settled" in h2.outcomes(missed[0]["id"]))
            await h2.until(lambda: h2.app.journal.state.quiet_since() is None)

    asyncio.run(main())


def test_a_message_already_answered_is_not_answered_again_when_the_journal_lost_it(env: dict[str, str]) -> None:
    """If a power cut took the journal's newest lines, history still shows our reply: the message is not re-run."""

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord) as h:
            m = await discord.message(CHAN, "answered once", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(m["id"]))
            journal = h.app.journal.path
        journal.unlink()  # everything the journal knew is gone
        async with running(env, fake=discord) as h2:
            await h2.until(lambda: h2.app._recovering is not None and h2.app._recovering.done())
            assert h2.app.recovered.answered_before == 1
            assert h2.service.submits == [] and len(discord.posts_in(CHAN)) == 1

    asyncio.run(main())


def test_ids_the_journal_let_go_are_still_known_after_a_restart(env: dict[str, str]) -> None:
    """A closed delivery leaves the journal once it is older than the catch-up horizon, but its id is remembered for
    the whole retention: the compaction saved the de-duplication memory (``seen.bin``), and the next bridge reads
    it back, so Discord handing the message over again is still ``deduplicated``."""
    clock = FakeClock()

    async def main() -> None:
        discord = fake()
        async with running(env, fake=discord, clock=clock) as h:
            m = await discord.message(CHAN, "remember me", author_id=PERSON)
            await h.until(functools.partial(settled, h, str(m["id"])))
        clock.advance(1000.0)  # past the 900 s horizon, within the 7 h retention
        async with running(env, fake=discord, clock=clock) as h:  # its start compacts: the entry goes, the id is saved
            assert str(m["id"]) not in h.app.journal.state.entries and h.app.ingress.seen(str(m["id"]))
            assert (h.state_dir / "bridge" / "seen.bin").stat().st_mode & 0o777 == 0o600
        async with running(env, fake=discord, clock=clock) as h:
            assert str(m["id"]) not in h.app.journal.state.entries and h.app.ingress.seen(str(m["id"]))
            await discord.message(CHAN, "remember me", author_id=PERSON, message_id=str(m["id"]))
            await h.until(lambda: "deduplicated" in h.outcomes(str(m["id"])))
            assert h.service.submits == []

    asyncio.run(main())
