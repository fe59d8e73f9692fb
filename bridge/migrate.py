"""``clankie migrate --to postgres``, the bridge's part (``python -m bridge.migrate``): its memory into PostgreSQL.

The service's part (``service/migrate.py``) copies the lanes and the spend ledger; this one copies what keeps a
postgres tree that starts after the move from answering a message twice or losing one the files tree admitted:

- **the dedupe memory**: every message id the files bridge remembers and that has not expired (``seen.bin``, the
  snapshot its journal saved at the last compaction, with every delivery of the journal on top, exactly as a
  restarted bridge rebuilds it, :func:`bridge.recovery.resume_journal`), each as a row of ``clankie_dedupe`` under
  the shard of its room (:func:`clankie.shards.room_shard`; the room is the journal's). An id only the snapshot
  knows has no room: an unsharded bot's goes to its one shard; a sharded bot's is not copied and is counted (the
  journal keeps every delivery of the recovery horizon with its room, and nothing hands the bridge an older message
  again: a new session replays nothing and the read-back starts at the horizon);
- **the journal's open deliveries** (``journal.jsonl``: admitted, waiting or buffered, without an outcome), their
  lines as compaction writes them, under the shard of each one's room: a postgres tree that takes the shard drains
  them (:func:`bridge.recovery.drain_shard`) and answers each once.

Every write is fenced by the migration's lease of its shard (:mod:`clankie.store.migrating`: ``migrate@<host>``; a
shard a running tree holds refuses the run). Idempotent: an id or a delivery already in the database alike is left
alone (a second run copies nothing); one there otherwise is a conflict, reported and never overwritten (exit 1).
What was written is read back and counted. The files are only read. Run in the bridge package because the file
formats are the bridge's (the supervisor's CLI runs it as a process after the service's part, never by import).
Exit 0: copied (or nothing to copy); 1: a conflict or a held shard; 78: no DSN, or the database unreachable or newer
than this release.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.dedupe import Dedupe
from bridge.journal import FILENAME, SEEN_FILENAME, fold
from bridge.journal_files import decode
from bridge.journal_state import Entry, JournalState, entry_lines
from clankie.clock import Clock, SystemClock
from clankie.errors import ConfigError
from clankie.settings import Settings
from clankie.shards import room_shard
from clankie.store.journal_ports import JournalRefused, Line, StoredLines
from clankie.store.ports import Shard, StaleEpoch, signed_key

if TYPE_CHECKING:  # the driver is imported only when a migration runs
    from clankie.store.journal_pg import PgJournalStore

log = logging.getLogger(__name__)


@dataclass
class Report:
    ids: int = 0  # dedupe rows copied
    ids_already: int = 0  # found in the database alike
    ids_unplaced: int = 0  # a sharded bot's ids whose room nobody knows any more: not copied
    deliveries: int = 0  # open deliveries copied
    lines: int = 0  # their journal lines
    deliveries_already: int = 0
    conflicts: list[str] = field(default_factory=list)


@dataclass
class FileMemory:
    """What the files bridge under a state directory remembers, read without writing a byte there."""

    remembered: dict[Shard, list[tuple[str, int, float]]]  # unexpired ids by shard: (id, fingerprint key, expiry)
    unplaced: int  # ids with no known room on a sharded bot
    open: dict[Shard, list[Entry]]  # open deliveries by shard, in the order their lines must be written

    @property
    def shards(self) -> list[Shard]:
        return sorted({*self.remembered, *self.open})


def read_files(settings: Settings, now: float) -> FileMemory:
    """The journal and the saved dedupe memory under ``settings.state_dir``/bridge, as the bridge would restart
    from them (:func:`bridge.recovery.resume_journal`), the ids expired by ``now`` left out."""
    directory = settings.state_dir / "bridge"
    state = JournalState()
    fold(decode(_read(directory / FILENAME) or b""), state)
    memory = Dedupe(retention=settings.bridge_retention_seconds, horizon=settings.recovery_horizon_seconds,
                    bound=settings.discord_max_retained)
    saved = _read(directory / SEEN_FILENAME)
    if saved is not None:
        try:
            memory.restore(saved)
        except ValueError as exc:
            log.warning("bridge migrate: the saved dedupe memory is unreadable (%s); the journal's ids alone", exc)
    for entry in sorted(state.entries.values(), key=lambda e: e.at):
        memory.add(entry.delivery_id, entry.fingerprint, entry.at + settings.bridge_retention_seconds)
    memory.prune(now)
    count = settings.discord_shard_count
    rooms = {did: e.room for did, e in state.entries.items()}
    remembered: dict[Shard, list[tuple[str, int, float]]] = {}
    unplaced = 0
    for message_id, fp, expires in memory.entries():
        if expires <= now:
            continue
        room = rooms.get(message_id)
        if room is None and (count or 1) > 1:
            unplaced += 1
            continue
        shard = room_shard(room, count) if room is not None else (0, 1)
        remembered.setdefault(shard, []).append((message_id, signed_key(fp), expires))
    opened: dict[Shard, list[Entry]] = {}
    # the entries a delivery folds in (waiting or buffered) before the admit that folds them, as compaction writes them
    for entry in sorted((e for e in state.entries.values() if e.open), key=lambda e: (e.submit is not None, e.at)):
        opened.setdefault(room_shard(entry.room, count), []).append(entry)
    return FileMemory(remembered, unplaced, opened)


def migrate(settings: Settings, out: list[str], clock: Clock | None = None) -> Report:
    """Copy the bridge's file memory under ``settings.state_dir`` into the database; ``out`` gets the summary."""
    from clankie.store import database
    from clankie.store.bridge_pg import copy_dedupe
    from clankie.store.journal_pg import PgJournalStore
    from clankie.store.leases import SyncFencing, shard_name
    from clankie.store.migrating import LEASE_SECONDS, holding

    if settings.postgres_dsn is None:
        raise ConfigError("clankie migrate --to postgres needs CLANKIE_POSTGRES_DSN or the credential postgres_dsn")
    dsn = settings.postgres_dsn.get_secret_value()
    database.prepare(dsn)
    files = read_files(settings, (clock or SystemClock()).wall())
    report = Report(ids_unplaced=files.unplaced)
    with holding(dsn, [shard_name(*s) for s in files.shards]) as held:
        if (refused := held.refusal()) is not None:
            report.conflicts.append(refused)
            return report
        pool = database.open_sync_pool(dsn, ttl=LEASE_SECONDS)
        try:
            fencing = SyncFencing(pool, held.fences.get)
            for shard, ids in sorted(files.remembered.items()):
                try:
                    done = copy_dedupe(fencing, shard_name(*shard), ids)
                except StaleEpoch:  # the lease lapsed or was taken mid-run: nothing of that batch was written
                    report.conflicts.append(f"dedupe: shard {shard_name(*shard)} was taken from the migration")
                    continue
                report.ids += done.copied
                report.ids_already += done.alike
                report.conflicts += [f"dedupe: message {m} differs in the database" for m in done.differing[:20]]
                if len(done.differing) > 20:
                    report.conflicts.append(f"dedupe: and {len(done.differing) - 20} more ids differ")
                if done.read_back != done.copied + done.alike:  # read back: the copy is counted, not trusted
                    report.conflicts.append(f"dedupe: shard {shard_name(*shard)} read back {done.read_back} ids of "
                                            f"{done.copied + done.alike}")
            journal = PgJournalStore(pool, held.fences.get, files.shards)
            for shard, entries in sorted(files.open.items()):
                _copy_open(journal, shard, entries, report)
        finally:
            pool.close()
    unplaced = f", {report.ids_unplaced} of no known shard not copied" if report.ids_unplaced else ""
    out.append(f"dedupe: {report.ids} ids copied, {report.ids_already} already there{unplaced}; "
               f"journal: {report.deliveries} open deliveries copied ({report.lines} lines), "
               f"{report.deliveries_already} already there")
    return report


