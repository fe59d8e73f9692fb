"""The service's delivery records on PostgreSQL: a row per delivery id, every write fenced by its room's shard.

The PostgreSQL adapter of :class:`~clankie.store.delivery_ports.DeliveryRecords` (migration
``0008_delivery_records.sql``). A delivery is a row of ``clankie_delivery`` holding its whole current record (the
fields of the file's line) and the shard of its room; every tree of the profile reads the same rows, so a delivery one
tree's service settled is answered with its stored result by the tree that takes the shard over (its bridge drains
and re-submits the delivery), never run and paid for again; a run that died with a tree charges nobody there
(the crashed-run rule names the tree).

Reads need no lease. Each change is one transaction that first checks the lease of the delivery's shard
(:class:`~clankie.store.leases.SyncFencing`) and then writes the record in one statement, which also deletes the
settled records past the retention (rows locked by another writer are skipped, so two trees never wait on each
other for them) and keeps the table's count in ``clankie_delivery_count`` (one row). A tree that lost the shard has
its write refused, counted (:attr:`stale_writes`, ``clankie_stale_epoch_writes_total``) and not written
(:class:`~clankie.store.delivery_ports.DeliveryRefused` ``stale_epoch``); a shard the tree does not hold is refused
before the database (``not_held``); a database that does not answer is ``database_unavailable``.

The bound: once the count passes ``max_retained`` (known from the write that raised it), one transaction locks the
count's row and deletes the excess, the oldest settled records first, then the oldest unsettled ones not in ``keep``.
Deleting past the retention or the bound is housekeeping of records no tree needs: it is not fenced.

The adapter is synchronous, as the port is: each change holds the caller's loop for one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import psycopg
from psycopg.types.json import Json

from clankie.protocol import TurnResult
from clankie.store.database import SyncPool
from clankie.store.delivery_ports import DeliveryRefused, Retained
from clankie.store.leases import FenceFor, NotHeld, StaleEpoch, SyncFencing, shard_name
from clankie.store.ports import Shard

log = logging.getLogger(__name__)

UNAVAILABLE = (psycopg.OperationalError, OSError, TimeoutError)
"""What a database that does not answer (down, cut off, a pool wait that ran out) raises: not this tree's bug."""

PUT_SQL = b"""
WITH old AS (
    SELECT delivery_id FROM clankie_delivery WHERE settled AND accepted_at < %(cutoff)s AND delivery_id <> %(id)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM clankie_delivery d USING old WHERE d.delivery_id = old.delivery_id RETURNING 1
), up AS (
    INSERT INTO clankie_delivery
        (delivery_id, shard, fingerprint, accepted_at, run, crashed_runs, settled, result, tree, written_epoch)
    VALUES (%(id)s, %(shard)s, %(fp)s, %(accepted_at)s, %(run)s, %(crashed)s, %(settled)s, %(result)s, %(tree)s,
            %(epoch)s)
    ON CONFLICT (delivery_id) DO UPDATE SET
        shard = EXCLUDED.shard, fingerprint = EXCLUDED.fingerprint, accepted_at = EXCLUDED.accepted_at,
        run = EXCLUDED.run, crashed_runs = EXCLUDED.crashed_runs, settled = EXCLUDED.settled,
        result = EXCLUDED.result, tree = EXCLUDED.tree, written_epoch = EXCLUDED.written_epoch
    RETURNING (xmax = 0) AS inserted
), moved AS (
    SELECT (SELECT count(*) FROM up WHERE inserted) - (SELECT count(*) FROM gone) AS delta
)
UPDATE clankie_delivery_count SET n = n + (SELECT delta FROM moved)
WHERE (SELECT delta FROM moved) <> 0
RETURNING n
"""
"""One record written whole (inserted, or replacing the delivery's row), the expired settled ones deleted, the count
moved by both; returns the count when it moved. ``xmax = 0``: the row was inserted, not updated."""

EXPIRE_SQL = b"""
WITH old AS (
    SELECT delivery_id FROM clankie_delivery WHERE settled AND accepted_at < %(cutoff)s FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM clankie_delivery d USING old WHERE d.delivery_id = old.delivery_id RETURNING 1
)
UPDATE clankie_delivery_count SET n = n - (SELECT count(*) FROM gone) RETURNING n, (SELECT count(*) FROM gone)
"""

BOUND_SQL = b"""
WITH total AS (
    SELECT greatest(n - %(max)s, 0) AS excess FROM clankie_delivery_count FOR UPDATE
), settled AS (
    SELECT delivery_id FROM clankie_delivery WHERE settled ORDER BY accepted_at
    LIMIT (SELECT excess FROM total) FOR UPDATE SKIP LOCKED
), unsettled AS (
    SELECT delivery_id FROM clankie_delivery WHERE NOT settled AND NOT (delivery_id = ANY(%(keep)s)) ORDER BY accepted_at
    LIMIT (SELECT excess FROM total) - (SELECT count(*) FROM settled) FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM clankie_delivery
    WHERE delivery_id = ANY (ARRAY(SELECT delivery_id FROM settled UNION ALL SELECT delivery_id FROM unsettled))
    RETURNING 1
)
UPDATE clankie_delivery_count SET n = n - (SELECT count(*) FROM gone) RETURNING n, (SELECT count(*) FROM gone)
"""
"""The records past ``max``, the oldest settled first: the count's row locked first, so two trees at the bound
delete the excess once; rows another writer holds are skipped (a later write's bound gets them)."""

