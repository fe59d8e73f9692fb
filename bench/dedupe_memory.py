"""bench dedupe_memory: what the bridge keeps per message, by tracemalloc (issue 25, item 5).

Two measurements, no processes:

1. ``dedupe``: :class:`bridge.dedupe.Dedupe` holding 1,000,000 snowflake ids
   (the default bound): bytes per id, then 200,000 more past the bound (ids
   one per 20 ms, so the oldest are beyond the catch-up horizon) with none
   refused, and the time per admission and per lookup.
2. ``bridge``: each message through admission and the ingress journal as the
   bridge does it (``Ingress.admit``, ``Journal.admit``, ``Journal.close``, with
   compaction as it fires, the de-duplication memory saved at each), five
   messages a second in 50 rooms, for ``N`` messages (default 20,000: over an
   hour of traffic, four catch-up horizons). The heap held at the end
   (tracemalloc, after a collection) is split by dropping each structure in
   turn: the journal's entries (``b_per_journal_entry``, and how many it holds:
   those of the last horizon, plus what came since its last compaction), the
   de-duplication memory (``b_per_id``: every id of the retention), and the
   rest (engagement of the 50 rooms). ``old`` runs the same with the journal
   keeping closed entries for the whole retention and no saved memory, as
   before issue 25 (but already without their text, which a close now lets go).

Run: ``.venv/bin/python bench/dedupe_memory.py [N]``.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.admission import Ingress, Policy, Run
from bridge.dedupe import Dedupe, Seen
from bridge.inbound import Inbound
from bridge.journal import Journal
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
SNOW = 1_300_000_000_000_000_000
HORIZON = 900.0
RETENTION = 7 * 3600.0
RATE = 5.0  # messages a second
TEXT = "hello there, how is everyone doing today? I had a question about the event tonight. " * 2


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def bench_dedupe(count: int = 1_000_000) -> dict[str, float]:
    d = Dedupe(retention=RETENTION, horizon=HORIZON, bound=count)
    fps = [f"{n:032x}" for n in range(256)]
    tracemalloc.start()
    before = held()
    for n in range(count):
        d.add(str(SNOW + n * (20 << 22)), fps[n % 256], n * 0.02 + RETENTION)
    per_id = (held() - before) / count
    tracemalloc.stop()
    started = time.perf_counter()
    for n in range(count, count + 200_000):
        d.add(str(SNOW + n * (20 << 22)), fps[n % 256], n * 0.02 + RETENTION)
    add_us = (time.perf_counter() - started) / 200_000 * 1e6
    started = time.perf_counter()
    for n in range(count, count + 200_000, 2):
        assert d.check(str(SNOW + n * (20 << 22)), fps[n % 256], count * 0.02) is Seen.SAME
    check_us = (time.perf_counter() - started) / 100_000 * 1e6
    return {"ids": len(d), "b_per_id": round(per_id, 1), "evicted": d.evicted, "forgot_early": d.forgot_early,
            "add_us": round(add_us, 2), "check_us": round(check_us, 2), "snapshot_mb": round(len(d.snapshot()) / 2**20, 1)}


async def bench_bridge(count: int, *, old: bool) -> dict[str, float]:
    state = Path(tempfile.mkdtemp(prefix="dedupe-bench-"))
    ingress = Ingress(Policy(guild_ids=frozenset({"100"}), retention_s=RETENTION, horizon_s=HORIZON))
    journal = Journal(state, retention=RETENTION if old else HORIZON, remembered=None if old else ingress.dedupe)
    rooms = [Room(guild_id="100", channel_id=str(300 + r), name=f"room-{r}") for r in range(50)]
    author = Author(id="500000000000000001", name="someone")
    wall = 1_800_000_000.0
    tracemalloc.start()
    base = held()
    for n in range(count):
        now = wall + n / RATE
        did = str(SNOW + n * (200 << 22))
        room = rooms[n % len(rooms)]
        inbound = Inbound(message_id=did, channel_id=room.channel_id, guild_id="100", author_id=author.id, text=TEXT)
        decision = ingress.admit(inbound, now)
        assert isinstance(decision, Run)
        trigger = Trigger(message_id=did, author=author, text=TEXT, at=now)
        journal.admit(TurnSubmit(delivery_id=did, room=room, trigger=trigger), inbound.fingerprint, now, catching_up=False)
        journal.close(did, TurnOutcome.SETTLED, now + 2.0, message_ids=(str(int(did) + 1),))
        while journal._compacting is not None:  # a compaction fired: let it finish, as a running bridge would
            await asyncio.sleep(0.001)
    total = held() - base
    entries, ids = len(journal.state.entries), ingress.retained
    journal.state.entries.clear()
    journal.state.forget_before(0.0)  # and the rooms it holds for them
    after_journal = held()
    ingress.dedupe = journal.remembered = Dedupe(retention=RETENTION, horizon=HORIZON, bound=1_000_000)
    after_dedupe = held()
    tracemalloc.stop()
    journal.aclose()
    return {"messages": count, "held_kb": total // 1024, "ids": ids, "b_per_id": round((after_journal - after_dedupe) / ids, 1),
            "journal_entries": entries, "b_per_journal_entry": round((base + total - after_journal) / max(1, entries), 1),
            "rest_kb": (after_dedupe - base) // 1024, "journal_file_kb": journal.size // 1024}


def main() -> None:
    print("dedupe", bench_dedupe())
    print("bridge", asyncio.run(bench_bridge(N, old=False)))
    print("old   ", asyncio.run(bench_bridge(N, old=True)))


if __name__ == "__main__":
    main()
