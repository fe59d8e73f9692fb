"""The bridge at its in-memory bounds, end to end (docs/operations.md, "Memory and connections and their bounds")."""

from __future__ import annotations

import asyncio
import functools

from bridge.admission import BACKLOG_FULL
from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from clankie.testing.clock import FakeClock
from tests.bridge.harness import CHAN, CHAN2, PERSON, running
from tests.bridge.test_e2e_turns import addressed, speak


def test_at_the_turn_cap_a_new_message_is_dropped_visibly_and_admitted_again_after(env: dict[str, str]) -> None:
    """With CLANKIE_DISCORD_MAX_TURNS=1 and one turn held, the next message gets a ``dropped`` receipt
    (``turn_backpressure``) and never reaches the service; once the turn is done messages run again."""
    release = asyncio.Event()

    async def held_until_released(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        await release.wait()
        return TurnResult(outcome="settled", turn_id=f"turn-{sub.delivery_id}", text="done")

    async def main() -> None:
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "1"}, script=held_until_released) as h:
            first = await h.fake.message(CHAN, "one", author_id=PERSON)
            await h.service.wait_submits(1)
            second = await h.fake.message(CHAN2, "two", author_id=PERSON)
            await h.until(lambda: "dropped" in h.outcomes(second["id"]))
            dropped = [r for r in h.receipts() if r["delivery_id"] == second["id"]]
            assert [(r["outcome"], r.get("reason")) for r in dropped] == [("dropped", "turn_backpressure")]
            await h.until(lambda: bool(h.fake.reactions.get(str(second["id"]))))  # its author sees it was not taken
            assert h.fake.reactions[str(second["id"])] == ["\u26a0\ufe0f"] and str(first["id"]) not in h.fake.reactions
            report = h.app.heartbeat().report
            assert (report["turns"], report["held"], report["dropped"]) == (1, 1, 1)
            release.set()
            await h.until(lambda: "settled" in h.outcomes(first["id"]))
            await h.until(lambda: h.app.bridge.turns_in_flight == 0)
            third = await h.fake.message(CHAN2, "three", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(third["id"]))
            assert [s.delivery_id for s in h.service.submits] == [first["id"], third["id"]]

    asyncio.run(main())


def test_buffered_messages_leaving_a_backlog_are_closed_visibly(env: dict[str, str]) -> None:
    """Past the backlog's bound (20) the oldest buffered message gets a ``dropped`` receipt (``backlog_full``),
    and an answer in the room closes the rest as ``absorbed``: none stays open in the journal."""
    clock = FakeClock()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if "clankie" in sub.trigger.text:
            return TurnResult(outcome="settled", turn_id="t", text="hi!")
        return TurnResult(outcome="silent", turn_id="t")

    async def main() -> None:
        async with running(env, script=script, clock=clock, overrides=addressed(declines=1)) as h:
            say = functools.partial(speak, h)
            await say("hey clankie")
            await say("meh")  # one decline: the room drifts
            buffered = [await say(f"chatter {i}") for i in range(22)]
            assert h.app.bridge.pending_triggers == 20  # payloads are held only for the backlog's twenty
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
