"""``clankie db upgrade``, ``clankie db status`` and the store check ``clankie run`` makes at start (the PostgreSQL profile).

In the ``files`` profile there is no database: the start check does nothing and ``clankie db upgrade`` says so
(exit 78). In the ``postgres`` profile both dial the DSN, apply the migrations the database lacks under the lock and
refuse a schema newer than this tree (:func:`clankie.store.database.prepare`); every failure is one line and exit 78,
and no line holds the DSN's password. ``clankie db status`` only reads: the schema's version and each shard's lease
(holder, epoch, expiry on the database's clock), ``--json`` for scripts.
"""

from __future__ import annotations

import json
import logging
import math
import sys

from clankie.errors import EX_CONFIG, ConfigError
from clankie.settings import Settings, load

log = logging.getLogger(__name__)


def prepare_store(settings: Settings) -> None:
    """At start: nothing for files; for postgres, the database reachable and migrated, or ConfigError."""
    if settings.store != "postgres" or settings.postgres_dsn is None:
        return
    from clankie.settings_store import describe_dsn
    from clankie.store import database, migrations

    dsn = settings.postgres_dsn.get_secret_value()
    database.prepare(dsn)
    log.info("store: postgres (%s), schema version %d", describe_dsn(dsn), migrations.latest())


def main(action: str, *, as_json: bool = False) -> int:
    """``clankie db upgrade|status``: 0 done, 78 a configuration error (one line on stderr)."""
    try:
        settings = load()
        if settings.store != "postgres" or settings.postgres_dsn is None:
            raise ConfigError(f"CLANKIE_STORE is files: there is no database to {action} (docs/multi-machine.md)")
        from clankie.store import database, migrations

        dsn = settings.postgres_dsn.get_secret_value()
        if action == "status":
            return _status(dsn, as_json)
        applied = database.prepare(dsn)
    except ConfigError as exc:
        print(f"clankie: {exc}", file=sys.stderr, flush=True)
        return EX_CONFIG
    if applied:
        print(f"schema upgraded to version {applied[-1]} (applied {', '.join(map(str, applied))})")
    else:
        print(f"schema already at version {migrations.latest()}")
    return 0


def _status(dsn: str, as_json: bool) -> int:
    """The schema's version and every shard's lease, as the database sees them now (read only)."""
    from clankie.store import database, migrations
    from clankie.store.leases import read_rows_sync

    with database.connect(dsn) as conn:
        version = migrations.current(conn)
        rows = read_rows_sync(conn) if version >= 1 else []
    if as_json:
        leases = [{"shard": r.shard, "holder": r.holder, "epoch": r.epoch,
                   "expires_in_s": round(r.expires_in, 3) if math.isfinite(r.expires_in) else None,
                   "taken_from": r.taken_from,
                   "taken_ago_s": None if r.taken_ago is None else round(r.taken_ago, 3),
                   "preferred": r.preferred, "claimed_by": r.claimed_by} for r in rows]
        print(json.dumps({"schema": {"version": version, "known": migrations.latest()}, "leases": leases}))
        return 0
    print(f"schema version {version} (this tree knows {migrations.latest()})")
    for r in rows:
        expiry = f"expires in {r.expires_in:.1f}s" if r.expires_in > 0 else "expired" if math.isfinite(r.expires_in) else "free"
        taken = "" if r.taken_ago is None else f"; last taken over from {r.taken_from} {r.taken_ago:.0f}s ago"
        other = "" if r.preferred or r.holder is None else "; served for another tree"
        claim = "" if r.claimed_by is None else f"; claimed by {r.claimed_by}"
        print(f"shard {r.shard}: {r.holder or '-'} at epoch {r.epoch}, {expiry}{other}{claim}{taken}")
    if not rows:
        print("no shard has a lease yet")
    return 0
