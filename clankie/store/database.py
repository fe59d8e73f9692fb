"""Dialling the database: the start check of the PostgreSQL profile, and the connection pool the shells share.

:func:`prepare` is what a tree does at start in the ``postgres`` profile (and ``clankie db upgrade`` by hand): dial
the DSN once, bounded by :data:`CONNECT_TIMEOUT`, apply the migrations the database lacks under the lock, and refuse a
schema newer than this tree knows. Every failure is one :class:`~clankie.errors.ConfigError` line (exit 78) that names
the database by :func:`~clankie.settings_store.describe_dsn`, never with its password: libpq's own words are kept
only for their first line, and the password is cut out of them as well.

:func:`open_pool` gives the async shells (leases, the adapters) an autocommit pool (:func:`open_sync_pool` the
synchronous ones, the lanes' session trees) whose sessions cannot hold a lock
across a pause: ``idle_in_transaction_session_timeout`` ends the session of a client stopped inside a transaction
(a SIGSTOPped tree holding a lease row's share lock would otherwise block the takeover until TCP noticed, hours),
and ``lock_timeout`` keeps a statement from waiting longer than a lease's life.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from clankie.errors import ConfigError
from clankie.settings_store import describe_dsn, parse_dsn
from clankie.store import migrations

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5  # seconds libpq may take to reach the server at start


def _why(exc: BaseException, dsn: str) -> str:
    """libpq's first line of ``exc``, with the DSN's password cut out should it appear."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    try:
        secret = parse_dsn(dsn).get("password")
    except ValueError:
        secret = None
    return text.replace(secret, "***") if secret else text


def connect(dsn: str, *, timeout: int = CONNECT_TIMEOUT) -> psycopg.Connection[tuple[object, ...]]:
    """One autocommit connection, or a one-line ConfigError naming the database without its password."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=timeout)
    except psycopg.Error as exc:
        raise ConfigError(f"cannot reach PostgreSQL ({describe_dsn(dsn)}): {_why(exc, dsn)}") from None


def prepare(dsn: str) -> list[int]:
    """Dial, migrate under the lock, refuse a newer schema; returns the versions this call applied."""
    with connect(dsn) as conn:
        try:
            return migrations.upgrade(conn)
        except psycopg.Error as exc:
            raise ConfigError(f"cannot migrate PostgreSQL ({describe_dsn(dsn)}): {_why(exc, dsn)}") from None


def session_settings(ttl: float) -> bytes:
    """The ``SET`` statements every pooled session runs (see the module doc), for a lease time-to-live of ``ttl``."""
    ms = max(100, int(ttl * 1000))
    return (f"SET idle_in_transaction_session_timeout = {ms}; SET lock_timeout = {ms}; "
            f"SET statement_timeout = {4 * ms}").encode()


Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[object, ...]]]


async def open_pool(dsn: str, *, ttl: float, min_size: int = 1, max_size: int = 4, wait: bool = True) -> Pool:
    """An open autocommit pool on ``dsn``; its sessions give up a pause or a lock wait within ``ttl``. Without
    ``wait`` it connects in the background (a database not up yet is a wait at the first use, not an error here)."""
    statements = session_settings(ttl)

    async def configure(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        await conn.set_autocommit(True)
        await conn.execute(statements)

    pool: Pool = AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, configure=configure, open=False, name="clankie",
        kwargs={"connect_timeout": CONNECT_TIMEOUT},
    )
    await pool.open(wait=wait, timeout=CONNECT_TIMEOUT * 2)
    return pool


SyncPool = ConnectionPool[psycopg.Connection[tuple[object, ...]]]


def open_sync_pool(dsn: str, *, ttl: float, min_size: int = 1, max_size: int = 2, wait: bool = True,
                   timeout: float = 30.0, reconnect_timeout: float = 300.0) -> SyncPool:
    """:func:`open_pool` for synchronous callers (a lane's session tree appends between two awaits): the same
    autocommit sessions with the same timeouts. ``timeout``: how long a caller waits for a connection (a database
    away holds a synchronous caller no longer); without ``wait`` the pool connects in the background.
    ``reconnect_timeout``: how long the pool goes on retrying a lost connection in the background, its delays
    doubling; a short one has the next caller dial at once instead of waiting out a delay grown during an outage."""
    statements = session_settings(ttl)

    def configure(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        conn.autocommit = True
        conn.execute(statements)

    pool: SyncPool = ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, configure=configure, open=False, name="clankie-sync",
        kwargs={"connect_timeout": CONNECT_TIMEOUT}, timeout=timeout, reconnect_timeout=reconnect_timeout,
    )
    pool.open(wait=wait, timeout=CONNECT_TIMEOUT * 2)
    return pool
