"""The bridge's journal in the PostgreSQL profile: its lines' store on the database, fenced by the bridge's leases.

Imported only in that profile (it loads the driver). The journal's lines are kept by shard in the database
(:class:`clankie.store.journal_pg.PgJournalStore`), each write fenced by the lease the bridge's
:class:`~bridge.shard_leases.ShardLeases` holds; a shard's lines are read, and its open deliveries drained, when this
process takes the shard's lease (:func:`bridge.recovery.drain_shard`). A synchronous pool of its own: a journal line
is written before the submission it records goes out, between two awaits.
"""

from __future__ import annotations

from clankie.settings import Settings
from clankie.store.database import SyncPool, open_sync_pool
from clankie.store.journal_pg import PgJournalStore
from clankie.store.leases import FenceFor
from clankie.store.ports import Shard


def open_store(settings: Settings, shards: list[Shard], fence_for: FenceFor) -> tuple[PgJournalStore, SyncPool]:
    """The journal store of ``shards`` and its pool (the caller closes it). The pool connects in the background (a
    database not up yet is a lease not yet held, and nothing is written before a lease is); a write waits at most a
    renew period for a connection. A lost connection is retried in the background for a renew period only: after an
    outage the first line written dials at once (the lease is back within a renew; a pool whose retry delays had
    doubled through the outage refused the first message after it, found by ``test_shard_leases_e2e.py``)."""
    assert settings.postgres_dsn is not None  # the settings refuse postgres without one
    renew = settings.lease_renew_seconds
    pool = open_sync_pool(settings.postgres_dsn.get_secret_value(), ttl=settings.lease_ttl_seconds, wait=False,
                          timeout=renew, reconnect_timeout=renew)
    return PgJournalStore(pool, fence_for, shards), pool
