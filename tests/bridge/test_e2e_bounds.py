"""The bridge at its in-memory bounds, end to end (docs/operations.md, "Memory and connections and their bounds")."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from annotated_types import Ge

from bridge.admission import BACKLOG_FULL
from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from clankie.settings import Settings
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, CHAN2, GUILD, PERSON, Harness, Script, running
from tests.bridge.test_e2e_turns import addressed, speak
from tests.replies import CLOSING


def held_until(release: asyncio.Event) -> Script:
    """A service that holds every turn until ``release`` is set, then settles it."""

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await release.wait()
        return TurnResult.settled(f"done {sub.delivery_id}", turn_id=f"turn-{sub.delivery_id}")

    return script


ROOMS = tuple(str(300 + i) for i in range(12))


def closing(h: Harness, delivery_id: str) -> list[str]:
    return [o for o in h.outcomes(delivery_id) if o in CLOSING]


def test_a_burst_over_the_turn_cap_waits_and_every_message_is_answered(env: dict[str, str]) -> None:
    """Twelve rooms at once, and a second and third message in one of them, with two turn slots held: nothing is
    dropped; the rest wait (a ``waiting`` receipt, the id queued, the payload in the journal only); as slots free,
    rooms are served in the order they came, and a room's waiting messages are one turn for the newest."""
    release = asyncio.Event()
    fake = FakeDiscord(guilds={GUILD: list(ROOMS)})

    async def main() -> None:
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "2"}, script=held_until(release), fake=fake) as h:
            sent = await asyncio.gather(*(h.fake.message(room, f"hello {room}", author_id=PERSON) for room in ROOMS))
            ids = [str(m["id"]) for m in sent]
            await h.service.wait_submits(2)
            await h.until(lambda: sum(o == "waiting" for r in h.receipts() for o in [r["outcome"]]) == 10)
            busy = h.service.submits[1].room.channel_id  # a room whose turn holds a slot gets two more
            more = [str((await h.fake.message(busy, f"and {k}", author_id=PERSON))["id"]) for k in (2, 3)]
            await h.until(lambda: all("waiting" in h.outcomes(m) for m in more))
            bridge = h.app.bridge
            assert (len(bridge.waiting), bridge.waiting.rooms, bridge.turns_in_flight) == (12, 11, 2)
            assert bridge.pending_triggers == 0  # a waiting message is its journal entry and an id in the queue
            report = h.app.heartbeat().report
            assert (report["waiting"], report["waiting_rooms"], report["dropped"]) == (12, 11, 0)
            assert "; waiting: 12 in 11 rooms, turns 2/2" in h.app.heartbeat().detail  # what clankiectl status shows
            assert not h.fake.reactions
            release.set()
            await h.until(lambda: all(closing(h, m) for m in ids + more), timeout=30)
            assert {m: closing(h, m) for m in ids} == {m: ["settled"] for m in ids}
            assert [closing(h, m) for m in more] == [["absorbed"], ["settled"]]
            order = [s.room.channel_id for s in h.service.submits]
            assert len(order) == 13 and order[2:12] == [r for r in ROOMS if r not in order[:2]]  # first come, first served
            joined = h.service.submits[-1]
            assert joined.delivery_id == more[1] and [m.id for m in joined.backlog] == [more[0]]
            assert order[-1] == busy
            assert not any(e.open for e in h.app.journal.state.entries.values())
            assert not [r for r in h.receipts() if r["outcome"] == "dropped" and r["reason"] != "self_or_bot_message"]

    asyncio.run(main())


def test_the_journal_at_its_bound_refuses_what_would_wait_visibly_and_serves_the_rest(env: dict[str, str]) -> None:
    """With the journal at CLANKIE_DISCORD_JOURNAL_MAX_BYTES, a message that would wait is dropped (``journal_full``)
    with the failure reaction; everything that waited before it is answered."""
    release = asyncio.Event()

    async def main() -> None:
        overrides = {"CLANKIE_DISCORD_MAX_TURNS": "1", "CLANKIE_DISCORD_JOURNAL_MAX_BYTES": "65536"}
        async with running(env, overrides=overrides, script=held_until(release)) as h:
            first = await h.fake.message(CHAN, "one", author_id=PERSON)
            await h.service.wait_submits(1)
            waited: list[str] = []
            while not h.app.journal.full:
                m = await h.fake.message(CHAN2, "x" * 400 + f" {len(waited)}", author_id=PERSON)
                await h.until(lambda m=m: "waiting" in h.outcomes(str(m["id"])))  # type: ignore[misc]  # bound per loop pass
                waited.append(str(m["id"]))
                assert len(waited) < 1000, "the journal never reached its bound"
            refused = await h.fake.message(CHAN2, "one too many", author_id=PERSON)
            await h.until(lambda: "dropped" in h.outcomes(str(refused["id"])))
            assert [(r["outcome"], r.get("reason")) for r in h.receipts() if r["delivery_id"] == str(refused["id"])] == [
                ("dropped", "journal_full")
            ]
            await h.until(lambda: bool(h.fake.reactions.get(str(refused["id"]))))
            release.set()
            await h.until(lambda: all(closing(h, m) for m in [str(first["id"]), *waited]), timeout=30)
            assert closing(h, str(first["id"])) == ["settled"] and closing(h, waited[-1]) == ["settled"]
            assert {closing(h, m)[0] for m in waited[:-1]} == {"absorbed"}  # one room: one turn for all that waited

    asyncio.run(main())


