"""The store is a setting: files by default (today's tree, psycopg never loaded), postgres with a DSN and leases whose
numbers are checked; a bad value, or a database that cannot be reached, is one line and exit 78, without the password."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clankie import settings
from clankie.errors import EX_CONFIG, ConfigError
from clankie.redact import Redactor
from clankie.settings_store import describe_dsn
from clankie.testing.postgres import Cluster

REPO = Path(__file__).resolve().parents[3]
SECRET = "hunter2-s3cret"


def test_the_default_is_files_with_two_second_renews_six_second_leases_and_no_takeover() -> None:
    """An operator who sets nothing gets today's one-machine tree."""
    s = settings.load({"HOME": "/h"})
    assert (s.store, s.postgres_dsn, s.lease_renew_seconds, s.lease_ttl_seconds, s.discord_shard_takeover) == (
        "files", None, 2.0, 6.0, "none")
    assert s.postgres_password() is None


def test_the_files_profile_never_loads_the_driver() -> None:
    """Loading the default settings imports no psycopg: the embedded profile pays nothing for the other one."""
    code = "import sys; from clankie import settings; settings.load({'HOME': '/h'}); print('psycopg' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CLANKIE_STORE": "sqlite"}, "CLANKIE_STORE: Input should be 'files' or 'postgres'"),
        ({"CLANKIE_STORE": "postgres"}, "CLANKIE_STORE=postgres needs CLANKIE_POSTGRES_DSN or the credential postgres_dsn"),
        ({"CLANKIE_LEASE_TTL_SECONDS": "4.9"}, "CLANKIE_LEASE_TTL_SECONDS (4.9) must be at least twice CLANKIE_LEASE_RENEW_SECONDS plus 1 s (5)"),
        ({"CLANKIE_LEASE_RENEW_SECONDS": "3"}, "CLANKIE_LEASE_TTL_SECONDS (6) must be at least twice CLANKIE_LEASE_RENEW_SECONDS plus 1 s (7)"),
        ({"CLANKIE_LEASE_RENEW_SECONDS": "0"}, "CLANKIE_LEASE_RENEW_SECONDS: Input should be greater than 0"),
        ({"CLANKIE_DISCORD_SHARD_TAKEOVER": "some"}, "CLANKIE_DISCORD_SHARD_TAKEOVER: Input should be 'none' or 'any'"),
        ({"CLANKIE_DISCORD_SHARD_TAKEOVER": "any"}, "CLANKIE_DISCORD_SHARD_TAKEOVER=any needs CLANKIE_STORE=postgres"),
        ({"CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": "host=/x", "CLANKIE_DISCORD_SHARD_TAKEOVER": "any"},
         "CLANKIE_DISCORD_SHARD_TAKEOVER=any needs CLANKIE_DISCORD_SHARD_COUNT"),
        ({"CLANKIE_LEASE_HANDBACK_SECONDS": "-1"}, "CLANKIE_LEASE_HANDBACK_SECONDS: Input should be greater than or equal to 0"),
        ({"CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": f"host=/x password={SECRET} nonsense"},
         "CLANKIE_POSTGRES_DSN is not a libpq connection string or postgresql:// URL"),
    ],
)
def test_a_bad_store_setting_is_one_line_naming_it(env: dict[str, str], says: str) -> None:
    """Each refusal names the variable and what it must be, on one line, and never repeats the DSN."""
    with pytest.raises(ConfigError) as info:
        settings.load({"HOME": "/h", **env})
    assert "\n" not in str(info.value) and says in str(info.value)
    assert SECRET not in str(info.value)


def test_the_postgres_profile_reads_the_dsn_and_the_lease_numbers() -> None:
    """A libpq string or a URL; the lease's numbers may move together; takeover ``none`` may be said."""
    s = settings.load({"HOME": "/h", "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": f"postgresql://clankie:{SECRET}@db.example/clankie",
                       "CLANKIE_LEASE_RENEW_SECONDS": "1", "CLANKIE_LEASE_TTL_SECONDS": "3", "CLANKIE_DISCORD_SHARD_TAKEOVER": "none"})
    assert (s.store, s.lease_renew_seconds, s.lease_ttl_seconds, s.discord_shard_takeover) == ("postgres", 1.0, 3.0, "none")
    assert s.postgres_password() is not None and s.postgres_password().get_secret_value() == SECRET  # type: ignore[union-attr]
    assert SECRET not in repr(s)


