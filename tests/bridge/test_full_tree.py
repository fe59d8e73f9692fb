"""The whole text path: fake Discord ⇄ real discord.py bridge ⇄ real service ⇄ real SDK ⇄ fake Anthropic."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from clankie import paths
from clankie.settings import load
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from service.app import ServiceApp
from tests.bridge.harness import CHAN, GUILD, PERSON, Harness


@dataclass
class Tree:
    h: Harness
    anthropic: fa.FakeAnthropic
    service: ServiceApp


@contextlib.asynccontextmanager
async def tree(env: dict[str, str]) -> AsyncIterator[Tree]:
    anthropic = fa.FakeAnthropic()
    await anthropic.start()
    fake = FakeDiscord(guilds={GUILD: [CHAN]})
    await fake.start()
    settings = load({
        **env,
        "DISCORD_TOKEN": fake.token,
        "CLANKIE_DISCORD_API_BASE": fake.api_base,
        "CLANKIE_DISCORD_GUILD_IDS": GUILD,
        "ANTHROPIC_API_KEY": "sk-test-fake",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
    })
    paths.ensure_private_dir(settings.runtime_dir)
    service = ServiceApp(settings)
    await service.start()
    app = BridgeApp(settings, retry=RetryPolicy(attempts=4, base=0.01, cap=0.05), guild_ready_timeout=0.05)
    task = asyncio.create_task(app.run())
    h = Harness(fake, None, app, settings.state_dir)  # type: ignore[arg-type]
    try:
        await h.until(lambda: app.discord_status == "connected" and app.bridge.link.status == "connected")
        yield Tree(h, anthropic, service)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await service.close()
        await fake.close()
        await anthropic.close()


def test_burst_of_three_is_one_reply_threaded_to_the_first(env: dict[str, str]) -> None:
    """Three messages while the first turn runs: one model run, one reply to the first, evidence settled/absorbed/absorbed."""
    gate = asyncio.Event()

    async def main() -> None:
        async with tree(env) as t:
            t.anthropic.script(fa.text("thinking about it", stall_after=2, stall_until=gate), fa.text("one answer for all three"))
            m1 = await t.h.fake.message(CHAN, "clankie why did that happen", author_id=PERSON)
            await t.anthropic.wait_for_requests(1)
            m2 = await t.h.fake.message(CHAN, "it's very rude", author_id=PERSON)
            m3 = await t.h.fake.message(CHAN, "like, really", author_id=PERSON)
            await t.h.until(lambda: any(i.turns >= 3 for i in t.service.captain.lane_infos()))
            gate.set()
            ids = [m1["id"], m2["id"], m3["id"]]
            await t.h.until(lambda: all(len(t.h.outcomes(i)) == 2 for i in ids), timeout=30)
            assert [t.h.outcomes(i)[1] for i in ids] == ["settled", "absorbed", "absorbed"]
            [post] = t.h.fake.posts
            assert post.content == "one answer for all three"
            assert str(post.message_reference["message_id"]) == m1["id"]  # type: ignore[index]
            assert len(t.anthropic.requests) == 2

    asyncio.run(main())


def test_typing_for_a_spoken_turn_never_for_a_silent_one(env: dict[str, str]) -> None:
    """The room shows typing while he writes words, and none for a turn he ends in silence."""

    async def main() -> None:
        async with tree(env) as t:
            t.anthropic.script(fa.text("[[stay", "-silent]]"), fa.text("sure, here's the thing"))
            quiet = await t.h.fake.message(CHAN, "lol", author_id=PERSON)
            await t.h.until(lambda: "silent" in t.h.outcomes(quiet["id"]), timeout=30)
            assert t.h.fake.typing_in(CHAN) == 0 and t.h.fake.posts == []
            spoken = await t.h.fake.message(CHAN, "clankie, a question", author_id=PERSON)
            await t.h.until(lambda: "settled" in t.h.outcomes(spoken["id"]), timeout=30)
            assert t.h.fake.typing_in(CHAN) >= 1
            assert [p.content for p in t.h.fake.posts] == ["sure, here's the thing"]

    asyncio.run(main())


def test_long_reply_with_everyone_arrives_whole_and_pings_nobody(env: dict[str, str]) -> None:
    """A 5,000-character model answer quoting @everyone arrives whole in ≤2,000-character messages, pinging nobody."""
    answer = "@everyone " + "\n".join(f"point {i}: " + "details " * 10 for i in range(60))

    async def main() -> None:
        async with tree(env) as t:
            t.anthropic.script(fa.text(answer))
            m = await t.h.fake.message(CHAN, "clankie, explain everything", author_id=PERSON)
            await t.h.until(lambda: "settled" in t.h.outcomes(m["id"]), timeout=30)
            posts = t.h.fake.posts
            assert len(posts) >= 3 and all(len(p.content) <= 2000 for p in posts)
            assert "".join(p.content for p in posts) == answer.strip()
            assert all(p.allowed_mentions == {"parse": []} for p in posts)

    asyncio.run(main())
