"""The test harness's PostgreSQL is a real server of its own: a socket in a temp dir, no TCP, passwords where asked."""

from __future__ import annotations

import psycopg
import pytest

from clankie.testing.postgres import Cluster, PostgresMissing, bin_dir


def test_a_fresh_database_takes_writes_on_the_clusters_own_socket(postgres_cluster: Cluster, postgres_dsn: str) -> None:
    """The DSN names the temp dir's socket; the server listens on no TCP address; a table can be written and read."""
    assert f"host={postgres_cluster.socket_dir}" in postgres_dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (41), (1)")
        assert conn.execute("SELECT sum(x) FROM t").fetchone() == (42,)


def test_each_test_gets_an_empty_database(postgres_dsn: str) -> None:
    """The table the test above made is not here: every test starts from nothing."""
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_a_password_user_is_refused_a_wrong_password(postgres_cluster: Cluster, postgres_dsn: str) -> None:
    """Members of the password group log in with their password only; everyone else is trusted."""
    postgres_cluster.create_password_user("harness_pw", "right")
    dbname = psycopg.conninfo.conninfo_to_dict(postgres_dsn)["dbname"]
    assert isinstance(dbname, str)
    psycopg.connect(postgres_cluster.dsn(dbname, user="harness_pw", password="right")).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(postgres_cluster.dsn(dbname, user="harness_pw", password="wrong")).close()


def test_without_postgresql_the_harness_fails_saying_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Debian PostgreSQL and no initdb on PATH: an error naming the install command (the fixture fails, never skips)."""
    monkeypatch.setattr("clankie.testing.postgres.glob.glob", lambda pattern: [])
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PostgresMissing, match=r"apt-get install -y postgresql"):
        bin_dir()
