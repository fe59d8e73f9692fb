"""The PostgreSQL fixtures: one real cluster per test session (one per pytest-xdist worker), a fresh database per test.

A ``conftest.py`` imports them where its tests need a database (``tests/clankie/store/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from clankie.testing.postgres import Cluster, PostgresMissing


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """One running cluster for this test session (one per pytest-xdist worker), stopped at the end."""
    try:
        cluster = Cluster()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_dsn(postgres_cluster: Cluster) -> Iterator[str]:
    """A fresh, empty database for one test, as a DSN; dropped after it."""
    name = postgres_cluster.create_database()
    try:
        yield postgres_cluster.dsn(name)
    finally:
        postgres_cluster.drop_database(name)


def lease_row(dsn: str, shard: str = "0/1") -> tuple[str | None, int] | None:
    """``shard``'s lease as the database holds it now: (holder, epoch), or None before anyone asked for it."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT holder, epoch FROM clankie_shard_lease WHERE shard = %s", (shard,)).fetchone()
    return None if row is None else (None if row[0] is None else str(row[0]), int(str(row[1])))
