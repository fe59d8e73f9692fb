"""The dedupe memory's contract, one suite run against both adapters (files: today's memory and its snapshot;
postgres: fenced rows). What it promises: a message admitted once is known until it expires, by its body; forgetting
and expiring make it new again; and everything added is there after a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie.store.bridge_pg import NotHeld, PgDedupe
from clankie.store.leases import Fence, StaleEpoch
from tests.clankie.store.backends import RETENTION, Backend, FilesBackend, PostgresBackend

NOW = 1_800_000_000.0
ID = "1180000000000000001"  # a snowflake
LOCAL_ID = "m1"  # an id a local tool makes


@pytest.fixture(params=["files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "files":
        return FilesBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_dsn"))


def test_an_id_never_added_is_new(backend: Backend) -> None:
    async def main() -> None:
        async with backend.dedupe() as store:
            assert await store.check(ID, "body", NOW) == "new"

    asyncio.run(main())


@pytest.mark.parametrize("message_id", [ID, LOCAL_ID])
def test_an_added_id_is_the_same_with_its_body_and_a_conflict_with_another(backend: Backend, message_id: str) -> None:
    async def main() -> None:
        async with backend.dedupe() as store:
            await store.add(message_id, "body", NOW + RETENTION)
            assert await store.check(message_id, "body", NOW) == "same"
            assert await store.check(message_id, "another body", NOW) == "conflict"

    asyncio.run(main())


def test_an_id_is_new_again_once_it_expires(backend: Backend) -> None:
    """Known until its expiry, new from it on (the expiry itself counts as expired)."""
    async def main() -> None:
        async with backend.dedupe() as store:
            await store.add(ID, "body", NOW + RETENTION)
            assert await store.check(ID, "body", NOW + RETENTION - 1) == "same"
            assert await store.check(ID, "body", NOW + RETENTION) == "new"

    asyncio.run(main())


def test_a_discarded_id_is_new_again_and_the_others_stay(backend: Backend) -> None:
    async def main() -> None:
        async with backend.dedupe() as store:
            await store.add(ID, "body", NOW + RETENTION)
            await store.add(LOCAL_ID, "body", NOW + RETENTION)
            await store.discard(ID)
            assert (await store.check(ID, "body", NOW), await store.check(LOCAL_ID, "body", NOW)) == ("new", "same")

    asyncio.run(main())


def test_adding_again_takes_the_newer_body_and_expiry(backend: Backend) -> None:
    async def main() -> None:
        async with backend.dedupe() as store:
            await store.add(ID, "first", NOW + 10)
            await store.add(ID, "second", NOW + RETENTION)
            assert await store.check(ID, "second", NOW + 20) == "same"

    asyncio.run(main())


def test_everything_added_is_remembered_after_a_restart(backend: Backend) -> None:
    """A closed store reopened (the bridge restarted, or another tree took the shard) knows every id it was told."""
    ids = [str(1180000000000000000 + i) for i in range(50)]

    async def main() -> None:
        async with backend.dedupe() as store:
            for i, message_id in enumerate(ids):
                await store.add(message_id, f"body {i}", NOW + RETENTION)
            await store.discard(ids[7])
        async with backend.dedupe() as store:
            seen = [await store.check(message_id, f"body {i}", NOW) for i, message_id in enumerate(ids)]
        assert seen == ["same"] * 7 + ["new"] + ["same"] * 42

    asyncio.run(main())


def test_pruned_ids_are_gone_and_the_rest_survive_a_restart(backend: Backend) -> None:
    async def main() -> None:
        async with backend.dedupe() as store:
            await store.add("1180000000000000001", "old", NOW + 10)
            await store.add("1180000000000000002", "young", NOW + RETENTION)
            await store.prune(NOW + 10)
        async with backend.dedupe() as store:
            assert await store.check("1180000000000000001", "old", NOW) == "new"
            assert await store.check("1180000000000000002", "young", NOW) == "same"

    asyncio.run(main())


def test_in_postgres_a_tree_that_lost_the_shard_writes_nothing(postgres_dsn: str) -> None:
    """The PostgreSQL adapter fences every write: once another tree holds the shard at a higher epoch, the old
    holder's add is refused and counted and the memory keeps the new holder's word; a shard never held is refused
    before the database."""
    backend = PostgresBackend(postgres_dsn)

    async def main() -> None:
        async with backend.leases() as leases:
            old = backend.fences["0/1"]
            assert await leases.release(old)
            epoch = await leases.acquire("0/1", "tree-b", 600.0)
            assert epoch == old.epoch + 1
            stale = PgDedupe(leases, (0, 1), backend.fences.get)
            fresh = PgDedupe(leases, (0, 1), {"0/1": Fence("0/1", "tree-b", epoch)}.get)
            await fresh.add(ID, "the new holder's", NOW + RETENTION)
            with pytest.raises(StaleEpoch):
                await stale.add(ID, "the old holder's", NOW + RETENTION)
            with pytest.raises(StaleEpoch):
                await stale.discard(ID)
            assert leases.stale_writes == 2
            assert await fresh.check(ID, "the new holder's", NOW) == "same"
            with pytest.raises(NotHeld):
                await PgDedupe(leases, (0, 1), lambda shard: None).add("9", "x", NOW)
            assert leases.stale_writes == 2, "a write the tree knew it could not make is not a stale write"

    asyncio.run(main())
