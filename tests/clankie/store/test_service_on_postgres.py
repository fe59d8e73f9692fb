"""The real service in the PostgreSQL profile (``CLANKIE_STORE=postgres``) against a real PostgreSQL: it takes its
shard's lease, keeps each lane's session tree, its spend ledger and its delivery records in the database and nothing
of them on disk, and a restarted service (nothing in memory, no files) answers with what the room told it before; a
delivery one tree's service settled is answered with its stored result by another tree's service that took the
shard, not run again; once another tree took the shard, it drops the shard's lanes and writes nothing more for it;
the memory comes back with the shard."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from clankie.clock import SystemClock
from clankie.errors import RemoteError
from clankie.protocol import TurnResult
from clankie.store import database
from clankie.store.lanes_pg import PgLaneTrees
from clankie.store.leases import Fence
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.agent.session import SessionTree
from service.app import ServiceApp
from service.captain.deliveries.store import RunIt, fingerprint, reckon
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service

LANE = "rooms/discord%3Aclankie%3Adiscord%3A1%3A2"  # the lane of msg()'s room (guild 1, channel 2) in the database
QUESTION = msg("m1", "what is the door code?")


@contextlib.asynccontextmanager
async def a_turn_at_the_model(pg_env: dict[str, str]) -> AsyncIterator[tuple[ServiceApp, asyncio.Task[TurnResult],
                                                                          asyncio.Event]]:
    """A service in the PostgreSQL profile with one turn (:data:`QUESTION`) in flight: the model was asked, and its
    answer stalls until the yielded event is set (set at the end in any case)."""
    async with FakeAnthropic() as fake:
        never = asyncio.Event()
        fake.script(fa.text("too late", stall_after=2, stall_until=never))
        async with service(pg_env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            turn = bridge.start(QUESTION)
            await until(lambda: len(fake.requests) == 1, what="the model asked")
            try:
                yield app, turn, never
            finally:
                never.set()


def test_a_restarted_service_recalls_a_rooms_memory_from_postgresql(env: dict[str, str], postgres_dsn: str,
                                                                    state_dir: Path) -> None:
    database.prepare(postgres_dsn)  # what `clankie run` does before it starts any child
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn}

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("noted"), fa.text("it is 4711"))
            async with service(pg_env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                first = await bridge.submit(msg("m1", "remember: the door code is 4711"))
                assert first.outcome == "settled"
                with psycopg.connect(postgres_dsn) as conn:
                    held = conn.execute("SELECT holder, epoch FROM clankie_shard_lease WHERE shard = '0/1'").fetchone()
                assert app.pg is not None and held == (app.pg.holder, 1)  # the service holds its shard
            async with service(pg_env, fake) as again:  # a new service: its lanes come back from the database only
                bridge = FakeBridge()
                await bridge.connect(again)
                second = await bridge.submit(msg("m2", "what is the door code?"))
                assert (second.outcome, second.text) == ("settled", "it is 4711")
            asked = json.dumps(fake.requests[-1]["messages"])
            assert "remember: the door code is 4711" in asked and "noted" in asked

    run(body())
    assert not (state_dir / "captain" / "rooms").exists(), "no lane's tree was written to the disk"
    assert not (state_dir / "captain" / "spend").exists(), "no ledger line was written to the disk"
    assert not (state_dir / "captain" / "deliveries").exists(), "no delivery record was written to the disk"
    with psycopg.connect(postgres_dsn) as conn:
        segments = conn.execute("SELECT lane, shard, written_epoch FROM clankie_lane_segment").fetchall()
        calls = conn.execute("SELECT shard, written_epoch FROM clankie_spend_line "
                             "WHERE record->>'kind' = 'call' ORDER BY id").fetchall()
        lease = conn.execute("SELECT holder, epoch FROM clankie_shard_lease WHERE shard = '0/1'").fetchone()
    assert {lane for lane, _, _ in segments} == {LANE}
    assert {shard for _, shard, _ in segments} == {"0/1"}
    assert calls == [("0/1", 1), ("0/1", 2)]  # each service wrote under its own lease's epoch
    assert lease == (None, 2), "a service that stops hands its shard back at once"


def test_a_delivery_another_tree_settled_is_answered_with_its_result_and_not_run_again(
        env: dict[str, str], postgres_dsn: str, state_dir: Path, tmp_path: Path) -> None:
    """Tree A's service runs and settles a delivery, then its lease runs out (a dead tree: it never hands the shard
    back). Tree B's service, another tree's (its own state dir, so another holder), takes the shard at epoch 2; its
    bridge's drain re-submits the delivery, same id and body: B answers with A's stored result and the model sees no
    new request. The same id with another body is a conflict at B too; a new delivery B runs. Nothing of the
    records is on either tree's disk."""
    database.prepare(postgres_dsn)
    slow = {"CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn,
            "CLANKIE_LEASE_RENEW_SECONDS": "30", "CLANKIE_LEASE_TTL_SECONDS": "61"}  # A does not renew meanwhile
    env_a = {**env, **slow}
    b_state = tmp_path / "tree-b"
    b_state.mkdir(mode=0o700)

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("the answer is 42"), fa.text("hello from B"))
            async with service(env_a, fake) as a:
                bridge_a = FakeBridge()
                await bridge_a.connect(a)
                first = await bridge_a.submit(msg("m1", "what is the answer?"))
                assert (first.outcome, first.text) == ("settled", "the answer is 42")
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # tree A dies: its lease runs out
                    conn.execute("UPDATE clankie_shard_lease SET expires_at = now() WHERE shard = '0/1'")
                with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as b_runtime:
                    env_b = {**env_a, "CLANKIE_STATE": str(b_state), "CLANKIE_RUNTIME_DIR": b_runtime,
                             "HOME": str(b_state)}
                    async with service(env_b, fake) as b:
                        assert a.pg is not None and b.pg is not None and b.pg.holder != a.pg.holder
                        fence = b.pg.fence("0/1")
                        assert fence is not None and fence.epoch == 2  # B took the shard at a new epoch
                        bridge_b = FakeBridge()
                        await bridge_b.connect(b)
                        again = await bridge_b.submit(msg("m1", "what is the answer?"))  # the drain's re-submission
                        assert again == first
                        assert len(fake.requests) == 1, "the model was not asked again"
                        with pytest.raises(RemoteError) as conflict:
                            await bridge_b.submit(msg("m1", "another body under the same id"))
                        assert conflict.value.code == "delivery_conflict"
                        fresh = await bridge_b.submit(msg("m2", "hello?"))
                        assert (fresh.outcome, fresh.text) == ("settled", "hello from B")
                        assert b.turns.evidence.of("m1") == []  # B never accepted m1: no turn of its own

    run(body(), timeout=60)
    for state in (state_dir, b_state):
        assert not (state / "captain" / "deliveries").exists(), "no delivery record was written to the disk"
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT delivery_id, shard, settled, written_epoch FROM clankie_delivery "
                            "ORDER BY delivery_id").fetchall()
    assert rows == [("m1", "0/1", True, 1), ("m2", "0/1", True, 2)]  # each settled under its tree's epoch


