"""The Discord token never reaches Discord in words (issue 24, item 6): the real bridge, the fake Discord.

The script plays the service and says the bridge's own token everywhere it can: a tool card's host, a text
update, and a reply long enough that its cut into 2,000-character messages falls inside the token.
"""

from __future__ import annotations

import asyncio

from bridge.card import CARD_DELAY_S
from clankie import ipc
from clankie.protocol import TextUpdate, TextUpdateReply, ToolActivity, TurnResult, TurnSubmit
from clankie.redact import REDACTED
from clankie.testing.clock import FakeClock
from tests.bridge.harness import Harness, running
from tests.bridge.test_e2e_turns import speak

CUT = 2000  # bridge.chunks: Discord's message limit


def test_the_token_is_redacted_in_cards_text_updates_and_replies_cut_across_it(env: dict[str, str]) -> None:
    """The card says ``[redacted].test``, the text update and the reply say ``[redacted]``; no message, edit or
    pair of neighbouring messages holds the token or a piece of it that would rejoin across a cut."""
    clock = FakeClock()
    h: Harness

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        token = h.fake.token
        armed = len(clock.slept)
        await conn.notify("tool", ToolActivity(delivery_id=sub.delivery_id, call_id="c1", tool="browser_screenshot",
                                               host=f"{token}.test", active=True))
        await h.until(lambda: CARD_DELAY_S in clock.slept[armed:])
        clock.advance(CARD_DELAY_S)
        await h.until(lambda: len(h.fake.posts) == 1)
        reply = await conn.request("text_update", TextUpdate(delivery_id=sub.delivery_id, text=f"my token: {token}"))
        assert isinstance(reply, TextUpdateReply)
        long = "x" * (CUT - len(token) // 2) + token + " and that is all"  # a cut at 2,000 splits the raw token
        return TurnResult.settled(long, turn_id="t")

    async def main() -> None:
        nonlocal h
        async with running(env, script=script, clock=clock) as h:
            token = h.fake.token
            trigger = await speak(h, "clankie, what is your token?", mention_bot=True)
            await h.until(lambda: h.outcomes(trigger)[-1] == "settled")
            card, update, *reply = [p.content for p in h.fake.posts]
            assert card == f"Taking a screenshot of {REDACTED}.test\u2026"
            assert update == f"my token: {REDACTED}"
            assert "".join(reply) == "x" * (CUT - len(token) // 2) + REDACTED + " and that is all"
            sent = [p.content for p in h.fake.posts] + [text for _, text in h.fake.edits]
            assert not [text for text in sent if token in text]
            assert token[: len(token) // 2] not in "".join(reply)

    asyncio.run(main())
