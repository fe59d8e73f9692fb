"""The bridge's durable memory on PostgreSQL: the dedupe memory and each shard's gateway session, fenced.

The PostgreSQL adapters of :class:`~clankie.store.ports.DedupeStore` and
:class:`~clankie.store.ports.GatewaySessionStore`. Reads need no lease; every write runs in
:meth:`~clankie.store.leases.PgLeases.fenced` with the fence of the shard it concerns, so a tree that lost the shard
(paused past its lease, cut off) has its late writes refused (:class:`~clankie.store.leases.StaleEpoch`) and
counted, and writes nothing. ``fence_for`` is the tree's view of its leases: the :class:`~clankie.store.leases.Fence`
of a shard it serves, or None (then the write is refused here, before the database, with :class:`NotHeld`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from clankie.store.leases import FenceFor, NotHeld, PgLeases, SyncFencing, shard_name
from clankie.store.leases import held_fence as _fence
from clankie.store.ports import SeenAs, SessionRecord, Shard, fingerprint_key

__all__ = ["Copied", "FenceFor", "NotHeld", "PgDedupe", "PgGatewaySessions", "copy_dedupe"]

COPY_BATCH = 5000
"""Ids written per fenced transaction by :func:`copy_dedupe`."""


class PgDedupe:
    """The dedupe memory of one shard's messages (message ids are unique across shards: snowflakes)."""

    def __init__(self, leases: PgLeases, shard: Shard, fence_for: FenceFor) -> None:
        self.leases, self.shard, self.fence_for = leases, shard_name(*shard), fence_for

    async def check(self, message_id: str, fingerprint: str, now: float) -> SeenAs:
        async with self.leases.pool.connection() as conn:
            cur = await conn.execute("SELECT fingerprint, expires FROM clankie_dedupe WHERE message_id = %s", (message_id,))
            row = await cur.fetchone()
        if row is None or float(str(row[1])) <= now:
            return "new"
        return "same" if int(str(row[0])) == fingerprint_key(fingerprint) else "conflict"

    async def add(self, message_id: str, fingerprint: str, expires: float) -> None:
        fence = _fence(self.fence_for, self.shard)
        async with self.leases.fenced(fence) as conn:
            await conn.execute(
                """
                INSERT INTO clankie_dedupe (message_id, shard, fingerprint, expires, written_epoch)
                VALUES (%s, %s, %s, %s, %s)
                ON CONFLICT (message_id) DO UPDATE
                    SET shard = excluded.shard, fingerprint = excluded.fingerprint, expires = excluded.expires,
                        written_epoch = excluded.written_epoch
                """,
                (message_id, self.shard, fingerprint_key(fingerprint), expires, fence.epoch),
            )

    async def discard(self, message_id: str) -> None:
        async with self.leases.fenced(_fence(self.fence_for, self.shard)) as conn:
            await conn.execute("DELETE FROM clankie_dedupe WHERE message_id = %s AND shard = %s", (message_id, self.shard))

    async def prune(self, now: float) -> None:
        async with self.leases.fenced(_fence(self.fence_for, self.shard)) as conn:
            await conn.execute("DELETE FROM clankie_dedupe WHERE shard = %s AND expires <= %s", (self.shard, now))

    async def recent(self, now: float, limit: int) -> list[tuple[str, int, float]]:
        """This shard's ids unexpired at ``now``, the latest expiries first, at most ``limit``: (message id, the
        fingerprint's key as stored (:func:`~clankie.store.ports.fingerprint_key`), expiry). A tree taking the shard
        loads them into its memory: what the last holder admitted is a duplicate to it too."""
        async with self.leases.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT message_id, fingerprint, expires FROM clankie_dedupe WHERE shard = %s AND expires > %s "
                "ORDER BY expires DESC LIMIT %s", (self.shard, now, limit))
            return [(str(r[0]), int(str(r[1])), float(str(r[2]))) for r in await cur.fetchall()]

    async def close(self) -> None:
        """Nothing to do: every add committed."""