def test_a_service_whose_shard_was_taken_writes_nothing_for_it(env: dict[str, str], postgres_dsn: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Once another tree holds the room's shard at a higher epoch, the service's next turn in that room is not
    answered and leaves nothing in the database: the turn's first write, its delivery record, is refused by the
    database's check and counted, so the turn is not run (``captain_shard_moved``: that tree answers it), the model
    is never asked and nothing is charged. (Renews are slow here, so the service has not noticed the loss and
    dropped the lane: the refusal is the write's own.)"""
    database.prepare(postgres_dsn)
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn,
              "CLANKIE_LEASE_RENEW_SECONDS": "30", "CLANKIE_LEASE_TTL_SECONDS": "61"}

    def rows() -> tuple[object, ...]:
        with psycopg.connect(postgres_dsn) as conn:
            found = conn.execute("SELECT (SELECT count(*) FROM clankie_lane_record), "
                                 "(SELECT count(*) FROM clankie_spend_line), "
                                 "(SELECT count(*) FROM clankie_delivery)").fetchone()
        assert found is not None
        return tuple(found)

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("noted"), fa.text("never written"))
            async with service(pg_env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                assert (await bridge.submit(msg("m1", "remember: the door code is 4711"))).outcome == "settled"
                before = rows()
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # tree B takes the shard over
                    conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                                 "expires_at = now() + interval '1 minute' WHERE shard = '0/1'")
                late = await bridge.submit(msg("m2", "what is the door code?"))
                assert (late.outcome, late.code, late.text) == ("failed", "captain_shard_moved", "")
                assert rows() == before
                assert len(fake.requests) == 1
                assert app.pg is not None and app.pg.deliveries.stale_writes == 1 and app.pg.lanes.stale_writes == 0

    with caplog.at_level(logging.WARNING):
        run(body())
    assert "no longer holds the room's shard" in caplog.text


