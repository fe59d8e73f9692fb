"""Refusal reactions are bounded: under a flood of refusals at most ``MAX_REFUSAL_REACTIONS`` are in flight to
Discord, the rest go without a reaction (their ``dropped`` receipts still say why), and the slots free as Discord
answers."""

from __future__ import annotations

import asyncio

from bridge.port import DiscordPort
from bridge.turns import MAX_REFUSAL_REACTIONS
from tests.bridge.harness import CHAN, running


class HeldReactions:
    """The bridge's real Discord port, with every reaction held until ``release`` is set."""

    def __init__(self, port: DiscordPort, release: asyncio.Event) -> None:
        self.port = port
        self.release = release
        self.waiting = 0

    async def react(self, channel_id: str, message_id: str, emoji: str) -> None:
        self.waiting += 1
        await self.release.wait()
        await self.port.react(channel_id, message_id, emoji)


def test_a_flood_of_refusals_holds_at_most_the_bound_of_reactions_and_frees_them(env: dict[str, str]) -> None:
    async def main() -> None:
        async with running(env) as h:
            bridge = h.app.bridge
            ids = [str((await h.fake.message(CHAN, f"m{i}"))["id"]) for i in range(MAX_REFUSAL_REACTIONS + 8)]
            release = asyncio.Event()
            held = HeldReactions(bridge.port, release)
            bridge.port = held  # type: ignore[assignment]  # the port is read when each reaction starts
            for message_id in ids:
                bridge._react_refused(CHAN, message_id, "❌")
            await h.until(lambda: held.waiting == MAX_REFUSAL_REACTIONS, what="the bound of reactions in flight")
            assert len(bridge._reactions) == MAX_REFUSAL_REACTIONS
            release.set()
            await h.until(lambda: len(bridge._reactions) == 0, what="every held reaction answered")
            reacted = [m for m in ids if h.fake.reactions.get(m)]
            assert reacted == ids[:MAX_REFUSAL_REACTIONS]  # the first ones, in order; the rest went without
            bridge._react_refused(CHAN, ids[-1], "❌")  # a slot is free again
            await h.until(lambda: h.fake.reactions.get(ids[-1]) == ["❌"], what="a reaction after the flood")

    asyncio.run(main())