def test_messages_waiting_when_the_bridge_stops_wait_again_after_it_starts(env: dict[str, str]) -> None:
    """The journal carries the wait across a restart of the bridge: each message ends with exactly one outcome."""
    release = asyncio.Event()

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: list(ROOMS)})
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "1"}, script=held_until(release), fake=fake) as h:
            sent = [str((await h.fake.message(room, f"hi {room}", author_id=PERSON))["id"]) for room in ROOMS[:4]]
            await h.until(lambda: all(h.outcomes(m)[-1:] in (["accepted"], ["waiting"]) and h.outcomes(m) for m in sent))
            assert len(h.app.bridge.waiting) == 3
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "1"}, fake=FakeDiscord(guilds={GUILD: list(ROOMS)})) as h:
            await h.until(lambda: all(closing(h, m) for m in sent), timeout=30)
            assert {m: closing(h, m) for m in sent} == {m: ["settled"] for m in sent}
            assert sorted(s.delivery_id for s in h.service.submits) == sorted(sent)

    asyncio.run(main())


def test_buffered_messages_leaving_a_backlog_are_closed_visibly(env: dict[str, str]) -> None:
    """Past the backlog's bound (20) the oldest buffered message gets a ``dropped`` receipt (``backlog_full``),
    and an answer in the room closes the rest as ``absorbed``: none stays open in the journal."""
    clock = FakeClock()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text:
            return TurnResult.settled("hi!", turn_id="t")
        return TurnResult.silent(turn_id="t")

    async def main() -> None:
        async with running(env, script=script, clock=clock, overrides=addressed(declines=1)) as h:
            say = functools.partial(speak, h)
            await say("hey clankie")
            await say("meh")  # one decline: the room drifts
            buffered = [await say(f"chatter {i}") for i in range(22)]
            assert h.app.bridge.pending_triggers == 20  # held only for the backlog's twenty (ids; the entries hold them)
            assert [h.outcomes(b) for b in buffered[:2]] == [["buffered", "dropped"]] * 2
            assert {r.get("reason") for r in h.receipts() if r["delivery_id"] in buffered[:2] and r["outcome"] == "dropped"} == {
                BACKLOG_FULL
            }
            assert [h.app.journal.state.entries[b].outcome for b in buffered[:2]] == ["expired"] * 2
            assert all(h.app.journal.state.entries[b].open for b in buffered[2:])
            await say("clankie, you still here?")  # answered live: the backlog will get no catch-up turn
            assert {h.outcomes(b)[-1] for b in buffered[2:]} == {"absorbed"}
            assert not any(e.open for e in h.app.journal.state.entries.values())
            assert h.app.bridge.pending_triggers == 0

    asyncio.run(main())


def dedupe_minimum() -> int:
    """The smallest ``CLANKIE_DISCORD_MAX_RETAINED`` the settings accept."""
    ge = next(m.ge for m in Settings.model_fields["discord_max_retained"].metadata if isinstance(m, Ge))
    assert isinstance(ge, int)
    return ge


def test_at_its_minimum_bound_the_dedupe_refuses_nothing_and_still_knows_a_redelivery(env: dict[str, str]) -> None:
    """With the dedupe bound at its minimum, more messages than the bound within the retention window are all
    answered (none dropped); past the bound the oldest ids beyond the catch-up horizon go, and an id Discord sends
    again within the horizon is still recognised (``deduplicated``, no second turn)."""
    bound = dedupe_minimum()
    clock = FakeClock()

    async def send(h: Harness, count: int, tag: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        for start in range(0, count, 50):
            batch = range(start, min(count, start + 50))
            sent += await asyncio.gather(*(h.fake.message((CHAN, CHAN2)[k % 2], f"{tag} {k}", author_id=PERSON)
                                           for k in batch))
        return sent

    def closed(h: Harness, sent: list[dict[str, Any]]) -> bool:
        entries = h.app.journal.state.entries  # cheap to poll; the receipts are read once, at the end
        return all((e := entries.get(str(m["id"]))) is not None and not e.open for m in sent)

    async def main() -> None:
        overrides = {"CLANKIE_DISCORD_MAX_RETAINED": str(bound), "CLANKIE_RECOVERY_HORIZON_SECONDS": "900"}
        async with running(env, overrides=overrides, clock=clock) as h:
            first = await send(h, bound, "early")
            await h.until(lambda: closed(h, first), timeout=120)
            clock.advance(1000.0)  # past the horizon, well within the 7 h retention
            second = await send(h, bound // 2, "later")
            await h.until(lambda: closed(h, second), timeout=120)
            report = h.app.heartbeat().report
            assert (report["retained"], report["dedupe_evicted"], report["dedupe_forgot_early"]) == (bound, bound // 2, 0)
            ids = [str(m["id"]) for m in first + second]
            ends: dict[str, list[str]] = {}
            for r in h.receipts():
                if r["outcome"] in CLOSING:
                    ends.setdefault(r["delivery_id"], []).append(r["outcome"])
            unanswered = {m: ends.get(m) for m in ids if ends.get(m) not in (["settled"], ["absorbed"])}
            assert unanswered == {}  # each answered once, alone or joined with its room's other waiting messages
            assert not h.app.ingress.seen(ids[0]) and h.app.ingress.seen(ids[bound // 2]) and h.app.ingress.seen(ids[-1])
            again, submits = second[-1], len(h.service.submits)
            await h.fake.message(again["channel_id"], again["content"], author_id=PERSON, message_id=again["id"])
            await h.until(lambda: "deduplicated" in h.outcomes(again["id"]))
            assert len(h.service.submits) == submits  # no second turn
            assert not [r for r in h.receipts() if r["outcome"] == "dropped" and r["reason"] != "self_or_bot_message"]

    asyncio.run(main())
