"""Versioned schema migrations: numbered plain SQL files in ``clankie/store/migrations/``, applied in order, once.

Each file ``NNNN_name.sql`` is one version. :func:`upgrade` runs in one transaction that first takes a transaction
advisory lock (:data:`LOCK_KEY`), so trees starting together serialise here: the first applies what is missing and
records each version in ``clankie_schema``, the others then find nothing to do. A database whose newest version is
above the newest file this tree has was upgraded by a newer tree: :class:`SchemaTooNew`, and the tree refuses to
start (exit 78) rather than write rows it does not understand. ``clankie db upgrade`` runs the same by hand.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from clankie.errors import ConfigError

log = logging.getLogger(__name__)

LOCK_KEY = 0x636C616E6B6965  # "clankie": the advisory lock every migrating tree takes
_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")
_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS clankie_schema (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class SchemaTooNew(ConfigError):
    """Raised when the database's schema is newer than every migration this tree knows (a newer tree upgraded it)."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered SQL file."""

    version: int
    name: str
    sql: str


def known() -> list[Migration]:
    """Every migration shipped in the package, by version; the versions run 1, 2, … with no gap."""
    found = []
    for entry in resources.files("clankie.store").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match is not None:
            found.append(Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without a gap: {[m.version for m in found]}")
    return found


def latest() -> int:
    """The newest schema version this tree knows."""
    return known()[-1].version


def current(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The database's schema version (0: never migrated)."""
    exists = conn.execute("SELECT to_regclass('clankie_schema') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM clankie_schema").fetchone()
    return int(str(row[0])) if row else 0


def upgrade(conn: psycopg.Connection[tuple[object, ...]], migrations: list[Migration] | None = None) -> list[int]:
    """Apply what the database lacks, under the advisory lock, in one transaction; returns the versions applied.

    Raises :class:`SchemaTooNew` when the database is ahead of ``migrations`` (nothing is changed then).
    """
    todo = known() if migrations is None else migrations
    newest = todo[-1].version if todo else 0
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(_SCHEMA_TABLE)
        have = current(conn)
        if have > newest:
            raise SchemaTooNew(f"the database's schema is version {have}, newer than this tree knows ({newest}): "
                               "upgrade clankie on this machine")
        for migration in todo:
            if migration.version <= have:
                continue
            conn.execute(migration.sql.encode())
            conn.execute("INSERT INTO clankie_schema (version, name) VALUES (%s, %s)", (migration.version, migration.name))
            applied.append(migration.version)
    if applied:
        log.info("database schema upgraded to version %d (applied %s)", applied[-1], ", ".join(map(str, applied)))
    return applied
