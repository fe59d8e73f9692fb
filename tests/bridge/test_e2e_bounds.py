"""The bridge at its in-memory bounds, end to end (docs/operations.md, "Memory and connections and their bounds")."""

from __future__ import annotations

import asyncio

from clankie import ipc
from clankie.protocol import TurnResult, TurnSubmit
from tests.bridge.harness import CHAN, CHAN2, PERSON, running


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
            report = h.app.heartbeat().report
            assert (report["turns"], report["held"], report["dropped"]) == (1, 1, 1)
            release.set()
            await h.until(lambda: "settled" in h.outcomes(first["id"]))
            await h.until(lambda: h.app.bridge.turns_in_flight == 0)
            third = await h.fake.message(CHAN2, "three", author_id=PERSON)
            await h.until(lambda: "settled" in h.outcomes(third["id"]))
            assert [s.delivery_id for s in h.service.submits] == [first["id"], third["id"]]

    asyncio.run(main())