def test_a_lost_shard_drops_its_lanes_and_its_memory_comes_back_with_the_shard(env: dict[str, str],
                                                                              postgres_dsn: str) -> None:
    """Tree B takes the shard: the service's next renew is refused and it drops the room's lane from memory at once
    (before it tried to write). What tree B's lane learned while it held the shard is in the database; when B hands
    the shard back, the service takes it at a higher epoch and the room's next turn carries both what the service
    was told and what B was told."""
    database.prepare(postgres_dsn)
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn,
              "CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2"}

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("noted"), fa.text("it is 9999 now"))
            async with service(pg_env, fake) as app:
                assert app.pg is not None
                bridge = FakeBridge()
                await bridge.connect(app)
                assert (await bridge.submit(msg("m1", "remember: the door code is 4711"))).outcome == "settled"
                assert len(app.captain.lanes) == 1
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                    row = conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                                       "expires_at = now() + interval '1 minute' WHERE shard = '0/1' RETURNING epoch").fetchone()
                assert row is not None
                b_epoch = int(str(row[0]))
                await until(lambda: not app.captain.lanes, what="the lost shard's lane dropped from memory")
                assert app.pg.fence("0/1") is None

                tree_b = PgLaneTrees(app.pg.pool, {"0/1": Fence("0/1", "tree-b", b_epoch)}.get)

                def b_is_told() -> None:  # tree B's process, not this loop: the service's keeper keeps asking for the
                    # shard meanwhile, and its acquire holds the row FOR UPDATE across awaits; a synchronous write on
                    # this loop would wait for that lock while blocking the loop that would release it
                    lane_b = SessionTree.open_latest(tree_b.lane(LANE, (0, 1)), SystemClock())
                    lane_b.append_message({"role": "user", "content": [{"type": "text", "text": "the code changed to 9999"}]})
                    lane_b.append_custom("run_end", {"outcome": "ok"})

                await asyncio.to_thread(b_is_told)
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # B hands the shard back
                    conn.execute("UPDATE clankie_shard_lease SET holder = NULL, expires_at = '-infinity' WHERE shard = '0/1'")
                fence = await until(lambda: app.pg.fence("0/1") if app.pg else None, what="the shard taken back")
                assert fence.epoch == b_epoch + 1

                second = await bridge.submit(msg("m2", "what is the door code now?"))
                assert (second.outcome, second.text) == ("settled", "it is 9999 now")
                assert app.pg.lanes.stale_writes == 0, "the lane was dropped before it tried to write"
            asked = json.dumps(fake.requests[-1]["messages"])
            assert "the door code is 4711" in asked and "the code changed to 9999" in asked

    run(body(), timeout=60)


def test_a_run_live_when_the_shard_is_lost_fails_as_moved_at_once(env: dict[str, str], postgres_dsn: str) -> None:
    """The model is still answering when another tree takes the room's shard: the service's next renew is refused, the
    lane is dropped and its live run aborted. The turn fails ``captain_shard_moved`` (the bridge shows no sign for it:
    the other tree answers the room), not ``shutting_down``, which would leave the bridge waiting for a restart of a
    service that is not stopping."""
    database.prepare(postgres_dsn)
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn,
              "CLANKIE_LEASE_RENEW_SECONDS": "0.5", "CLANKIE_LEASE_TTL_SECONDS": "2"}

    async def body() -> None:
        async with a_turn_at_the_model(pg_env) as (_app, turn, _never):
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # tree B takes the shard over
                conn.execute("UPDATE clankie_shard_lease SET holder = 'tree-b', epoch = epoch + 1, "
                             "expires_at = now() + interval '1 minute' WHERE shard = '0/1'")
            result = await asyncio.wait_for(turn, 30)
            assert (result.outcome, result.code, result.text) == ("failed", "captain_shard_moved", "")

    run(body(), timeout=60)


def test_the_service_keeps_its_preferred_shards_and_with_takeover_any_joins_every_other() -> None:
    """The service takes (and claims back) the shards its tree prefers; with ``any`` it keeps a keeper for every
    other shard of the count that only joins its tree's lease (its bridge takes such a shard; the service follows)."""
    from clankie import settings
    from clankie.store.leases import Want
    from service.captain.pg_stores import shard_wants

    base = {"HOME": "/h", "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": "host=/x",
            "CLANKIE_DISCORD_SHARD_COUNT": "3", "CLANKIE_DISCORD_SHARD_IDS": "1"}
    assert shard_wants(settings.load(base)) == {"1/3": Want.PREFER}
    assert shard_wants(settings.load({**base, "CLANKIE_DISCORD_SHARD_TAKEOVER": "any"})) == {
        "1/3": Want.PREFER, "0/3": Want.JOIN, "2/3": Want.JOIN}
    assert shard_wants(settings.load({"HOME": "/h", "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": "host=/x"})) == {
        "0/1": Want.PREFER}


def test_a_turn_whose_shard_moved_is_handed_back_unanswered(env: dict[str, str], postgres_dsn: str) -> None:
    """The shard's lanes are dropped while the model is answering (what a lost lease does), and the lease is still
    this tree's when the turn ends (taken back at once): the turn fails ``captain_shard_moved`` and keeps no result.
    Its record is handed back unsettled with its run forgotten, so the tree that serves the shard runs it, uncharged;
    a failure kept in the database would be that tree's answer and the room would never get one."""
    database.prepare(postgres_dsn)
    pg_env = {**env, "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": postgres_dsn}

    async def body() -> None:
        async with a_turn_at_the_model(pg_env) as (app, turn, never):
            assert app.captain.stop_serving(lambda room: True) == 1
            result = await asyncio.wait_for(turn, 30)
            assert (result.outcome, result.code) == ("failed", "captain_shard_moved")
            never.set()
            assert app.pg is not None and app.pg.fence("0/1") is not None  # the lease is still this tree's
            assert reckon(app.store.load("m1"), fingerprint(QUESTION), 3, tree="another-tree") == RunIt(())
        with psycopg.connect(postgres_dsn) as conn:
            row = conn.execute("SELECT settled, run FROM clankie_delivery WHERE delivery_id = 'm1'").fetchone()
        assert row == (False, None)

    run(body(), timeout=60)
