"""No deaf window: a new bridge process RESUMEs the gateway session its predecessor held (issue 35).

Real discord.py against the loopback fake, whose sessions outlive their
sockets (clankie/testing/fake_discord_gateway.py). One fake Discord and one
service double live through several bridge "processes" (``BridgeApp`` lives on
one state directory); a kill aborts the bridge's TCP connection with no close
frame, as the kernel does for a SIGKILLed process, before the app is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from bridge.gateway_link import FREE_IDENTIFIES, IDENTIFY_BASE
from bridge.gateway_session import FILENAME
from clankie import paths
from clankie.clock import Clock
from clankie.settings import load
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, CHAN2, GUILD, PERSON, FakeService
from tests.polling import until

pytestmark = pytest.mark.timeout(60)


class World:
    """One fake Discord and one service double that outlive the bridge processes run against them."""

    def __init__(self, env: dict[str, str], fake: FakeDiscord, service: FakeService,
                 overrides: dict[str, str] | None = None) -> None:
        self.fake = fake
        self.service = service
        self.env = {**env, "DISCORD_TOKEN": fake.token, "CLANKIE_DISCORD_API_BASE": fake.api_base,
                    "CLANKIE_DISCORD_GUILD_IDS": GUILD, "CLANKIE_USER_TURNS_PER_MINUTE": "0",
                    "CLANKIE_ROOM_TURNS_PER_MINUTE": "0", "CLANKIE_DISCORD_TOOL_CARD": "false", **(overrides or {})}
        self.state_dir = load(self.env).state_dir

    def session_file(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / "bridge" / FILENAME).read_text())
        return data

    def replies_to(self, message_id: str) -> int:
        return sum(1 for p in self.fake.posts if str((p.message_reference or {}).get("message_id")) == message_id)

    async def until(self, predicate: Any, what: str, timeout: float = 20.0) -> None:
        async def change(step: float) -> None:
            await self.fake.wait_for(predicate, timeout=step)

        await until(predicate, timeout, what, step=0.02, nap=change)


@contextlib.asynccontextmanager
async def world(env: dict[str, str], overrides: dict[str, str] | None = None) -> AsyncIterator[World]:
    fake = FakeDiscord(guilds={GUILD: [CHAN, CHAN2]})
    await fake.start()
    settings = load(env)
    paths.ensure_private_dir(settings.runtime_dir)
    service = FakeService(paths.socket_path(settings.runtime_dir, "service"))
    await service.start()
    try:
        yield World(env, fake, service, overrides)
    finally:
        await service.close()
        await fake.close()


class Life:
    """One bridge process's run."""

    def __init__(self, app: BridgeApp, task: asyncio.Task[None]) -> None:
        self.app = app
        self.task = task

    async def kill(self) -> None:
        """SIGKILL, in process: the TCP connection is aborted (no close frame), then the app stops."""
        client = self.app.port.client
        assert client is not None and client.ws is not None
        client.ws.socket._writer.transport.abort()  # the kernel's part in a SIGKILL
        await self.stop()

    async def stop(self) -> None:
        """A planned stop (SIGTERM): the app is cancelled and closes as it does."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self.task, 15)


@contextlib.asynccontextmanager
async def life(w: World, *, clock: Clock | None = None, connected: bool = True) -> AsyncIterator[Life]:
    app = BridgeApp(load(w.env), clock=clock, retry=RetryPolicy(attempts=5, base=0.01, cap=0.05),
                    guild_ready_timeout=0.05)
    one = Life(app, asyncio.create_task(app.run()))
    try:
        if connected:
            await w.until(lambda: app.discord_status == "connected" or one.task.done(), "the bridge connected")
            if one.task.done():
                one.task.result()
        yield one
    finally:
        await one.stop()


def test_a_killed_bridge_is_resumed_by_the_next_and_the_gap_is_answered_once(env: dict[str, str]) -> None:
    """kill -9 under traffic → the next process RESUMEs (no IDENTIFY); what was said meanwhile is replayed and
    answered once, and so is what the first had answered already (replayed, de-duplicated)."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                before = [await w.fake.message(CHAN if n % 2 else CHAN2, f"before {n}", author_id=PERSON)
                          for n in range(4)]
                await w.until(lambda: all(w.replies_to(m["id"]) for m in before), "the first answers")
                await first.kill()
            assert w.fake.identifies == 1
            assert w.fake.gateway.resumable(), "a socket that died without a close frame keeps its session"
            gap = [await w.fake.message(CHAN if n % 2 else CHAN2, f"gap {n}", author_id=PERSON) for n in range(5)]
            async with life(w) as second:
                await w.until(lambda: all(w.replies_to(m["id"]) for m in gap), "the gap answered")
                after = await w.fake.message(CHAN, "after", author_id=PERSON)
                await w.until(lambda: w.replies_to(after["id"]) == 1, "a live message answered")
                assert second.app.keeper is not None
                report = second.app.heartbeat().report["gateway"]
                assert report["resumes_today"] == 1 and report["identifies_today"] == 1
                assert "1 resumes, 1 identifies today" in second.app.heartbeat().detail
            assert (w.fake.identifies, w.fake.resumes, w.fake.gateway.refused) == (1, 1, 0)
            assert w.fake.gateway.shared == 0  # never two processes on one session
            for m in [*before, *gap, after]:
                assert w.replies_to(m["id"]) == 1, m["content"]
            # no history read: the RESUME replayed the gap (a fresh session would have read both rooms back)
            assert not [c for c in w.fake.calls if c.method == "GET" and "after=" in c.query]

    asyncio.run(main())


