"""Nothing lost: every admitted message gets exactly one outcome and at most one reply, whichever process dies.

The real tree (`clankie run`, its service and its bridge: no host, none is needed) against the fake Discord
and the fake Anthropic. The model's answers are held on a gate so turns are
live when the kill lands; the gateway can be held closed to make an outage
during which people keep talking. After each fault every message sent must
have been heard by the model, have exactly one final outcome receipt, and
have at most one reply; every room gets an answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from clankie.jsonl import read_lines
from clankie.testing.fake_discord import Post
from tests.integration.tree import PERSON, Tree, real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOMS = ("101", "102", "103")
FINAL = frozenset({"settled", "absorbed", "silent", "failed", "expired"})
CONNECTED = "discord: connected; service: connected"


def finals(t: Tree) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in read_lines(t.state / "receipts" / "bridge.jsonl"):
        if r["outcome"] in FINAL:
            out.setdefault(r["delivery_id"], []).append(r["outcome"])
    return out


def journaled(t: Tree) -> set[str]:
    return {line["id"] for line in read_lines(t.state / "bridge" / "journal.jsonl") if line["op"] == "admit"}


def replies_to(t: Tree, message_id: str) -> list[Post]:
    return [p for p in t.discord.posts if str((p.message_reference or {}).get("message_id")) == message_id]


def heard(t: Tree, text: str) -> bool:
    return any(text in json.dumps(body) for body in t.anthropic.requests)


async def say(t: Tree, rounds: int, tag: str) -> list[dict[str, Any]]:
    """``rounds`` messages in every room, one room after another."""
    return [await t.discord.message(room, f"{tag} {room}-{i}", author_id=PERSON) for i in range(rounds) for room in ROOMS]


async def answered(t: Tree, sent: list[dict[str, Any]], timeout: float = 90.0) -> None:
    await until(lambda: all(m["id"] in finals(t) for m in sent), timeout, "an outcome for every message")


def nothing_lost(t: Tree, sent: list[dict[str, Any]]) -> None:
    """Exactly one outcome each, all of them answers; at most one reply each; every room answered; all heard."""
    got = finals(t)
    for m in sent:
        assert got.get(m["id"]) in (["settled"], ["absorbed"]), (m["content"], got.get(m["id"]), t.stderr()[-2000:])
        assert len(replies_to(t, m["id"])) <= 1, m["content"]
        assert heard(t, m["content"]), m["content"]
    for room in ROOMS:
        assert t.discord.posts_in(room), f"room {room} got no answer"


async def kill_bridge(t: Tree) -> None:
    """SIGKILL the bridge and wait for the supervisor's new one to reach Discord and the service."""
    old = (await t.child("bridge")).pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    await t.wait_child(lambda c: c.pid not in (None, old) and c.state == "running" and CONNECTED in c.detail,
                       "bridge", 60)


def test_a_bridge_killed_mid_turn_still_answers_every_message(tmp_path: Path, runtime_dir: Path) -> None:
    """Turns in flight when the bridge dies are resumed from its journal and answered once each."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            t.anthropic.gate = asyncio.Event()
            sent = await say(t, 2, "mid-turn")
            await until(lambda: {m["id"] for m in sent} <= journaled(t), 20, "every delivery journaled")
            await until(lambda: len(t.anthropic.requests) >= len(ROOMS), 20, "a live run in every room")
            await kill_bridge(t)
            t.anthropic.gate.set()
            await answered(t, sent)
            nothing_lost(t, sent)

    asyncio.run(main())


def test_messages_sent_while_the_bridge_is_down_are_fetched_and_answered(tmp_path: Path, runtime_dir: Path) -> None:
    """Discord does not redeliver: what arrived with no gateway session is read from channel history."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            before = await say(t, 1, "before")
            await answered(t, before)
            t.discord.gateway_open.clear()  # the next gateway session waits: an outage
            old = (await t.child("bridge")).pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            await until(lambda: t.discord.connected == 0, 20, "the old gateway session to drop")
            during = await say(t, 2, "while-down")
            t.discord.gateway_open.set()
            await t.wait_child(lambda c: c.pid != old and CONNECTED in c.detail, "bridge", 60)
            await answered(t, during)
            nothing_lost(t, before + during)

    asyncio.run(main())


def test_three_bridge_kills_in_a_row_lose_nothing(tmp_path: Path, runtime_dir: Path) -> None:
    """Each kill lands while turns are held; every message still ends once, with one reply at most."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            t.anthropic.gate = asyncio.Event()
            sent: list[dict[str, Any]] = []
            for kill in range(3):
                sent += await say(t, 1, f"kill{kill}")
                await until(lambda: {m["id"] for m in sent} <= journaled(t), 20, "every delivery journaled")  # noqa: B023 (awaited within the iteration)
                await kill_bridge(t)
            t.anthropic.gate.set()
            await answered(t, sent)
            nothing_lost(t, sent)

    asyncio.run(main())


def test_a_reply_posted_just_before_the_bridge_died_is_found_not_posted_again(tmp_path: Path, runtime_dir: Path) -> None:
    """The reply reached Discord but its outcome was never journaled: the new bridge finds it in history."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=ROOMS, spares={"bridge"}, hosts=False) as t:
            t.discord.post_answers.clear()  # Discord keeps the reply but the bridge never hears back
            m = await t.discord.message(ROOMS[0], "answer then die", author_id=PERSON)
            first = (await until(lambda: replies_to(t, m["id"]), 30, "the reply in Discord"))[0]
            t.discord.forget_nonces()  # long enough ago that Discord's nonce check no longer helps
            old = (await t.child("bridge")).pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            t.discord.post_answers.set()
            await t.wait_child(lambda c: c.pid != old and CONNECTED in c.detail, "bridge", 60)
            await answered(t, [m])
            assert replies_to(t, m["id"]) == [first]
            closes = [r for r in read_lines(t.state / "receipts" / "bridge.jsonl") if r["delivery_id"] == m["id"]
                      and r["outcome"] == "settled"]
            assert [c["message_ids"] for c in closes] == [[first.id]]

    asyncio.run(main())


def test_a_killed_supervisor_and_a_new_clankie_run_lose_nothing(tmp_path: Path, runtime_dir: Path) -> None:
    """The whole tree dies with its supervisor; a new `clankie run` on the same state answers everything."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=ROOMS, spares=False, hosts=False) as t:  # the whole tree dies, no child alone
            t.anthropic.gate = asyncio.Event()
            sent = await say(t, 2, "in-flight")
            await until(lambda: {m["id"] for m in sent} <= journaled(t), 20, "every delivery journaled")
            await until(lambda: len(t.anthropic.requests) >= len(ROOMS), 20, "a live run in every room")
            t.discord.gateway_open.clear()
            await t.kill_supervisor()
            await until(lambda: t.discord.connected == 0, 20, "the gateway session to drop with the tree")
            sent += await say(t, 1, "while-down")
            t.anthropic.gate.set()
            t.discord.gateway_open.set()
            await t.respawn()
            await t.ready()
            await answered(t, sent)
            nothing_lost(t, sent)

    asyncio.run(main())
