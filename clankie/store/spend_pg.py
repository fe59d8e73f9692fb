"""The spend ledger on PostgreSQL: a row per line, by UTC day, a line about a room fenced by its shard's lease.

The PostgreSQL adapter of :class:`~clankie.store.spend_ports.SpendLedgerStore` (migration ``0004_spend_ledger.sql``).
Every tree of the profile appends to the same table, so a tree that takes a shard over reads the day's spend of
its rooms back, and a restarted tree reads today's totals whoever wrote them. Lines come back in the order of
their ids (a sequence: the order they were appended).

A line about a room is written in one transaction with the check of the room's shard's lease
(:class:`~clankie.store.leases.SyncFencing`): a tree that lost the shard has it refused
(:class:`~clankie.store.ports.StaleEpoch`, counted); a line about no shard (an operator's raise or reset) is written
as it comes. Deleting an old day is housekeeping any tree may do (the rows are past every tree's ``keep_days``), so
it is not fenced.
"""

from __future__ import annotations

from psycopg.types.json import Json

from clankie.store.leases import SyncFencing, shard_name
from clankie.store.ports import Shard
from clankie.store.spend_ports import Record

INSERT = "INSERT INTO clankie_spend_line (day, shard, record, written_epoch) VALUES (%s, %s, %s, %s)"


class PgSpendLedger(SyncFencing):
    """Every day's ledger lines in one database, reached through ``pool``; counts the stale writes it refused."""

    def append(self, day: str, record: Record, shard: Shard | None) -> None:
        if shard is None:
            with self.pool.connection() as conn:
                conn.execute(INSERT, (day, None, Json(record), None))
            return
        name = shard_name(*shard)
        with self.fenced(name) as (conn, epoch):
            conn.execute(INSERT, (day, name, Json(record), epoch))

    def lines(self, day: str) -> list[Record]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT record FROM clankie_spend_line WHERE day = %s ORDER BY id", (day,)).fetchall()
        return [r[0] for r in rows if isinstance(r[0], dict)]

    def days(self) -> list[str]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT DISTINCT day FROM clankie_spend_line ORDER BY day").fetchall()
        return [str(r[0]) for r in rows]

    def delete(self, day: str) -> None:
        with self.pool.connection() as conn:
            conn.execute("DELETE FROM clankie_spend_line WHERE day = %s", (day,))