GET_SQL = b"""
SELECT fingerprint, accepted_at, run, crashed_runs, settled, result, tree FROM clankie_delivery WHERE delivery_id = %s
"""


class PgDeliveryRecords(SyncFencing):
    """Every delivery's record in one database, reached through ``pool``; writes fenced by ``fence_for``."""

    def __init__(self, pool: SyncPool, fence_for: FenceFor, *, retention: float, max_retained: int) -> None:
        super().__init__(pool, fence_for)
        self.retention, self.max_retained = retention, max_retained
        self.count: int | None = None  # rows in the table, as the last write that moved the count left it
        self.forgotten = 0  # records deleted at the bound by this process
        self._expired_at: float | None = None  # the ``now`` of the last expiry (each write expires too)

    def get(self, delivery_id: str, now: float) -> Retained | None:
        try:
            with self.pool.connection() as conn:
                row = conn.execute(GET_SQL, (delivery_id,)).fetchone()
        except UNAVAILABLE as exc:
            log.warning("delivery %s: its record not read (%s)", delivery_id, type(exc).__name__)
            raise DeliveryRefused("database_unavailable") from None
        if row is None:
            return None
        fp, accepted_at, run, crashed, settled, raw, tree = row
        accepted = float(str(accepted_at))
        if settled and now - accepted > self.retention:
            return None  # an unfinished delivery's record is kept at any age (nothing lost)
        result = None
        if settled:
            try:
                result = TurnResult.model_validate(raw)
            except ValueError as exc:
                log.warning("unreadable delivery record %s (%s); treating it as new", delivery_id, type(exc).__name__)
                return None
        runs = tuple(str(r) for r in crashed) if isinstance(crashed, list) else ()
        return Retained(delivery_id, str(fp), accepted, result, None if run is None else str(run), runs,
                        None if tree is None else str(tree))

    def put(self, record: Retained, shard: Shard, now: float) -> None:
        name = shard_name(*shard)
        params = {"id": record.delivery_id, "shard": name, "fp": record.fingerprint, "accepted_at": record.accepted_at,
                  "run": record.run, "crashed": list(record.crashed_runs), "settled": record.result is not None,
                  "result": None if record.result is None else Json(record.result.to_wire()), "tree": record.tree,
                  "cutoff": now - self.retention}
        try:
            with self.fenced(name) as (conn, epoch):
                row = conn.execute(PUT_SQL, {**params, "epoch": epoch}).fetchone()
        except NotHeld:
            log.warning("delivery %s: not recorded, shard %s is not this tree's", record.delivery_id, name)
            raise DeliveryRefused("not_held") from None
        except StaleEpoch:  # counted and logged by the fence
            raise DeliveryRefused("stale_epoch") from None
        except UNAVAILABLE as exc:
            log.warning("delivery %s: not recorded (%s)", record.delivery_id, type(exc).__name__)
            raise DeliveryRefused("database_unavailable") from None
        self._expired_at = now
        if row is not None:
            self.count = int(str(row[0]))

    def expire(self, now: float) -> int:
        """Forget the settled records past the retention; nothing to do when a write at ``now`` did it already."""
        if self._expired_at is not None and now <= self._expired_at:
            return 0
        gone = self._housekeep(EXPIRE_SQL, {"cutoff": now - self.retention}, "expiry")
        self._expired_at = now
        return gone

    def bound(self, keep: Collection[str]) -> int:
        if self.count is None or self.count <= self.max_retained:
            return 0
        gone = self._housekeep(BOUND_SQL, {"keep": list(keep), "max": self.max_retained}, "bound")
        if gone and not self.forgotten:
            log.warning("delivery records at the cap of %d: forgetting the oldest; "
                        "a re-submission of one runs it again", self.max_retained)
        self.forgotten += gone
        return gone

    def prune(self, now: float) -> int:
        """The service's start: expire, and read the table's count (so the first accept knows the bound)."""
        self._expired_at = None
        return self.expire(now)

    async def aclose(self) -> None:
        """Nothing: every record is committed; the pool is the caller's."""

    def _housekeep(self, sql: bytes, params: dict[str, object], what: str) -> int:
        try:
            with self.pool.connection() as conn:
                row = conn.execute(sql, params).fetchone()
        except UNAVAILABLE as exc:  # housekeeping: the next write or start tries again
            log.warning("delivery records: %s not done (%s)", what, type(exc).__name__)
            return 0
        if row is None:
            return 0
        self.count = int(str(row[0]))
        return int(str(row[1]))
