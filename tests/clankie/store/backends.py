"""The two adapters of each store port, opened the way a tree opens them, for the contract suites.

:class:`FilesBackend` opens today's file adapters on a state dir; :class:`PostgresBackend` opens the PostgreSQL
adapters on a migrated database, holding the leases of the shards the suites use (each open is a restart: a new
pool, the same tree still holding its leases).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from bridge.journal import DEFAULT_MAX_BYTES, Journal
from bridge.store_files import FileDedupe, FileGatewaySessions
from clankie.clock import Clock
from clankie.store import database
from clankie.store.bridge_pg import PgDedupe, PgGatewaySessions
from clankie.store.deliveries_pg import PgDeliveryRecords
from clankie.store.journal_pg import PgJournalStore
from clankie.store.lane_ports import LaneTreeStore
from clankie.store.lanes_pg import PgLaneTrees
from clankie.store.leases import Fence, PgLeases
from clankie.store.ports import DedupeStore, GatewaySessionStore, Shard
from clankie.store.spend_pg import PgSpendLedger
from clankie.store.spend_ports import SpendLedgerStore
from service.agent.tree_files import FileLaneTree
from service.captain.deliveries.store import DeliveryStore
from service.captain.lanes.keys import CaptainPaths
from service.captain.spend.ledger_files import FileSpendLedger

RETENTION = 3600.0
SHARDS = ("0/1", "0/2", "1/2")
HOLDER = "tree-a"


class FilesBackend:
    name = "files"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    @asynccontextmanager
    async def dedupe(self) -> AsyncIterator[DedupeStore]:
        store = FileDedupe(self.state_dir, retention=RETENTION, horizon=900.0, bound=1_000_000)
        yield store
        await store.close()

    @asynccontextmanager
    async def sessions(self) -> AsyncIterator[GatewaySessionStore]:
        store = FileGatewaySessions(self.state_dir)
        yield store
        await store.close()

    @contextmanager
    def lanes(self) -> Iterator[LaneStores]:
        """Each lane's tree in ``<state>/captain/rooms/<quoted key>/``, as the captain keeps it today."""
        paths = CaptainPaths.under(self.state_dir)
        yield lambda key, shard: FileLaneTree(paths.room(key))

    @contextmanager
    def journal(self, state_dir: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[Journal]:
        """``<state>/bridge/journal.jsonl``, as the bridge opens it today (``state_dir`` is this backend's)."""
        journal = Journal(self.state_dir, retention=RETENTION, max_bytes=max_bytes)
        try:
            yield journal
        finally:
            journal.aclose()

    @contextmanager
    def spend(self) -> Iterator[SpendLedgerStore]:
        """The day files in ``<state>/captain/spend/``, where the service keeps them today."""
        yield FileSpendLedger(CaptainPaths.under(self.state_dir).root / "spend")

    @contextmanager
    def deliveries(self, clock: Clock, *, tree: str | None, retention: float = RETENTION,
                   max_retained: int = 100_000) -> Iterator[DeliveryStore]:
        """The delivery log in ``<state>/captain/deliveries/``, as the service opens it today (each open: a new
        process of the same state dir)."""
        store = DeliveryStore(CaptainPaths.under(self.state_dir).deliveries, clock, retention,
                              max_retained=max_retained, tree=tree)
        try:
            yield store
        finally:
            asyncio.run(store.aclose())


class PostgresBackend:
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.fences: dict[str, Fence] = {}
        self.lane_trees: PgLaneTrees | None = None  # the last opened, to read its count of stale writes
        self.spend_ledger: PgSpendLedger | None = None  # the same
        self.journal_store: PgJournalStore | None = None  # the same
        self.delivery_records: PgDeliveryRecords | None = None  # the same
        database.prepare(dsn)

    @asynccontextmanager
    async def leases(self) -> AsyncIterator[PgLeases]:
        pool = await database.open_pool(self.dsn, ttl=600.0)
        try:
            leases = PgLeases(pool)
            for shard in SHARDS:
                if shard not in self.fences:
                    epoch = await leases.acquire(shard, HOLDER, 600.0)
                    assert epoch is not None
                    self.fences[shard] = Fence(shard, HOLDER, epoch)
            yield leases
        finally:
            await pool.close()

    @asynccontextmanager
    async def dedupe(self) -> AsyncIterator[DedupeStore]:
        async with self.leases() as leases:
            store = PgDedupe(leases, (0, 1), self.fences.get)
            yield store
            await store.close()

    @asynccontextmanager
    async def sessions(self) -> AsyncIterator[GatewaySessionStore]:
        async with self.leases() as leases:
            store = PgGatewaySessions(leases, self.fences.get)
            yield store
            await store.close()


    @contextmanager
    def lanes(self) -> Iterator[LaneStores]:
        """Each lane's tree in the database (a new pool each time: a restart), written under this tree's leases."""
        asyncio.run(self._hold())
        pool = database.open_sync_pool(self.dsn, ttl=600.0)
        try:
            self.lane_trees = PgLaneTrees(pool, self.fences.get)
            yield self.lane_trees.lane
        finally:
            pool.close()

    @contextmanager
    def spend(self) -> Iterator[SpendLedgerStore]:
        """The ledger's rows (a new pool each time: a restart), lines about a shard written under this tree's lease."""
        asyncio.run(self._hold())
        pool = database.open_sync_pool(self.dsn, ttl=600.0)
        try:
            self.spend_ledger = PgSpendLedger(pool, self.fences.get)
            yield self.spend_ledger
        finally:
            pool.close()

    @contextmanager
    def journal(self, state_dir: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[Journal]:
        """The journal's lines of shard 0/1 in the database (a new pool each time: a restart), read as the bridge
        reads them when it takes the shard's lease, written under this tree's lease."""
        asyncio.run(self._hold())
        pool = database.open_sync_pool(self.dsn, ttl=600.0)
        self.journal_store = PgJournalStore(pool, self.fences.get, [(0, 1)])
        journal = Journal(state_dir, retention=RETENTION, max_bytes=max_bytes, store=self.journal_store)
        journal.take((0, 1))
        try:
            yield journal
        finally:
            journal.aclose()
            pool.close()

    @contextmanager
    def deliveries(self, clock: Clock, *, tree: str | None, retention: float = RETENTION,
                   max_retained: int = 100_000) -> Iterator[DeliveryStore]:
        """The delivery records' rows (a new pool each time: a new process), written under this tree's leases."""
        asyncio.run(self._hold())
        pool = database.open_sync_pool(self.dsn, ttl=600.0)
        try:
            self.delivery_records = PgDeliveryRecords(pool, self.fences.get, retention=retention,
                                                      max_retained=max_retained)
            store = DeliveryStore(self.delivery_records, clock, tree=tree)
            yield store
            asyncio.run(store.aclose())
        finally:
            pool.close()

    async def _hold(self) -> None:
        async with self.leases():
            pass


LaneStores = Callable[[str, Shard], LaneTreeStore]
"""A lane's store by its key and the shard its room is on."""

Backend = FilesBackend | PostgresBackend
