"""The whole text path: fake Discord ⇄ real discord.py bridge ⇄ real service ⇄ real SDK ⇄ fake Anthropic."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from clankie import jsonl, paths
from clankie.clock import Clock
from clankie.settings import Settings, load
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from service.app import ServiceApp
from tests.bridge.harness import CHAN, GUILD, OWNER, PERSON, Harness

MSGS = "POST /channels/{id}/messages"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Tree:
    h: Harness
    anthropic: fa.FakeAnthropic
    service: ServiceApp | None  # None when the test runs the service as its own process
    settings: Settings
    env: dict[str, str]  # the environment a `python -m service` of this tree needs


@contextlib.asynccontextmanager
async def tree(
    env: dict[str, str],
    overrides: dict[str, str] | None = None,
    *,
    clock: Clock | None = None,
    in_process: bool = True,
) -> AsyncIterator[Tree]:
    anthropic = fa.FakeAnthropic()
    await anthropic.start()
    fake = FakeDiscord(guilds={GUILD: [CHAN]})
    await fake.start()
    full = {
        **env,
        "DISCORD_TOKEN": fake.token,
        "CLANKIE_DISCORD_API_BASE": fake.api_base,
        "CLANKIE_DISCORD_GUILD_IDS": GUILD,
        "ANTHROPIC_API_KEY": "sk-test-fake",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        **(overrides or {}),
    }
    settings = load(full)
    paths.ensure_private_dir(settings.runtime_dir)
    service = ServiceApp(settings) if in_process else None
    if service is not None:
        await service.start()
    app = BridgeApp(settings, clock=clock, retry=RetryPolicy(attempts=4, base=0.01, cap=0.05), guild_ready_timeout=0.05)
    task = asyncio.create_task(app.run())
    h = Harness(fake, None, app, settings.state_dir)  # type: ignore[arg-type]  # this harness runs without a fake service
    try:
        await h.until(lambda: app.discord_status == "connected" and (app.bridge.link.status == "connected" or not in_process))
        yield Tree(h, anthropic, service, settings, full)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if service is not None:
            await service.close()
        await fake.close()
        await anthropic.close()


def said_to_model(request: dict[str, object]) -> str:
    """Everything a model request carried, as one string to search."""
    return json.dumps(request)


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
            app = t.service
            assert app is not None
            await t.h.until(lambda: any(i.turns >= 3 for i in app.captain.lane_infos()))
            gate.set()
            ids = [m1["id"], m2["id"], m3["id"]]
            await t.h.until(lambda: all(len(t.h.outcomes(i)) == 2 for i in ids), timeout=30)
            assert [t.h.outcomes(i)[1] for i in ids] == ["settled", "absorbed", "absorbed"]
            [post] = t.h.fake.posts
            assert post.content == "one answer for all three"
            assert str(post.message_reference["message_id"]) == m1["id"]  # type: ignore[index]  # a reply always carries its reference
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


def test_rate_limited_reply_is_delayed_not_lost(env: dict[str, str]) -> None:
    """Discord answering the reply post with 429 delays the model's answer by retry_after; it still arrives once."""

    async def main() -> None:
        async with tree(env) as t:
            t.anthropic.script(fa.text("worth the wait"))
            t.h.fake.fail(MSGS, 429, retry_after=0.3)
            m = await t.h.fake.message(CHAN, "clankie, hello", author_id=PERSON)
            await t.h.until(lambda: "settled" in t.h.outcomes(m["id"]), timeout=30)
            calls = [c for c in t.h.fake.calls if c.route == MSGS]
            assert [c.status for c in calls] == [429, 200]
            assert calls[1].at - calls[0].at >= 0.3
            assert [p.content for p in t.h.fake.posts] == ["worth the wait"]
            assert t.h.outcomes(m["id"]) == ["accepted", "settled"]

    asyncio.run(main())


def test_declined_room_ages_out_and_its_chatter_is_caught_up_in_one_model_run(env: dict[str, str]) -> None:
    """Under `addressed`, two silences age the room out; three buffered messages become one model run and one reply."""
    clock = FakeClock()
    overrides = {
        "CLANKIE_DISCORD_REPLY_POLICY": "addressed",
        "CLANKIE_DISCORD_ENGAGEMENT_DECLINES": "2",
        "CLANKIE_DISCORD_CATCH_UP_SECONDS": "30",
    }

    async def main() -> None:
        async with tree(env, overrides, clock=clock) as t:
            async def say(text: str) -> str:
                m = await t.h.fake.message(CHAN, text, author_id=PERSON)
                await t.h.until(lambda: bool(t.h.outcomes(m["id"])) and t.h.outcomes(m["id"])[-1] != "accepted", timeout=30)
                return m["id"]

            t.anthropic.script(fa.text("hi!"), fa.text("[[stay-silent]]"), fa.text("[[stay-silent]]"), fa.text("caught up on all that"))
            assert t.h.outcomes(await say("random chatter")) == ["dropped"]  # never engaged: not addressed
            assert t.h.outcomes(await say("hey clankie")) == ["accepted", "settled"]
            assert [t.h.outcomes(await say(x))[-1] for x in ("meh", "whatever")] == ["silent", "silent"]
            buffered = [await say(x) for x in ("so anyway", "did you see", "the game")]
            assert [t.h.outcomes(b) for b in buffered] == [["buffered"]] * 3
            assert len(t.anthropic.requests) == 3
            clock.advance(30.0)
            await t.h.until(lambda: "settled" in t.h.outcomes(buffered[-1]), timeout=30)
            assert len(t.anthropic.requests) == 4  # one run for the whole backlog
            last = said_to_model(t.anthropic.requests[-1])
            assert all(x in last for x in ("so anyway", "did you see", "the game"))
            assert [p.content for p in t.h.fake.posts] == ["hi!", "caught up on all that"]
            assert str(t.h.fake.posts[-1].message_reference["message_id"]) == buffered[-1]  # type: ignore[index]  # a reply always carries its reference

    asyncio.run(main())


