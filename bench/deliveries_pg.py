"""bench deliveries_pg: what the service's delivery records cost a turn in the PostgreSQL profile.

A cluster of the test harness (``clankie.testing.postgres``: a Unix socket, durability off, so the figures are the
protocol's and the locks', not the disk's) and a migrated database; one tree holds shard ``0/1``. Each turn is what
the service writes for one delivery through its shell (:class:`service.captain.deliveries.store.DeliveryStore` over
:class:`clankie.store.deliveries_pg.PgDeliveryRecords`): accept, join a run, settle with a ~1.4 kB reply (about the
size of a real record), each one fenced transaction; then ``load`` of a settled one (a re-submission) and of an
unknown id (every first submission). ``--turns`` turns (default 300), after ``--warm`` untimed ones. Beside each turn,
as the baseline on the same shared machine at the same moment, one spend ledger line (one fenced ``INSERT``, the
figure docs/multi-machine.md gives for the ledger). ``--preload N`` first fills the table with N settled records
(within the retention), as a busy tree's table would be near ``CLANKIE_DELIVERY_MAX_RETAINED``.
Run: ``.venv/bin/python bench/deliveries_pg.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.protocol import TurnResult
from clankie.store import database
from clankie.store.deliveries_pg import PgDeliveryRecords
from clankie.store.leases import Fence, PgLeases
from clankie.store.spend_pg import PgSpendLedger
from clankie.testing.clock import FakeClock
from clankie.testing.postgres import Cluster
from service.captain.deliveries.store import DeliveryStore

FP = "f" * 64
RESULT = TurnResult.settled("word " * 280, turn_id="turn-1-x")
HOLDER = "bench-tree"


async def hold(dsn: str) -> Fence:
    pool = await database.open_pool(dsn, ttl=600.0)
    try:
        epoch = await PgLeases(pool).acquire("0/1", HOLDER, 600.0)
        assert epoch is not None
        return Fence("0/1", HOLDER, epoch)
    finally:
        await pool.close()


def ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered) * 1000:.2f} ms, p90 {ordered[int(len(ordered) * 0.9)] * 1000:.2f} ms "
            f"({len(ordered)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--preload", type=int, default=0)
    args = parser.parse_args()
    cluster = Cluster()
    cluster.start()
    try:
        dsn = cluster.dsn(cluster.create_database())
        database.prepare(dsn)
        fence = asyncio.run(hold(dsn))
        pool = database.open_sync_pool(dsn, ttl=600.0)
        clock = FakeClock()
        if args.preload:
            with pool.connection() as conn:
                conn.execute(
                    "INSERT INTO clankie_delivery (delivery_id, shard, fingerprint, accepted_at, run, crashed_runs, "
                    "settled, result, tree, written_epoch) SELECT 'pre' || i, '0/1', %s, %s + i * 0.001, NULL, '{}', "
                    "true, %s, NULL, %s FROM generate_series(1, %s) i",
                    (FP, clock.wall() - 3600.0, RESULT.model_dump_json(), fence.epoch, args.preload))
                conn.execute("UPDATE clankie_delivery_count SET n = %s", (args.preload,))
                conn.execute("ANALYZE clankie_delivery")
        spend = PgSpendLedger(pool, {"0/1": fence}.get)
        records = PgDeliveryRecords(pool, {"0/1": fence}.get, retention=7 * 3600.0, max_retained=100_000)
        store = DeliveryStore(records, clock, tree="bench")
        store.prune()
        timed: dict[str, list[float]] = {"accept": [], "join": [], "settle": [], "turn": [], "load_settled": [],
                                         "load_unknown": [], "spend_line": []}
        for n in range(args.warm + args.turns):
            did = f"d{n}"
            t0 = time.perf_counter()
            store.accept(did, FP, shard=(0, 1))
            t1 = time.perf_counter()
            store.join(f"r{n}", [did])
            t2 = time.perf_counter()
            store.settle(did, RESULT)
            t3 = time.perf_counter()
            store.load(did)
            t4 = time.perf_counter()
            store.load(f"unknown{n}")
            t5 = time.perf_counter()
            spend.append("2027-01-15", {"at": clock.wall(), "kind": "call", "keys": ["tree"], "tokens": 1}, (0, 1))
            t6 = time.perf_counter()
            clock.advance(0.01)
            if n >= args.warm:
                for key, took in (("accept", t1 - t0), ("join", t2 - t1), ("settle", t3 - t2), ("turn", t3 - t0),
                                  ("load_settled", t4 - t3), ("load_unknown", t5 - t4), ("spend_line", t6 - t5)):
                    timed[key].append(took)
        pool.close()
        print(f"load average {os.getloadavg()[0]:.1f}, {args.preload} records preloaded")
        for key, samples in timed.items():
            print(f"{key}: {ms(samples)}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
