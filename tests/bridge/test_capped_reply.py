"""A reply cut short at a run cap is delivered like any answer, and its closing receipt says why
(``captain_run_budget_exceeded``)."""

from __future__ import annotations

import asyncio

from clankie import ipc
from clankie.protocol import Code, TurnResult, TurnSubmit
from tests.bridge.harness import CHAN, PERSON, running
from tests.replies import CLOSING


def test_a_capped_reply_is_posted_and_its_closing_receipt_carries_the_cap_code(env: dict[str, str]) -> None:
    """The service settles with the words so far and the cap's code: the words are posted as the reply, the
    closing receipt is ``settled`` with reason ``captain_run_budget_exceeded``."""
    capped = Code.CAPTAIN_RUN_BUDGET_EXCEEDED

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        return TurnResult.settled("page 1 done\n\npage 2 done", turn_id="t1", code=capped)

    async def main() -> None:
        async with running(env, script=script) as h:
            m = await h.fake.message(CHAN, "screenshot these 200 URLs", author_id=PERSON)
            did = str(m["id"])
            await h.until(lambda: any(o in CLOSING for o in h.outcomes(did)), what="the delivery's closing receipt")
            closing = [r for r in h.receipts() if r["delivery_id"] == did and r["outcome"] in CLOSING]
            assert [(r["outcome"], r.get("reason")) for r in closing] == [("settled", capped)]
            (post,) = h.fake.posts_in(CHAN)
            assert post.content == "page 1 done\n\npage 2 done" and closing[0]["message_ids"] == [post.id]
            assert not h.fake.reactions  # a capped answer is an answer: no failure reaction

    asyncio.run(main())
