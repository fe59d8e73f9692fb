"""The leases ``clankie migrate --to postgres`` writes under: each shard it copies for, held as ``migrate@<host>``.

A migration runs beside no tree: before its first write it takes the lease of every shard it writes for (one
holder for the whole run, so the service's part and the bridge's part, each its own process, join the same name),
and a shard a running tree holds refuses the run. Every write is then fenced by those leases, as a tree's are, and
the leases are handed back at the end. Used by ``service/migrate.py`` (lanes, spend) and ``bridge/migrate.py`` (the
dedupe memory, the journal's open deliveries).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from clankie.errors import EX_CONFIG, ConfigError
from clankie.paths import process_environment
from clankie.secrets import receive as receive_secrets
from clankie.settings import Settings, load
from clankie.store.database import open_pool
from clankie.store.leases import Fence, PgLeases

LEASE_SECONDS = 600.0
"""The migration's hold on each shard it writes for; released at the end (a killed run's lapses after this)."""


def holder() -> str:
    """The migration's name on the leases it takes: ``migrate@<host>``."""
    return f"migrate@{socket.gethostname()[:64]}"


@dataclass
class Held:
    """What :func:`holding` got: the fence of each shard taken, and the shards a running tree holds (then nothing
    may be written)."""

    fences: dict[str, Fence] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)

    def refusal(self) -> str | None:
        """The report's conflict line when a running tree holds any of the shards (nothing is copied then)."""
        return f"shards held by a running tree: {', '.join(self.refused)} (stop it, then migrate)" if self.refused else None


@contextmanager
def holding(dsn: str, shards: list[str]) -> Iterator[Held]:
    """Take the lease of each of ``shards`` (names, ``"0/1"``) for the migration, and hand back those taken on
    exit, whatever happened in between."""
    held = Held()

    async def take() -> None:
        pool = await open_pool(dsn, ttl=LEASE_SECONDS)
        try:
            leases = PgLeases(pool)
            for shard in shards:
                epoch = await leases.acquire(shard, holder(), LEASE_SECONDS)
                if epoch is None:
                    held.refused.append(shard)
                else:
                    held.fences[shard] = Fence(shard, holder(), epoch)
        finally:
            await pool.close()

    async def give_back() -> None:
        pool = await open_pool(dsn, ttl=LEASE_SECONDS)
        try:
            for fence in held.fences.values():
                await PgLeases(pool).release(fence)
        finally:
            await pool.close()

    try:
        asyncio.run(take())
        yield held
    finally:
        if held.fences:
            asyncio.run(give_back())


class Reported(Protocol):
    """What a part of the migration reports: the conflicts it found (each reported, none overwritten)."""

    @property
    def conflicts(self) -> list[str]: ...


def run_part(argv: list[str], migrate: Callable[[Settings, list[str]], Reported]) -> int:
    """One part's command line (``python -m service.migrate --to postgres``, ``python -m bridge.migrate …``): its
    settings and DSN as a tree's child gets them, its summary lines on stdout, each conflict on stderr. Exit 0: copied
    (or nothing to copy); 1: a conflict or a held shard; 2: a wrong command line; 78: no DSN, or the database
    unreachable or newer than this release."""
    if argv != ["--to", "postgres"]:
        print("usage: clankie migrate --to postgres", file=sys.stderr)
        return 2
    out: list[str] = []
    try:
        report = migrate(load(receive_secrets(process_environment())), out)
    except ConfigError as exc:
        print(f"clankie: {exc}", file=sys.stderr, flush=True)
        return EX_CONFIG
    for line in out:
        print(line, flush=True)
    for conflict in report.conflicts:
        print(f"clankie migrate: {conflict}", file=sys.stderr, flush=True)
    return 1 if report.conflicts else 0
