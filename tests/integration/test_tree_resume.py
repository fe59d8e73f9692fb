"""No deaf window on the real tree: a SIGKILLed or restarted bridge's successor RESUMEs the gateway session.

Twice: a cold successor (the bridge's spare off), and the parked spare bridge taking the slot over. The trees run
no host (a story of the gateway alone never browses or draws).

``clankie run`` against the loopback fakes in this process; the fake gateway
keeps a dead socket's session resumable and replays on RESUME
(clankie/testing/fake_discord_gateway.py). Every wait polls real state.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
from pathlib import Path

import pytest

from clankie.protocol import ChildStatus, ChildTarget
from tests.integration.tree import CHAN, PERSON, Tree, real_tree
from tests.polling import until
from tests.replies import CLOSING

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOMS = (CHAN, "102", "103")
ENV = {"CLANKIE_DISCORD_TOOL_CARD": "false", "CLANKIE_BRIDGE_SPARE": "false"}  # a cold bridge RESUMEs; SPARE below


def replies(t: Tree, message_id: str) -> int:
    return sum(1 for p in t.discord.posts if str((p.message_reference or {}).get("message_id")) == message_id)


async def say(t: Tree, n: int, text: str) -> str:
    sent = await t.discord.message(ROOMS[n % len(ROOMS)], f"{text} {n}", author_id=PERSON)
    return str(sent["id"])


def closings(t: Tree, message_id: str) -> list[str]:
    return [r["outcome"] for r in t.receipts() if r["delivery_id"] == message_id and r["outcome"] in CLOSING]


async def answered_once(t: Tree, ids: list[str], what: str) -> None:
    """Each message closed exactly once, settled (its own reply) or absorbed (the service folded it into the reply
    of a turn in the same room), and none replied to twice."""
    await until(lambda: all(closings(t, i) for i in ids), 90, what)
    assert all(closings(t, i) in (["settled"], ["absorbed"]) for i in ids), [closings(t, i) for i in ids]
    assert all(replies(t, i) == (closings(t, i) == ["settled"]) for i in ids), [replies(t, i) for i in ids]


def test_a_sigkilled_bridge_is_resumed_and_the_gap_is_answered_once(tmp_path: Path, runtime_dir: Path) -> None:
    """kill -9 of the bridge under traffic: the next bridge RESUMEs (no IDENTIFY, no history read), what was said
    in the gap is replayed, and every message is answered once, those in flight at the kill included."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, ENV, channels=ROOMS, spares=False, hosts=False) as t:  # the bridge restarts cold
            before = [await say(t, n, "before") for n in range(3)]
            await answered_once(t, before, "the first bridge answers")
            bridge = await t.child("bridge")
            assert bridge.pid is not None
            in_flight = [await say(t, n, "in flight") for n in range(3)]
            os.kill(bridge.pid, signal.SIGKILL)
            gap = [await say(t, n, "gap") for n in range(6)]
            await t.wait_child(lambda c: c.state == "running" and c.pid not in (None, bridge.pid), "bridge")
            await answered_once(t, [*in_flight, *gap], "the gap answered by the next bridge")
            after = [await say(t, n, "after") for n in range(3)]
            await answered_once(t, after, "live again")
            assert (t.discord.identifies, t.discord.resumes) == (1, 1)
            assert t.discord.gateway.shared == 0  # the dead bridge's socket was gone before its successor resumed
            # no catch-up: the only recovery is the first bridge's, after its new session, with nothing to read
            assert re.findall(r"recovery: (\d+) rooms read", t.stderr()) == ["0"]
            # the status line is the last heartbeat's: wait for the one sent after the RESUME
            await t.wait_child(lambda c: "gateway: session" in c.detail and "1 resumes, 1 identifies today" in c.detail,
                               "bridge")

    asyncio.run(main())


