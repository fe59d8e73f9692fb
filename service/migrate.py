"""``clankie migrate --to postgres`` (run as ``python -m service.migrate``): a tree's file state into PostgreSQL.

An operator who outgrows one machine keeps every room's memory: each lane's session tree (every segment, every
record, under ``<state>/captain/{rooms,system,turns}/``) and the spend ledger's day files are copied into the
database the ``postgres`` profile reads (``CLANKIE_POSTGRES_DSN``, or the credential ``postgres_dsn``), whatever
``CLANKIE_STORE`` says now. It runs beside no tree: it takes the lease of every shard it writes for (as holder
``migrate@<host>``, :mod:`clankie.store.migrating`) and refuses when a tree holds one. What it does is idempotent:
a segment or a day already in the database with as many records as on disk is left alone (a second run copies
nothing); one that differs is a conflict, reported and not overwritten (exit 1). Each copied lane is read back and
counted against the files.
The bridge's dedupe memory and its journal's open deliveries are the bridge's part (``bridge/migrate.py``), run by
``clankie migrate`` after this one, as its own process (docs/multi-machine.md, "Moving a tree's past").

Run in the service package because the file adapters are the service's (the supervisor talks to it as a process,
never by import). Exit 0: copied (or nothing to copy); 1: a conflict or a held shard; 78: no DSN, or the database
unreachable or newer than this release.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from clankie.errors import ConfigError
from clankie.protocol import Room
from clankie.settings import Settings
from clankie.shards import room_shard
from clankie.store.lane_ports import SEGMENT_SUFFIX, TreeUnreadable
from service.agent.tree_files import FileLaneTree
from service.captain.lanes import CaptainPaths
from service.captain.spend import FileSpendLedger

if TYPE_CHECKING:  # the driver is imported only when a migration runs
    from clankie.store.lanes_pg import PgLaneTree
    from clankie.store.spend_pg import PgSpendLedger

KINDS = ("rooms", "system", "turns")
"""The lane directories under ``<state>/captain``: rooms' lanes, system actors' lanes, privileged one-shots."""


@dataclass
class Report:
    lanes: int = 0
    segments: int = 0
    records: int = 0
    already: int = 0  # segments or days found in the database whole
    days: int = 0
    lines: int = 0
    conflicts: list[str] = field(default_factory=list)


def lane_room(kind: str, directory: str) -> Room:
    """The room a lane directory belongs to, from its name (:mod:`service.captain.lanes.keys`): the guild decides the
    shard its writes are fenced by."""
    name = unquote(directory)
    if kind == "turns":  # <lane>~<guild|dm>:<channel>
        guild, _, channel = name.split("~", 1)[-1].partition(":")
    else:  # discord[-system]:<character>:discord:<guild|dm>:<channel>[:<actor>]
        parts = name.split(":")
        if len(parts) < 5:
            raise ValueError(f"not a lane directory: {directory!r}")
        guild, channel = parts[3], parts[4]
    return Room(guild_id=None if guild == "dm" else guild, channel_id=channel)


def lane_dirs(paths: CaptainPaths) -> list[tuple[str, Path]]:
    """``(key, directory)`` of every lane on disk; the key is the database's name for it (as the stores name it)."""
    found = []
    for kind in KINDS:
        base = paths.root / kind
        if base.is_dir():
            found += [(f"{kind}/{d.name}", d) for d in sorted(base.iterdir()) if d.is_dir()]
    return found


def migrate(settings: Settings, out: list[str]) -> Report:
    """Copy the file state under ``settings.state_dir`` into the database; ``out`` gets one line per step."""
    from clankie.store import database
    from clankie.store.lanes_pg import PgLaneTrees
    from clankie.store.leases import shard_name
    from clankie.store.migrating import LEASE_SECONDS, holding
    from clankie.store.spend_pg import PgSpendLedger

    if settings.postgres_dsn is None:
        raise ConfigError("clankie migrate --to postgres needs CLANKIE_POSTGRES_DSN or the credential postgres_dsn")
    dsn = settings.postgres_dsn.get_secret_value()
    database.prepare(dsn)
    paths = CaptainPaths.under(settings.state_dir)
    count = settings.discord_shard_count
    lanes = [(key, d, room_shard(lane_room(key.split("/", 1)[0], d.name), count)) for key, d in lane_dirs(paths)]
    shards = sorted({shard_name(*s) for _, _, s in lanes})
    report = Report()
    with holding(dsn, shards) as held:
        if (refused := held.refusal()) is not None:
            report.conflicts.append(refused)
            return report
        pool = database.open_sync_pool(dsn, ttl=LEASE_SECONDS)
        try:
            trees = PgLaneTrees(pool, held.fences.get)
            for key, directory, shard in lanes:
                _copy_lane(FileLaneTree(directory), trees.lane(key, shard), key, report)
            _copy_spend(FileSpendLedger(paths.root / "spend"), PgSpendLedger(pool, held.fences.get), report)
        finally:
            pool.close()
    out.append(f"lanes: {report.lanes} ({report.segments} segments, {report.records} records copied); "
               f"spend: {report.days} days ({report.lines} lines); already in the database: {report.already}")
    return report


def _copy_lane(source: FileLaneTree, target: PgLaneTree, key: str, report: Report) -> None:
    there = set(target.names())
    copied = False
    for name in sorted(source.names()):
        if not name.endswith(SEGMENT_SUFFIX):
            continue  # a segment set aside as unreadable stays on the disk it was found on
        try:
            records = source.read(name)
        except TreeUnreadable:
            report.conflicts.append(f"lane {key}: segment {name} is unreadable on disk (not copied)")
            continue
        if name in there:
            if len(target.read(name)) == len(records):
                report.already += 1
            else:
                report.conflicts.append(f"lane {key}: segment {name} differs in the database")
            continue
        target.write_whole(name, records)
        if len(target.read(name)) != len(records):  # read back: the copy is counted, not trusted
            report.conflicts.append(f"lane {key}: segment {name} read back short")
            continue
        report.segments += 1
        report.records += len(records)
        copied = True
    report.lanes += copied


def _copy_spend(source: FileSpendLedger, target: PgSpendLedger, report: Report) -> None:
    for day in source.days():
        lines, there = source.lines(day), target.lines(day)
        if len(there) == len(lines):
            report.already += 1 if lines else 0
            continue
        if there:
            report.conflicts.append(f"spend day {day}: {len(there)} lines in the database, {len(lines)} on disk")
            continue
        for line in lines:
            target.append(day, line, None)  # history, written before any tree serves from the database
        report.days += 1
        report.lines += len(lines)


def main(argv: list[str]) -> int:
    from clankie.store.migrating import run_part  # the driver with it, only when a migration runs

    return run_part(argv, migrate)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
