"""``clankie db upgrade`` and the store check ``clankie run`` makes at start (the PostgreSQL profile).

In the ``files`` profile there is no database: the start check does nothing and ``clankie db upgrade`` says so
(exit 78). In the ``postgres`` profile both dial the DSN, apply the migrations the database lacks under the lock and
refuse a schema newer than this tree (:func:`clankie.store.database.prepare`); every failure is one line and exit 78,
and no line holds the DSN's password.
"""

from __future__ import annotations

import logging
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


def main(action: str) -> int:
    """``clankie db ACTION``: 0 done, 78 a configuration error (one line on stderr)."""
    try:
        settings = load()
        if settings.store != "postgres" or settings.postgres_dsn is None:
            raise ConfigError("CLANKIE_STORE is files: there is no database to upgrade (docs/multi-machine.md)")
        from clankie.store import database, migrations

        applied = database.prepare(settings.postgres_dsn.get_secret_value())
    except ConfigError as exc:
        print(f"clankie: {exc}", file=sys.stderr, flush=True)
        return EX_CONFIG
    if applied:
        print(f"schema upgraded to version {applied[-1]} (applied {', '.join(map(str, applied))})")
    else:
        print(f"schema already at version {migrations.latest()}")
    return 0