def test_an_event_received_but_not_journaled_is_replayed_and_answered_once(env: dict[str, str]) -> None:
    """The stored sequence is the last journaled event's, not the socket's: a message the dying bridge had read off
    the socket (discord.py's sequence moved) but never journaled comes back on RESUME."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                done = await w.fake.message(CHAN, "journaled", author_id=PERSON)
                await w.until(lambda: w.replies_to(done["id"]) == 1, "the first message answered")
                lost: list[str] = []
                bridge_on_message = first.app.bridge.on_message

                def dies_before_the_journal(inbound: Any, room: Any, trigger: Any) -> Any:
                    if trigger.text == "in flight":
                        lost.append(inbound.message_id)
                        raise RuntimeError("the process dies here, before the journal line")
                    return bridge_on_message(inbound, room, trigger)

                first.app.bridge.on_message = dies_before_the_journal  # type: ignore[method-assign]
                flying = await w.fake.message(CHAN, "in flight", author_id=PERSON)
                await w.until(lambda: lost == [flying["id"]], "the message read off the socket")
                client = first.app.port.client
                assert client is not None and client.ws is not None
                socket_seq = client.ws.sequence
                await first.kill()
            stored = w.session_file()["sessions"][0]["seq"]
            assert socket_seq is not None and stored < socket_seq  # the socket had read further than the journal
            async with life(w):
                await w.until(lambda: w.replies_to(flying["id"]) == 1, "the replayed message answered")
                later = await w.fake.message(CHAN, "later", author_id=PERSON)
                await w.until(lambda: w.replies_to(later["id"]) == 1, "a later message answered")
            assert w.replies_to(done["id"]) == 1 and w.replies_to(flying["id"]) == 1
            assert (w.fake.identifies, w.fake.resumes) == (1, 1)

    asyncio.run(main())


def test_a_refused_resume_identifies_and_reads_the_gap_back(env: dict[str, str]) -> None:
    """Discord refuses the stored session (op 9): the next bridge IDENTIFYs and reads history back; nothing lost."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                await first.kill()
            gap = [await w.fake.message(CHAN, f"gap {n}", author_id=PERSON) for n in range(3)]
            w.fake.gateway.refuse_resumes = True
            async with life(w) as second:
                await w.until(lambda: all(w.replies_to(m["id"]) for m in gap), "the gap read back and answered")
                report = second.app.heartbeat().report["gateway"]
                assert report["refused_today"] == 1 and report["identifies_today"] == 2
            assert w.fake.gateway.refused == 1 and w.fake.identifies == 2 and w.fake.resumes == 0
            assert [c for c in w.fake.calls if c.method == "GET" and "after=" in c.query]  # the catch-up read
            for m in gap:
                assert w.replies_to(m["id"]) == 1

    asyncio.run(main())


@pytest.mark.parametrize("code", [4007, 4009])
def test_a_close_that_ends_the_session_identifies_instead_of_resuming_again(env: dict[str, str], code: int) -> None:
    """4007 (invalid seq) and 4009 (session timed out): discord.py would RESUME again; the bridge starts anew."""

    async def main() -> None:
        async with world(env) as w, life(w) as one:
            await w.fake.close_gateway(code)
            await w.until(lambda: w.fake.identifies == 2 and one.app.discord_status == "connected", "a new session")
            assert w.fake.resumes == 0
            m = await w.fake.message(CHAN, "still here?", author_id=PERSON)
            await w.until(lambda: w.replies_to(m["id"]) == 1, "answered")

    asyncio.run(main())


def test_a_planned_stop_keeps_the_session_for_the_next_bridge(env: dict[str, str]) -> None:
    """SIGTERM (``restart bridge``, a deploy): the socket is closed with 4000, not 1000, and the next one RESUMEs."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                m = await w.fake.message(CHAN, "before the restart", author_id=PERSON)
                await w.until(lambda: w.replies_to(m["id"]) == 1, "answered")
                await first.stop()
            await w.until(lambda: w.fake.gateway.closed_codes == [4000], "the fake saw the socket closed with 4000")
            gap = await w.fake.message(CHAN, "during the restart", author_id=PERSON)
            async with life(w):
                await w.until(lambda: w.replies_to(gap["id"]) == 1, "the gap answered")
            assert (w.fake.identifies, w.fake.resumes) == (1, 1)
            assert w.replies_to(m["id"]) == 1

    asyncio.run(main())


def test_resume_off_identifies_every_time_and_closes_with_1000(env: dict[str, str]) -> None:
    """``CLANKIE_DISCORD_GATEWAY_RESUME=false`` is today's behaviour: the comparison in bench/resume.py."""

    async def main() -> None:
        async with world(env, {"CLANKIE_DISCORD_GATEWAY_RESUME": "false"}) as w:
            async with life(w) as first:
                await first.stop()
            await w.until(lambda: w.fake.gateway.closed_codes == [1000], "the fake saw the socket closed with 1000")
            gap = await w.fake.message(CHAN, "during the restart", author_id=PERSON)
            async with life(w):
                await w.until(lambda: w.replies_to(gap["id"]) == 1, "read back and answered")
            assert (w.fake.identifies, w.fake.resumes) == (2, 0)

    asyncio.run(main())


