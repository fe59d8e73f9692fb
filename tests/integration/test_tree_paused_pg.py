"""Two real trees on one PostgreSQL (issue 34): a tree paused past its lease (every process SIGSTOPped, as a hung VM
or a partition looks) loses its shard to the other, and when it wakes it neither writes nor says anything more.

Tree A serves shard ``0/1`` and is in the middle of a turn (its model double holds the answer) when all its processes
are stopped. Its lease expires on the database's clock; tree B takes the shard at epoch 2, opens its gateway, reads
the gap back and answers the waiting question with what A was told before (the lane is in the database). Then A's
model answers and A is SIGCONTed: its lease is gone (its keeper finds the deadline passed, or the database refuses
its write at the old epoch), so the turn ends ``captain_shard_moved``: no second reply, no warning sign, and A's late
words never reach the lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

import psycopg
import pytest

from clankie.store.leases import tree_holder
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.hosts.isolation import descendants
from tests.integration.tree import CHAN, GUILD, PERSON, pg_tree
from tests.polling import until
from tests.postgres import lease_row, postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASES = {"CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2.5"}


def lane_text(dsn: str) -> str:
    """Everything the room's lane holds in the database, as one string."""
    with psycopg.connect(dsn) as conn:
        return json.dumps([r[0] for r in conn.execute("SELECT to_jsonb(r) FROM clankie_lane_record r").fetchall()])


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def test_a_tree_paused_past_its_lease_is_replaced_and_after_waking_writes_and_says_nothing(tmp_path: Path,
                                                                                         postgres_dsn: str) -> None:
    async def main() -> None:
        discord = FakeDiscord(guilds={GUILD: [CHAN]})
        await discord.start()
        try:
            async with pg_tree(tmp_path / "a", discord, postgres_dsn, serving=True, spares=False, hosts=False, env=LEASES) as a:
                a.anthropic.script(fa.text("noted"))
                assert (await a.ask("clankie, remember: the door code is 4711", 60)).content == "noted"
                async with pg_tree(tmp_path / "b", discord, postgres_dsn, serving=False, spares=False, hosts=False, env=LEASES) as b:
                    held_back = asyncio.Event()
                    a.anthropic.script(fa.text("too late: 4711", stall_after=2, stall_until=held_back))
                    b.anthropic.script(fa.text("it is 4711"))
                    asked = await discord.message(CHAN, "clankie, what is the door code?", author_id=PERSON)
                    await until(lambda: len(a.anthropic.requests) == 2, 60, "A's model asked the question")

                    paused = [a.proc.pid, *(p.pid for p in descendants(a.proc.pid))]
                    signal_all(paused, signal.SIGSTOP)  # the whole machine hangs, its sockets open
                    try:
                        answer = await b.reply_to(str(asked["id"]), 90)
                        assert answer.content == "it is 4711"
                        seen = json.dumps(b.anthropic.requests[-1]["messages"])
                        assert "remember: the door code is 4711" in seen  # A's lane, from the database
                        assert lease_row(postgres_dsn) == (tree_holder(b.state), 2)
                        held_back.set()  # A's model answers while A sleeps: the words wait in its socket
                    finally:
                        signal_all(list(reversed(paused)), signal.SIGCONT)

                    closing = await until(lambda: a.outcome_of(str(asked["id"])), 90, "A's turn closed")
                    assert (closing["outcome"], closing.get("reason")) == ("failed", "captain_shard_moved")
                    assert [p.content for p in discord.posts_in(CHAN)] == ["noted", "it is 4711"]  # no second reply
                    assert discord.reactions == {}  # and no warning sign after B's answer
                    assert "too late" not in lane_text(postgres_dsn)  # A's late words never reached the lane
                    assert lease_row(postgres_dsn) == (tree_holder(b.state), 2)  # A did not take it back

                    b.anthropic.script(fa.text("still 4711"))
                    again = await discord.message(CHAN, "clankie, and now?", author_id=PERSON)
                    assert (await b.reply_to(str(again["id"]), 60)).content == "still 4711"
                    assert len(a.anthropic.requests) == 2  # A asked its model nothing more
                    assert [p.content for p in discord.posts_in(CHAN)] == ["noted", "it is 4711", "still 4711"]
        finally:
            await discord.close()

    asyncio.run(main())