class PgGatewaySessions:
    """Each shard's gateway session, one row per shard."""

    def __init__(self, leases: PgLeases, fence_for: FenceFor) -> None:
        self.leases, self.fence_for = leases, fence_for

    async def load(self, shard: Shard) -> SessionRecord | None:
        async with self.leases.pool.connection() as conn:
            cur = await conn.execute("SELECT session_id, resume_url, seq, since FROM clankie_gateway_session WHERE shard = %s",
                                     (shard_name(*shard),))
            row = await cur.fetchone()
        if row is None:
            return None
        return SessionRecord(str(row[0]), str(row[1]), None if row[2] is None else int(str(row[2])), float(str(row[3])))

    async def save(self, shard: Shard, record: SessionRecord) -> None:
        name = shard_name(*shard)
        fence = _fence(self.fence_for, name)
        async with self.leases.fenced(fence) as conn:
            await conn.execute(
                """
                INSERT INTO clankie_gateway_session (shard, session_id, resume_url, seq, since, written_epoch)
                VALUES (%s, %s, %s, %s, %s, %s)
                ON CONFLICT (shard) DO UPDATE
                    SET session_id = excluded.session_id, resume_url = excluded.resume_url, seq = excluded.seq,
                        since = excluded.since, written_epoch = excluded.written_epoch
                """,
                (name, record.session_id, record.resume_url, record.seq, record.since, fence.epoch),
            )

    async def advance(self, shard: Shard, seq: int) -> None:
        name = shard_name(*shard)
        fence = _fence(self.fence_for, name)
        async with self.leases.fenced(fence) as conn:
            await conn.execute(
                "UPDATE clankie_gateway_session SET seq = greatest(coalesce(seq, -1), %s), written_epoch = %s WHERE shard = %s",
                (seq, fence.epoch, name),
            )

    async def forget(self, shard: Shard) -> None:
        name = shard_name(*shard)
        async with self.leases.fenced(_fence(self.fence_for, name)) as conn:
            await conn.execute("DELETE FROM clankie_gateway_session WHERE shard = %s", (name,))

    async def close(self) -> None:
        """Nothing to do: every write committed."""


@dataclass
class Copied:
    """What :func:`copy_dedupe` did: ids written, ids found there alike, ids found there otherwise (not overwritten),
    and the ids the read-back found as written (copied + alike, or the copy is short)."""

    copied: int = 0
    alike: int = 0
    differing: list[str] = field(default_factory=list)
    read_back: int = 0


COPY_SQL = b"""
INSERT INTO clankie_dedupe (message_id, shard, fingerprint, expires, written_epoch)
SELECT m, %(shard)s, f, e, %(epoch)s FROM unnest(%(ids)s::text[], %(fps)s::bigint[], %(expires)s::float8[]) AS t(m, f, e)
ON CONFLICT (message_id) DO NOTHING RETURNING message_id
"""
FOUND_SQL = b"SELECT message_id, shard, fingerprint, expires FROM clankie_dedupe WHERE message_id = ANY(%s::text[])"
READ_BACK_SQL = b"""
SELECT count(*) FROM clankie_dedupe d
JOIN unnest(%(ids)s::text[], %(fps)s::bigint[], %(expires)s::float8[]) AS t(m, f, e)
  ON d.message_id = t.m AND d.fingerprint = t.f AND d.expires = t.e
WHERE d.shard = %(shard)s
"""


def copy_dedupe(fencing: SyncFencing, shard: str, entries: Sequence[tuple[str, int, float]]) -> Copied:
    """History written once (``clankie migrate --to postgres``): each remembered id of ``shard`` as (message id, the
    fingerprint's key as stored (:func:`~clankie.store.ports.fingerprint_key`), expiry), written under the shard's
    fence unless the id is in the table already. One there with the same shard, fingerprint and expiry is counted
    alike (a second run copies nothing); one there otherwise is reported and never overwritten. Each batch is one
    fenced transaction; the rows are then read back and counted."""
    done = Copied()
    for start in range(0, len(entries), COPY_BATCH):
        batch = entries[start:start + COPY_BATCH]
        params: dict[str, object] = {"shard": shard, "ids": [e[0] for e in batch], "fps": [e[1] for e in batch],
                                     "expires": [e[2] for e in batch]}
        with fencing.fenced(shard) as (conn, epoch):
            written = {str(r[0]) for r in conn.execute(COPY_SQL, {**params, "epoch": epoch}).fetchall()}
            rest = [e for e in batch if e[0] not in written]
            there = {str(r[0]): (str(r[1]), int(str(r[2])), float(str(r[3])))
                     for r in conn.execute(FOUND_SQL, ([e[0] for e in rest],)).fetchall()} if rest else {}
        done.copied += len(written)
        for message_id, fp, expires in rest:
            if there.get(message_id) == (shard, fp, expires):
                done.alike += 1
            else:
                done.differing.append(message_id)
        with fencing.pool.connection() as conn:
            row = conn.execute(READ_BACK_SQL, params).fetchone()
        done.read_back += int(str(row[0])) if row is not None else 0
    return done