def _copy_open(journal: PgJournalStore, shard: Shard, entries: list[Entry], report: Report) -> None:
    """One shard's open deliveries: each one the database does not hold is written (one fenced transaction for the
    shard), one it holds alike is left alone, one it holds otherwise is a conflict; then read back and compared."""
    name = f"{shard[0]}/{shard[1]}"
    there = _folded(journal.read_shard, shard)
    if there is None:
        report.conflicts.append(f"journal: shard {name} could not be read")
        return
    wanted: list[Entry] = []
    for entry in entries:
        found = there.entries.get(entry.delivery_id)
        if found is None:
            wanted.append(entry)
        elif _same(found, entry):
            report.deliveries_already += 1
        else:
            report.conflicts.append(f"journal: delivery {entry.delivery_id} differs in the database")
    if not wanted:
        return
    lines: list[Line] = [dict(line) for e in wanted for line in entry_lines(e)]
    try:
        journal.append(shard, lines)
    except JournalRefused as exc:
        report.conflicts.append(f"journal: shard {name}'s open deliveries not written ({exc.code})")
        return
    back = _folded(journal.read_shard, shard)
    short = [e.delivery_id for e in wanted if back is None or (f := back.entries.get(e.delivery_id)) is None
             or not _same(f, e)]
    if short:
        report.conflicts.append(f"journal: shard {name} read back without {len(short)} of its open deliveries")
    report.deliveries += len(wanted) - len(short)
    report.lines += len(lines)


def _folded(read: Callable[[Shard], StoredLines], shard: Shard) -> JournalState | None:
    try:
        found = read(shard)
    except JournalRefused:
        return None
    state = JournalState()
    fold(found, state)
    return state


def _same(a: Entry, b: Entry) -> bool:
    """Two entries rebuilt by the same lines, and both open (or both closed)."""
    def text(e: Entry) -> str:
        return json.dumps([dict(line) for line in entry_lines(e)], sort_keys=True)
    return a.open == b.open and text(a) == text(b)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def main(argv: list[str]) -> int:
    from clankie.store.migrating import run_part  # the driver with it, only when a migration runs

    return run_part(argv, migrate)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
