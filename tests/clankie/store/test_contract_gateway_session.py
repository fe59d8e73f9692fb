"""Each shard's gateway session, one contract run against both adapters (files: the bridge's gateway-session.json;
postgres: one fenced row per shard). What it promises: what READY gave is there to RESUME with, after a restart too;
the journaled sequence only moves forward; a session given up is gone; shards never mix."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge.gateway_session import FILENAME
from clankie.store.bridge_pg import PgGatewaySessions
from clankie.store.leases import Fence, StaleEpoch
from clankie.store.ports import SessionRecord
from tests.clankie.store.backends import Backend, FilesBackend, PostgresBackend

SESSION = SessionRecord("5f1c0ffee", "wss://gateway-us-east1-b.discord.gg", 41, 1_800_000_000.0)
OTHER = SessionRecord("a77e", "wss://gateway-us-east1-c.discord.gg", None, 1_800_000_100.0)


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "files":
        return FilesBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


def test_nothing_kept_means_identify(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            assert await store.load((0, 1)) is None

    asyncio.run(main())


def test_a_saved_session_is_there_to_resume_after_a_restart(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            await store.save((0, 1), SESSION)
            assert await store.load((0, 1)) == SESSION
        async with backend.sessions() as store:
            assert await store.load((0, 1)) == SESSION

    asyncio.run(main())


def test_the_sequence_moves_forward_only(backend: Backend) -> None:
    """A late, lower sequence (an event journaled out of order) never sends a RESUME back over handled events."""
    async def main() -> None:
        async with backend.sessions() as store:
            await store.save((0, 1), SESSION)
            await store.advance((0, 1), 57)
            await store.advance((0, 1), 50)
        async with backend.sessions() as store:
            kept = await store.load((0, 1))
        assert kept == SessionRecord(SESSION.session_id, SESSION.resume_url, 57, SESSION.since)

    asyncio.run(main())


def test_a_session_without_a_sequence_takes_the_first_one(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            await store.save((0, 1), OTHER)
            await store.advance((0, 1), 0)
            kept = await store.load((0, 1))
        assert kept is not None and kept.seq == 0

    asyncio.run(main())


def test_advancing_a_shard_with_no_session_keeps_nothing(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            await store.advance((0, 1), 9)
            assert await store.load((0, 1)) is None

    asyncio.run(main())


def test_a_new_session_replaces_the_old_one_whole(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            await store.save((0, 1), SESSION)
            await store.save((0, 1), OTHER)
            assert await store.load((0, 1)) == OTHER

    asyncio.run(main())


def test_a_session_given_up_is_gone_after_a_restart(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            await store.save((0, 1), SESSION)
            await store.forget((0, 1))
        async with backend.sessions() as store:
            assert await store.load((0, 1)) is None

    asyncio.run(main())


def test_shards_keep_their_own_sessions(backend: Backend) -> None:
    async def main() -> None:
        async with backend.sessions() as store:
            await store.save((0, 2), SESSION)
            await store.save((1, 2), OTHER)
            await store.advance((1, 2), 3)
            await store.forget((0, 2))
        async with backend.sessions() as store:
            assert await store.load((0, 2)) is None
            assert await store.load((1, 2)) == SessionRecord(OTHER.session_id, OTHER.resume_url, 3, OTHER.since)

    asyncio.run(main())


def test_the_file_adapter_writes_the_file_the_bridge_reads_today(tmp_path: Path) -> None:
    """Same path, same format as bridge/gateway_session.py's SessionKeeper: the two can take each other's place."""
    async def main() -> None:
        async with FilesBackend(tmp_path).sessions() as store:
            await store.save((0, 1), SESSION)

    asyncio.run(main())
    raw = json.loads((tmp_path / "bridge" / FILENAME).read_text())
    assert raw["v"] == 1 and raw["sessions"] == [{"shard": [0, 1], "session_id": SESSION.session_id,
                                                  "resume_url": SESSION.resume_url, "seq": 41, "since": SESSION.since}]


def test_in_postgres_the_old_holders_sequence_never_lands_after_a_takeover(postgres_dsn: str) -> None:
    """The tree that took the shard keeps the session it resumed; the old holder, woken, cannot move it."""
    backend = PostgresBackend(postgres_dsn)

    async def main() -> None:
        async with backend.leases() as leases:
            old = backend.fences["0/1"]
            await PgGatewaySessions(leases, backend.fences.get).save((0, 1), SESSION)
            assert await leases.release(old)
            epoch = await leases.acquire("0/1", "tree-b", 600.0)
            assert epoch is not None
            taker = PgGatewaySessions(leases, {"0/1": Fence("0/1", "tree-b", epoch)}.get)
            assert await taker.load((0, 1)) == SESSION  # what the new holder RESUMEs with
            await taker.advance((0, 1), 60)
            with pytest.raises(StaleEpoch):
                await PgGatewaySessions(leases, backend.fences.get).advance((0, 1), 99)
            assert await taker.load((0, 1)) == SessionRecord(SESSION.session_id, SESSION.resume_url, 60, SESSION.since)

    asyncio.run(main())