def test_restart_bridge_hands_the_session_over(tmp_path: Path, runtime_dir: Path) -> None:
    """``clankiectl restart bridge``: the old bridge closes with 4000, the new one RESUMEs; no session start spent."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, ENV, channels=ROOMS, spares=False, hosts=False) as t:  # the bridge restarts cold
            first = await say(t, 0, "before")
            await answered_once(t, [first], "answered")
            restarting = asyncio.ensure_future(t.call("restart", ChildTarget(name="bridge")))
            gap = [await say(t, n, "during the restart") for n in range(3)]
            await restarting
            await t.wait_child(lambda c: c.state == "running" and "discord: connected" in c.detail, "bridge")
            await answered_once(t, gap, "the restart's gap answered")
            await until(lambda: 4000 in t.discord.gateway.closed_codes, 30, "the old bridge's socket closed with 4000")
            assert 1000 not in t.discord.gateway.closed_codes
            assert (t.discord.identifies, t.discord.resumes) == (1, 1)

    asyncio.run(main())


SPARE = {**ENV, "CLANKIE_BRIDGE_SPARE": "true"}


def taken_over(c: ChildStatus, *, dead: int | None) -> bool:
    return c.state == "running" and c.pid not in (None, dead)


def parked_anew(c: ChildStatus, *, taken: int | None) -> bool:
    return c.spare.startswith("parked") and c.spare_pid != taken


def test_a_parked_spare_takes_a_sigkilled_bridge_over_and_resumes(tmp_path: Path, runtime_dir: Path) -> None:
    """With the bridge's spare on, kill -9 of the bridge under traffic: the parked spare (logged in, no gateway socket)
    becomes the bridge and RESUMEs; one IDENTIFY in all, never two sockets on the session, every message answered
    once; a new spare parks, and a second kill is taken over the same way."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, SPARE, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            parked = await t.wait_child(lambda c: c.spare.startswith("parked"), "bridge", 60)
            spare = parked.spare_pid
            assert spare is not None and spare != parked.pid
            others = {c.name: c.spare for c in (await t.status()).children if c.name != "bridge"}
            assert others == {"service": "off"}  # CLANKIE_SPARES=bridge: only it (and no host runs: CLANKIE_HOSTS=none)
            assert t.discord.gateway.shared == 0 and len(t.discord.gateway.sockets) == 1  # parked: no socket of its own
            os.kill(spare, signal.SIGKILL)  # a spare that dies untaken is replaced after its backoff; it spent nothing
            again = await t.wait_child(lambda c: c.spare.startswith("parked") and c.spare_pid != spare, "bridge", 60)
            spare = again.spare_pid
            assert (t.discord.identifies, t.discord.resumes) == (1, 0) and again.pid == parked.pid
            before = [await say(t, n, "before") for n in range(3)]
            await answered_once(t, before, "the first bridge answers")
            for kill in range(2):
                bridge = await t.child("bridge")
                assert bridge.pid is not None
                in_flight = [await say(t, n, f"in flight {kill}") for n in range(3)]
                os.kill(bridge.pid, signal.SIGKILL)
                gap = [await say(t, n, f"gap {kill}") for n in range(6)]
                now = await t.wait_child(functools.partial(taken_over, dead=bridge.pid), "bridge")
                assert now.pid == spare  # the spare took over: no cold start
                await answered_once(t, [*in_flight, *gap], "the gap answered by the spare")
                assert (t.discord.identifies, t.discord.resumes) == (1, kill + 1)
                assert t.discord.gateway.shared == 0
                nxt = await t.wait_child(functools.partial(parked_anew, taken=spare), "bridge", 60)
                spare = nxt.spare_pid
            after = [await say(t, n, "after") for n in range(3)]
            await answered_once(t, after, "live again")
            assert (t.discord.identifies, t.discord.resumes) == (1, 2)
            assert t.discord.gateway.shared == 0
            assert re.findall(r"recovery: (\d+) rooms read", t.stderr()) == ["0"]  # no catch-up read

    asyncio.run(main())


def test_restart_bridge_hands_the_session_to_the_spare(tmp_path: Path, runtime_dir: Path) -> None:
    """``clankiectl restart bridge`` with a parked spare: the old bridge closes with 4000 and exits, then the spare
    RESUMEs; no session start spent."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, SPARE, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            parked = await t.wait_child(lambda c: c.spare.startswith("parked"), "bridge", 60)
            first = await say(t, 0, "before")
            await answered_once(t, [first], "answered")
            restarting = asyncio.ensure_future(t.call("restart", ChildTarget(name="bridge")))
            gap = [await say(t, n, "during the restart") for n in range(3)]
            await restarting
            now = await t.wait_child(lambda c: c.state == "running" and "discord: connected" in c.detail, "bridge")
            assert now.pid == parked.spare_pid
            await answered_once(t, gap, "the restart's gap answered")
            await until(lambda: 4000 in t.discord.gateway.closed_codes, 30, "the old bridge's socket closed with 4000")
            assert (t.discord.identifies, t.discord.resumes) == (1, 1)
            assert t.discord.gateway.shared == 0

    asyncio.run(main())


def test_a_hung_bridge_is_killed_before_the_spare_resumes(tmp_path: Path, runtime_dir: Path) -> None:
    """A SIGSTOPped bridge still holds its socket: the supervisor kills it for missing heartbeats, and only once it
    has exited does the spare RESUME; the fake never sees two sockets on the session, every message answered once."""

    async def main() -> None:
        env = {**SPARE, "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "5"}
        async with real_tree(tmp_path, runtime_dir, env, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            parked = await t.wait_child(lambda c: c.spare.startswith("parked"), "bridge", 60)
            first = await say(t, 0, "before")
            await answered_once(t, [first], "answered")
            assert parked.pid is not None
            os.kill(parked.pid, signal.SIGSTOP)
            hung = [await say(t, n, "while hung") for n in range(3)]
            now = await t.wait_child(functools.partial(taken_over, dead=parked.pid), "bridge", 60)
            assert now.pid == parked.spare_pid
            assert now.last_exit is not None  # the hung one was reaped before its successor started
            await answered_once(t, hung, "the hung bridge's messages answered by the spare")
            assert (t.discord.identifies, t.discord.resumes) == (1, 1)
            assert t.discord.gateway.shared == 0

    asyncio.run(main())