def test_takeover_any_is_the_postgres_profile_of_a_sharded_bot() -> None:
    """``any`` with a shard count in the postgres profile; the handback's bound is 30 s unless said."""
    s = settings.load({"HOME": "/h", "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": "host=/x",
                       "CLANKIE_DISCORD_SHARD_COUNT": "2", "CLANKIE_DISCORD_SHARD_IDS": "0",
                       "CLANKIE_DISCORD_SHARD_TAKEOVER": "any"})
    assert (s.discord_shard_takeover, s.lease_handback_seconds) == ("any", 30.0)


def test_the_dsn_comes_from_the_systemd_credential_unless_the_variable_is_set(tmp_path: Path) -> None:
    """``LoadCredential=postgres_dsn:…`` works; a set ``CLANKIE_POSTGRES_DSN`` wins over it, as DISCORD_TOKEN does."""
    (tmp_path / "postgres_dsn").write_text("host=/run/pg dbname=from_credential\n")
    base = {"HOME": "/h", "CLANKIE_STORE": "postgres", "CREDENTIALS_DIRECTORY": str(tmp_path)}
    from_file = settings.load(base).postgres_dsn
    from_env = settings.load({**base, "CLANKIE_POSTGRES_DSN": "host=/run/pg dbname=from_env"}).postgres_dsn
    assert from_file is not None and from_file.get_secret_value() == "host=/run/pg dbname=from_credential"
    assert from_env is not None and from_env.get_secret_value() == "host=/run/pg dbname=from_env"


def test_the_dsns_password_is_redacted_from_every_line_and_left_out_of_its_description() -> None:
    """The password never leaves in words: the redactor knows it, and the DSN's description omits it."""
    dsn = f"host=/run/pg user=clankie password={SECRET} dbname=clankie"
    s = settings.load({"HOME": "/h", "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn})
    assert SECRET not in Redactor.of(s)(f"oops: {dsn}")
    assert describe_dsn(dsn) == "dbname=clankie host=/run/pg user=clankie"


def _run_tree(tmp_path: Path, dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "s"),
           "CLANKIE_RUNTIME_DIR": str(tmp_path / "r"), "CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn}
    return subprocess.run([sys.executable, "-m", "supervisor", *argv], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_database_nobody_listens_on_stops_the_tree_with_one_line_and_78(tmp_path: Path) -> None:
    """A socket directory with no server in it: ``clankie run`` says it cannot reach PostgreSQL, once, and exits 78."""
    (tmp_path / "nowhere").mkdir()
    done = _run_tree(tmp_path, f"host={tmp_path / 'nowhere'} dbname=clankie user=clankie password={SECRET}", "run")
    assert done.returncode == EX_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach PostgreSQL (dbname=clankie host=" in lines[0], done.stderr
    assert SECRET not in done.stderr


def test_a_wrong_password_stops_the_tree_with_one_line_and_78(tmp_path: Path, postgres_cluster: Cluster, postgres_dsn: str) -> None:
    """The real server refuses the password: one line naming the database and the refusal, never the password."""
    postgres_cluster.create_password_user("tree_wrong_pw", "the-right-one")
    dbname = postgres_dsn.split("dbname=")[1].split()[0]
    done = _run_tree(tmp_path, postgres_cluster.dsn(dbname, user="tree_wrong_pw", password=SECRET), "run")
    assert done.returncode == EX_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and 'password authentication failed for user "tree_wrong_pw"' in lines[0], done.stderr
    assert SECRET not in done.stderr


def test_db_upgrade_in_the_files_profile_says_there_is_no_database(tmp_path: Path) -> None:
    """``clankie db upgrade`` without the postgres profile is a configuration error, not a silent success."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "s")}
    done = subprocess.run([sys.executable, "-m", "supervisor", "db", "upgrade"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == EX_CONFIG and "CLANKIE_STORE is files" in done.stderr