def test_a_crash_loop_backs_identifies_off_and_warns_when_starts_run_low(
        env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """Every RESUME refused, every process killed: after FREE_IDENTIFIES IDENTIFYs in a row the next waits
    IDENTIFY_BASE s, then twice that; under 10 % of the day's starts left, the log, status and report say so."""

    async def main() -> None:
        clock = FakeClock()
        async with world(env) as w:
            w.fake.session_starts_total, w.fake.session_starts_remaining = 40, 6  # 3 left after three: under 10 %
            w.fake.gateway.refuse_resumes = True
            for _ in range(FREE_IDENTIFIES):
                async with life(w, clock=clock) as one:
                    await one.kill()
            assert w.fake.identifies == FREE_IDENTIFIES
            for n, wait in enumerate((IDENTIFY_BASE, 2 * IDENTIFY_BASE)):
                async with life(w, clock=clock, connected=False) as one:
                    keeper = one.app.keeper
                    assert keeper is not None
                    await w.until(lambda k=keeper: k.holding is not None, "the IDENTIFY held")
                    assert keeper.holding == wait and w.fake.identifies == FREE_IDENTIFIES + n
                    beat = one.app.heartbeat()
                    assert "next IDENTIFY in" in beat.detail and "session starts low" in beat.detail
                    assert beat.report["gateway"]["starts_low"] is True
                    clock.advance(wait)
                    await w.until(lambda a=one.app: a.discord_status == "connected", "identified after the wait")
                    assert w.fake.identifies == FREE_IDENTIFIES + n + 1
                    await one.kill()
            assert "session starts remain" in caplog.text

    with caplog.at_level(logging.WARNING, logger="bridge.gateway_session"):
        asyncio.run(main())


def test_a_resume_after_a_gap_older_than_the_session_still_reads_that_gap_back(env: dict[str, str]) -> None:
    """A bridge that died before reading back its own start's gap: the RESUME cannot replay what came before the
    session, so the next bridge reads it back too (the journal's open gap is older than the stored session)."""

    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                m = await w.fake.message(CHAN, "a room the journal knows", author_id=PERSON)
                await w.until(lambda: w.replies_to(m["id"]) == 1, "answered")
                await first.kill()
            journal = w.state_dir / "bridge" / "journal.jsonl"
            stored = w.session_file()["sessions"][0]["since"]
            with journal.open("a") as f:  # the gap the first bridge opened at its start, never closed
                f.write(json.dumps({"v": 1, "op": "gap", "since": stored - 30}) + "\n")
            async with life(w) as second:
                await w.until(lambda: second.app.recovered.rooms == 1, "the room's history read back")
            assert w.fake.resumes == 1

    asyncio.run(main())


def test_the_session_file_is_private_and_a_malformed_one_is_ignored(env: dict[str, str], tmp_path: Path) -> None:
    async def main() -> None:
        async with world(env) as w:
            async with life(w) as first:
                await first.kill()
            path = w.state_dir / "bridge" / FILENAME
            assert path.stat().st_mode & 0o777 == 0o600
            path.write_text("{not json")
            async with life(w):
                pass
            assert (w.fake.identifies, w.fake.resumes) == (2, 0)

    asyncio.run(main())


def test_a_sequence_older_than_the_replay_buffer_is_refused_and_the_gap_read_back(env: dict[str, str]) -> None:
    """Discord keeps so much to replay: a gap longer than the fake's buffer (cut to 3 dispatches here) is refused
    (op 9), and the next bridge IDENTIFYs and reads the gap back from history; nothing lost."""

    async def main() -> None:
        async with world(env) as w:
            w.fake.gateway.dispatched = deque(maxlen=3)
            async with life(w) as first:
                m = await w.fake.message(CHAN, "before", author_id=PERSON)
                await w.until(lambda: w.replies_to(m["id"]) == 1, "answered")
                await first.kill()
            gap = [await w.fake.message(CHAN if n % 2 else CHAN2, f"gap {n}", author_id=PERSON) for n in range(5)]
            async with life(w):
                await w.until(lambda: all(w.replies_to(g["id"]) == 1 for g in gap), "the gap read back and answered")
            assert (w.fake.gateway.refused, w.fake.resumes, w.fake.identifies) == (1, 0, 2)
            assert w.replies_to(m["id"]) == 1

    asyncio.run(main())
