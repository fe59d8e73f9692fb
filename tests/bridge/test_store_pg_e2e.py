"""The bridge's durable memory in the postgres profile, through a real bridge (discord.py on the loopback Discord) on a
real PostgreSQL: the store writer's counts in the heartbeat and the status line (bridge/app.py ``heartbeat``,
bridge/store_writer.py), and an id the bridge forgets (``Ingress.forget`` → ``on_forget`` → the writer's discard)
let go in the database too, so that the next tree to serve the shard answers its re-delivery."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from clankie.store import database
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, GUILD, PERSON, running
from tests.postgres import postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

DEAD_HOST = "bridge-node-07.rack-3.eu-central.internal.example-operator.net"  # 61 characters: a host name may have 64


def remembered(dsn: str, message_id: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM clankie_dedupe WHERE message_id = %s", (message_id,)).fetchone() is not None


def execute(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.encode())


def postgres(env: dict[str, str], dsn: str, renew: str, ttl: str) -> dict[str, str]:
    return {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn,
            "CLANKIE_LEASE_RENEW_SECONDS": renew, "CLANKIE_LEASE_TTL_SECONDS": ttl}


def test_the_heartbeat_carries_the_writers_counts_and_the_status_line_says_changes_dropped(
        env: dict[str, str], postgres_dsn: str) -> None:
    """Written: an admitted id lands, the counts say so and the status line says nothing of the store. Dropped: the
    dedupe table gone (renamed away), the next id fails its three tries and is dropped: counted, and the status line
    says ``store: 1 changes dropped``. Refused: the lease taken by another tree under the bridge (its fake clock has
    not let it notice), the next id is refused by the fence: counted as refused, not dropped. The shard was taken
    over from a dead tree on a host with a long name, so the status line also names that takeover: the drops are
    said all the same (the line is cut at 200 characters; they came after the leases' part and were cut off)."""
    database.prepare(postgres_dsn)
    execute(postgres_dsn, f"INSERT INTO clankie_shard_lease (shard, holder, epoch, expires_at) VALUES "
                          f"('0/1', '{DEAD_HOST}:1a2b3c4d', 1, now() - interval '1 second')")  # expired: taken over
    clock = FakeClock()  # the keeper renews, and the writer retries, only when the test moves the clock

    def beat(h: Any) -> tuple[dict[str, object], str]:
        """One heartbeat's ``store`` (checked against the writer's own counts at that moment) and its status line."""
        heartbeat, writer = h.app.heartbeat(), h.app.store
        report = heartbeat.report["store"]
        assert report == {"written": writer.written, "refused": writer.refused, "dropped": writer.dropped,
                          "pending": len(writer.pending)}
        return report, heartbeat.detail

    async def main() -> None:
        async with running(postgres(env, postgres_dsn, "10", "60"), clock=clock,
                           fake=FakeDiscord(guilds={GUILD: [CHAN]})) as h:
            writer, leases = h.app.store, h.app.leases
            assert writer is not None and leases is not None
            await h.until(lambda: leases.takeover is not None, what="the takeover read")
            first = str((await h.fake.message(CHAN, "clankie, one", author_id=PERSON))["id"])
            await h.until(lambda: remembered(postgres_dsn, first) and not writer.pending, what="the first id written")
            report, detail = beat(h)
            assert (report["refused"], report["dropped"]) == (0, 0) and "store:" not in detail
            assert writer.written >= 2  # the session's READY, the id admitted (and a moving sequence, the prune)

            execute(postgres_dsn, "ALTER TABLE clankie_dedupe RENAME TO clankie_dedupe_away")
            await h.fake.message(CHAN, "clankie, two", author_id=PERSON)

            def dropped() -> bool:
                clock.advance(10.0)  # the writer's retry (a renew period) comes; the keeper renews on the way
                return writer.dropped == 1 and not writer.pending

            await h.until(dropped, what="the second id dropped after its tries")
            execute(postgres_dsn, "ALTER TABLE clankie_dedupe_away RENAME TO clankie_dedupe")
            report, detail = beat(h)
            assert (report["refused"], report["dropped"]) == (0, 1) and "; store: 1 changes dropped" in detail, detail

            execute(postgres_dsn, "UPDATE clankie_shard_lease SET holder = 'elsewhere', epoch = epoch + 1, "
                                  "expires_at = now() + interval '1 hour'")
            third = str((await h.fake.message(CHAN, "clankie, three", author_id=PERSON))["id"])
            await h.until(lambda: writer.refused >= 1 and not writer.pending, what="the third id refused")
            assert not remembered(postgres_dsn, third)
            report, detail = beat(h)
            assert report["refused"] == writer.refused >= 1 and report["dropped"] == 1
            assert "; store: 1 changes dropped" in detail  # a fenced refusal is not a drop

    asyncio.run(main())


def test_an_id_the_bridge_forgets_leaves_the_database_and_the_next_tree_answers_its_redelivery(
        env: dict[str, str], postgres_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Tree A admits a message, but its journal's connection was cut (the server ended it): the admit line is refused,
    the delivery fails and A forgets the id, in memory and, through its store writer, in the database: the row its
    admission wrote is gone. A stops; tree B (another state directory) takes the shard once A's lease expires, opens
    a new session (the stored one is given up here, so the room's history is read back), finds the message and
    answers it. Had the database kept the id, B would have recalled it and taken the message for a duplicate."""
    database.prepare(postgres_dsn)
    fake = FakeDiscord(guilds={GUILD: [CHAN]})
    other = tmp_path / "b"
    b_env = {"CLANKIE_STATE": str(other / "state"), "CLANKIE_RUNTIME_DIR": str(other / "run"), "HOME": str(other)}

    async def main() -> None:
        async with running(postgres(env, postgres_dsn, "1", "4"), fake=fake) as a:
            writer = a.app.store
            assert writer is not None
            await a.until(lambda: not a.app.journal.state.gaps, what="A's first read-back done")
            pool = a.app._journal_pool  # the journal's own pool: its one connection is cut by the server
            assert pool is not None
            with pool.connection() as conn:
                pid = conn.info.backend_pid
            execute(postgres_dsn, f"SELECT pg_terminate_backend({pid})")
            said = str((await fake.message(CHAN, "clankie, are you there?", author_id=PERSON))["id"])
            await a.until(lambda: f"delivery {said}: journal refused it (database_unavailable)" in caplog.text
                          and said not in a.app.ingress.dedupe, what="A's failed delivery")
            await asyncio.wait_for(writer.drained(), 30)  # every change made so far written (a change in flight too)
            assert a.service.submits == [] and writer.refused == writer.dropped == 0
            assert not remembered(postgres_dsn, said)  # admitted (written), then forgotten (discarded): gone
        execute(postgres_dsn, "DELETE FROM clankie_gateway_session")  # B identifies: the history is read back
        async with running(postgres(b_env, postgres_dsn, "1", "4"), fake=fake, wait_connected=False) as b:
            await b.until(lambda: len(fake.posts_in(CHAN)) == 1, timeout=30, what="B's answer")
            assert [s.delivery_id for s in b.service.submits] == [said]

    asyncio.run(main())