def test_owner_dm_is_answered(env: dict[str, str]) -> None:
    """The owner's DM reaches the real captain and his answer is posted in the DM, threaded to it."""

    async def main() -> None:
        async with tree(env) as t:
            dm = t.h.fake.dm_channel(OWNER)
            t.anthropic.script(fa.text("always"))
            m = await t.h.fake.message(dm, "you around?", author_id=OWNER)
            await t.h.until(lambda: "settled" in t.h.outcomes(m["id"]), timeout=30)
            [post] = t.h.fake.posts
            assert post.channel_id == dm and post.content == "always"
            assert str(post.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            assert "you around?" in said_to_model(t.anthropic.requests[0])

    asyncio.run(main())


def test_owner_dm_is_answered_with_the_last_context_messages(env: dict[str, str]) -> None:
    """Scenario 45: the owner's DM is answered, the model sees the last 2 earlier DM messages oldest first, and receipts carry no text."""
    earlier = ("first thing I said", "second thing I said", "third thing I said")

    async def main() -> None:
        async with tree(env, {"CLANKIE_DISCORD_CONTEXT_MESSAGES": "2"}) as t:
            dm = t.h.fake.dm_channel(OWNER)
            t.h.fake.messages[dm] = [
                t.h.fake._message_payload(t.h.fake.snowflake(), dm, None, {"id": OWNER, "username": "owner"}, text)
                for text in earlier
            ]
            t.anthropic.script(fa.text("here for you"))
            m = await t.h.fake.message(dm, "you around?", author_id=OWNER)
            await t.h.until(lambda: "settled" in t.h.outcomes(m["id"]), timeout=30)
            [post] = t.h.fake.posts
            assert post.channel_id == dm and post.content == "here for you"
            assert str(post.message_reference["message_id"]) == m["id"]  # type: ignore[index]  # a reply always carries its reference
            history = [c for c in t.h.fake.calls if c.route == "GET /channels/{id}/messages"]
            assert len(history) == 1
            seen = said_to_model(t.anthropic.requests[0])
            assert earlier[0] not in seen
            assert earlier[1] in seen and earlier[2] in seen
            assert seen.index(earlier[1]) < seen.index(earlier[2]) < seen.index("you around?")
            assert t.h.outcomes(m["id"]) == ["accepted", "settled"]
            assert t.service is not None and t.service.turns.evidence.of(m["id"]) == ["accepted", "settled"]
            raw = (t.settings.state_dir / "receipts" / "bridge.jsonl").read_text()
            assert not any(text in raw for text in (*earlier, "you around?", "here for you"))

    asyncio.run(main())


def _spawn_service(t: Tree, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service"],
            cwd=REPO,
            env={**t.env, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CLANKIE_LOG_LEVEL": "INFO"},
            stdout=out,
            stderr=out,
        )


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_service_killed_mid_turn_is_resubmitted_and_answered_once(env: dict[str, str]) -> None:
    """`kill -9` of the service mid-answer, then a restart: the bridge re-submits the delivery and the room gets exactly one reply."""

    async def main() -> None:
        async with tree(env, in_process=False) as t:
            t.anthropic.script(fa.text("half an answ", "er that never ends", stall_after=4), fa.text("the answer, after all"))
            log = t.settings.state_dir / "service.log"
            proc = _spawn_service(t, log)
            try:
                await t.h.until(lambda: t.h.app.bridge.link.status == "connected", timeout=20)
                m = await t.h.fake.message(CHAN, "clankie, what happened?", author_id=PERSON)
                await t.anthropic.wait_for_requests(1)
                proc.send_signal(signal.SIGKILL)
                await asyncio.to_thread(proc.wait, 10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            proc = _spawn_service(t, log)
            try:
                await t.h.until(lambda: "settled" in t.h.outcomes(m["id"]), timeout=40)
                assert t.h.outcomes(m["id"]) == ["accepted", "settled"]
                assert [p.content for p in t.h.fake.posts] == ["the answer, after all"]
                assert t.h.app.heartbeat().report["resubmits"] >= 1
                assert len(t.anthropic.requests) == 2
            finally:
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(proc.wait, 15) == 0
        evidence = jsonl.read_lines(t.settings.state_dir / "captain" / "evidence.jsonl")
        events = [e["event"] for e in evidence if e["delivery_id"] == m["id"]]
        assert events.count("settled") == 1 and events[-1] == "settled"
        assert events.count("accepted") == 2  # once before the kill, once on the re-submission

    asyncio.run(main())
