"""Versioned migrations on a real PostgreSQL: a fresh database is brought to the newest version; trees starting
together apply each version once; a database newer than the tree is refused; ``clankie db upgrade`` runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from clankie.errors import EX_CONFIG, ConfigError
from clankie.store import database, migrations
from clankie.store.migrations import Migration, SchemaTooNew

REPO = Path(__file__).resolve().parents[3]


def versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [int(str(r[0])) for r in conn.execute("SELECT version FROM clankie_schema ORDER BY version")]


def test_the_shipped_migrations_are_numbered_from_one_without_a_gap() -> None:
    """Files ``0001_…``, ``0002_…``: the newest number is the schema version this tree knows."""
    known = migrations.known()
    assert [m.version for m in known] == list(range(1, len(known) + 1))
    assert migrations.latest() == len(known) >= 2


def test_a_fresh_database_is_brought_to_the_newest_version(postgres_dsn: str) -> None:
    """Every migration is applied in order and recorded; the tables they make are there."""
    assert database.prepare(postgres_dsn) == list(range(1, migrations.latest() + 1))
    assert versions(postgres_dsn) == list(range(1, migrations.latest() + 1))
    with psycopg.connect(postgres_dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"clankie_schema", "clankie_shard_lease", "clankie_gateway_session", "clankie_dedupe"} <= tables


def test_a_second_start_applies_nothing(postgres_dsn: str) -> None:
    """Migrations run at every start; on a current database they are a no-op."""
    database.prepare(postgres_dsn)
    assert database.prepare(postgres_dsn) == []


def test_trees_starting_together_apply_each_version_once(postgres_dsn: str) -> None:
    """Eight starters at once: the advisory lock lets one apply everything; the rest find it done, and none fails."""
    results: list[list[int] | BaseException] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        try:
            results.append(database.prepare(postgres_dsn))
        except BaseException as exc:  # reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(isinstance(r, list) for r in results), results
    applied = sorted(v for r in results if isinstance(r, list) for v in r)
    assert applied == list(range(1, migrations.latest() + 1))
    assert versions(postgres_dsn) == list(range(1, migrations.latest() + 1))


def test_a_failing_migration_leaves_the_database_as_it_was(postgres_dsn: str) -> None:
    """A version is applied whole or not at all: a broken third file leaves the first two and nothing of the third."""
    plan = [Migration(1, "a", "CREATE TABLE one (x int)"), Migration(2, "b", "CREATE TABLE two (x int)")]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert migrations.upgrade(conn, plan) == [1, 2]
        with pytest.raises(psycopg.errors.SyntaxError):
            migrations.upgrade(conn, [*plan, Migration(3, "c", "CREATE TABLE three (x int); CREATE TABLEX")])
        assert migrations.current(conn) == 2
        assert conn.execute("SELECT to_regclass('three')").fetchone() == (None,)


def test_a_schema_newer_than_the_tree_is_refused(postgres_dsn: str) -> None:
    """A newer tree upgraded the database: this one refuses in one line (a ConfigError, so exit 78) and changes nothing."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        migrations.upgrade(conn)
        conn.execute("INSERT INTO clankie_schema (version, name) VALUES (%s, 'from_the_future')", (migrations.latest() + 1,))
    with pytest.raises(SchemaTooNew) as info:
        database.prepare(postgres_dsn)
    assert isinstance(info.value, ConfigError)
    assert str(info.value) == (f"the database's schema is version {migrations.latest() + 1}, newer than this tree knows "
                               f"({migrations.latest()}): upgrade clankie on this machine")


def _clankie(tmp_path: Path, dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "s"),
           "CLANKIE_RUNTIME_DIR": str(tmp_path / "r"), "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn}
    return subprocess.run([sys.executable, "-m", "supervisor", *argv], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_clankie_db_upgrade_runs_the_migrations_by_hand(tmp_path: Path, postgres_dsn: str) -> None:
    """The operator's command: first it upgrades, then it says the schema is current."""
    first = _clankie(tmp_path, postgres_dsn, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"schema upgraded to version {migrations.latest()} (applied {', '.join(str(v) for v in range(1, migrations.latest() + 1))})"
    again = _clankie(tmp_path, postgres_dsn, "db", "upgrade")
    assert (again.returncode, again.stdout.strip()) == (0, f"schema already at version {migrations.latest()}")


def test_a_tree_refuses_to_start_against_a_newer_schema(tmp_path: Path, postgres_dsn: str) -> None:
    """``clankie run`` on a database a newer tree upgraded: one line, exit 78."""
    database.prepare(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO clankie_schema (version, name) VALUES (%s, 'from_the_future')", (migrations.latest() + 1,))
    done = _clankie(tmp_path, postgres_dsn, "run")
    assert done.returncode == EX_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "newer than this tree knows" in lines[0], done.stderr


def test_clankie_db_status_shows_the_schema_and_every_shards_lease(tmp_path: Path, postgres_dsn: str) -> None:
    """Read only: the version against what the tree knows, and each lease by shard with its holder, epoch and expiry
    on the database's clock; ``--json`` for scripts."""
    database.prepare(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO clankie_shard_lease (shard, holder, epoch, expires_at) VALUES "
                     "('1/2', 'tree-b', 4, now() + interval '1 hour'), ('0/2', NULL, 2, '-infinity'), "
                     "('3/4', 'tree-a', 1, now() - interval '1 minute')")
        conn.execute("INSERT INTO clankie_shard_lease (shard, holder, epoch, expires_at, preferred, claimed_by, "
                     "claimed_at) VALUES ('0/4', 'tree-b', 3, now() + interval '1 hour', false, 'tree-a', now())")
    done = _clankie(tmp_path, postgres_dsn, "db", "status")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == f"schema version {migrations.latest()} (this tree knows {migrations.latest()})"
    assert lines[1] == "shard 0/2: - at epoch 2, free"
    assert lines[2].startswith("shard 1/2: tree-b at epoch 4, expires in 3") and lines[2].endswith("s")
    assert lines[3].startswith("shard 0/4: tree-b at epoch 3, expires in 3")
    assert lines[3].endswith("s; served for another tree; claimed by tree-a")  # a handback under way
    assert lines[4] == "shard 3/4: tree-a at epoch 1, expired"
    as_json = _clankie(tmp_path, postgres_dsn, "db", "status", "--json")
    parsed = json.loads(as_json.stdout)
    assert parsed["schema"] == {"version": migrations.latest(), "known": migrations.latest()}
    assert [(r["shard"], r["holder"], r["epoch"]) for r in parsed["leases"]] == [
        ("0/2", None, 2), ("1/2", "tree-b", 4), ("0/4", "tree-b", 3), ("3/4", "tree-a", 1)]
    assert [(r["preferred"], r["claimed_by"]) for r in parsed["leases"]][2] == (False, "tree-a")
    assert parsed["leases"][0]["expires_in_s"] is None and parsed["leases"][1]["expires_in_s"] > 3000 > 0 > parsed["leases"][3]["expires_in_s"]
