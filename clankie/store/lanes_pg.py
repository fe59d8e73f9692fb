"""The lanes' session trees on PostgreSQL: a row per segment, a row per record, every write fenced.

The PostgreSQL adapter of :class:`~clankie.store.lane_ports.LaneTreeStore` (migration ``0003_lane_trees.sql``). A
lane's segment is a row of ``clankie_lane_segment`` (keyed by the lane key and the segment's name) that counts its
records; each record is a row of ``clankie_lane_record`` at its position (the header at 0). An append raises the
count and inserts at the old one in one transaction, so records keep their order and a failed append leaves
nothing. Renaming a segment (set aside) or deleting one carries its records with it (the foreign key cascades).

Reads need no lease. Every write runs in one transaction that first checks the lease of the lane's shard
(:data:`~clankie.store.leases.FENCE_SQL`): a tree that lost the shard (paused past its lease, cut off) has its late
appends refused (:class:`~clankie.store.leases.StaleEpoch`, counted in :attr:`PgLaneTrees.stale_writes` and
``clankie_stale_epoch_writes_total``), and a write for a shard the tree never held is refused before the database
(:class:`~clankie.store.leases.NotHeld`). The adapter is synchronous, as the port is: each write is one round trip on
the caller's thread.
"""

from __future__ import annotations

import logging

from psycopg.types.json import Json

from clankie.store.lane_ports import SEGMENT_SUFFIX, Record, TreeUnreadable
from clankie.store.leases import SyncFencing, shard_name
from clankie.store.ports import Shard

log = logging.getLogger(__name__)


class SegmentMissing(LookupError):
    """Raised for an append to a segment that is not in the database (the caller's tree is out of step)."""


class PgLaneTrees(SyncFencing):
    """Every lane's session tree in one database, reached through ``pool``; counts the stale writes it refused."""

    def lane(self, key: str, shard: Shard) -> PgLaneTree:
        """The store of lane ``key``, whose room is on ``shard`` (its writes carry that shard's fence)."""
        return PgLaneTree(self, key, shard_name(*shard))


class PgLaneTree:
    """One lane's segments."""

    def __init__(self, trees: PgLaneTrees, key: str, shard: str) -> None:
        self.trees, self.key, self.shard = trees, key, shard

    @property
    def label(self) -> str:
        return self.key

    def names(self) -> list[str]:
        with self.trees.pool.connection() as conn:
            rows = conn.execute("SELECT name FROM clankie_lane_segment WHERE lane = %s", (self.key,)).fetchall()
        return [str(r[0]) for r in rows]

    def newest(self) -> str | None:
        with self.trees.pool.connection() as conn:
            row = conn.execute(
                "SELECT name FROM clankie_lane_segment WHERE lane = %s AND right(name, %s) = %s ORDER BY name DESC LIMIT 1",
                (self.key, len(SEGMENT_SUFFIX), SEGMENT_SUFFIX),
            ).fetchone()
        return None if row is None else str(row[0])

    def read(self, name: str) -> list[Record]:
        with self.trees.pool.connection() as conn:
            rows = conn.execute("SELECT record FROM clankie_lane_record WHERE lane = %s AND name = %s ORDER BY pos",
                                (self.key, name)).fetchall()
        records = [r[0] for r in rows if isinstance(r[0], dict)]
        if not records or records[0].get("type") != "session":
            raise TreeUnreadable(f"{name} has no session header")
        return records

    def set_aside(self, name: str) -> str:
        broken = name + ".broken"
        with self.trees.fenced(self.shard) as (conn, epoch):
            conn.execute("UPDATE clankie_lane_segment SET name = %s, written_epoch = %s WHERE lane = %s AND name = %s",
                         (broken, epoch, self.key, name))
        return broken

    def create(self, name: str, header: Record) -> None:
        self.write_whole(name, [header])

    def append(self, name: str, entry: Record) -> None:
        with self.trees.fenced(self.shard) as (conn, epoch):
            row = conn.execute(
                """
                UPDATE clankie_lane_segment SET records = records + 1, written_epoch = %s
                WHERE lane = %s AND name = %s RETURNING records - 1
                """,
                (epoch, self.key, name),
            ).fetchone()
            if row is None:
                raise SegmentMissing(f"lane {self.key}: segment {name} is not in the database")
            conn.execute("INSERT INTO clankie_lane_record (lane, name, pos, record, written_epoch) VALUES (%s, %s, %s, %s, %s)",
                         (self.key, name, int(str(row[0])), Json(entry), epoch))

    def write_whole(self, name: str, records: list[Record]) -> None:
        with self.trees.fenced(self.shard) as (conn, epoch):
            conn.execute(
                "INSERT INTO clankie_lane_segment (lane, name, shard, records, written_epoch) VALUES (%s, %s, %s, %s, %s)",
                (self.key, name, self.shard, len(records), epoch),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO clankie_lane_record (lane, name, pos, record, written_epoch) VALUES (%s, %s, %s, %s, %s)",
                    [(self.key, name, pos, Json(record), epoch) for pos, record in enumerate(records)],
                )

    def delete(self, names: list[str]) -> list[str]:
        if not names:
            return []
        with self.trees.fenced(self.shard) as (conn, _epoch):
            rows = conn.execute("DELETE FROM clankie_lane_segment WHERE lane = %s AND name = ANY(%s) RETURNING name",
                                (self.key, names)).fetchall()
        deleted = sorted(str(r[0]) for r in rows)
        if deleted:
            log.info("session retention: deleted %d old segments of lane %s", len(deleted), self.key)
        return deleted

    def sync(self, name: str) -> None:
        """Nothing to do: every write committed."""
