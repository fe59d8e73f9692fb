"""CLANKIE_MODEL_ROUTES: the fallback routes as settings, their secrets, and a bad list as one line and exit 78."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clankie import settings
from clankie.errors import EX_CONFIG, ConfigError
from clankie.secrets import hand_over, receive
from clankie.settings_routes import MAX_ROUTES
from supervisor.environment import minimal
from supervisor.process import handed_secrets
from supervisor.spec import default_specs

REPO = Path(__file__).resolve().parents[2]
BACKUP = {"name": "backup", "kind": "anthropic", "base_url": "http://127.0.0.1:9/", "credential": "CLANKIE_BACKUP_KEY"}
VERTEX = {"name": "gcp", "kind": "vertex", "model": "claude-sonnet-4-5@20250929", "region": "us-east5",
          "project_id": "my-project", "credential": "vertex_token"}
BEDROCK = {"name": "aws", "kind": "bedrock", "model": "anthropic.claude-sonnet-4-5-20250929-v1:0", "region": "us-west-2"}


def load(routes: object, **env: str) -> settings.Settings:
    return settings.load({"HOME": "/h", "CLANKIE_MODEL_ROUTES": json.dumps(routes), **env})


def test_routes_load_in_order_with_their_secrets_from_a_variable_or_a_credential(tmp_path: Path) -> None:
    """Each route's secret comes from the variable its credential names, else that systemd credential."""
    (tmp_path / "vertex_token").write_text("ya29.token-from-file\n")
    s = load([BACKUP, VERTEX, BEDROCK], CLANKIE_BACKUP_KEY="sk-backup-1234", CREDENTIALS_DIRECTORY=str(tmp_path))
    assert [r.name for r in s.model_routes] == ["backup", "gcp", "aws"]
    assert s.model_routes[0].base_url == "http://127.0.0.1:9"
    backup, gcp = s.route_secret("backup"), s.route_secret("gcp")
    assert backup is not None and backup.get_secret_value() == "sk-backup-1234"
    assert gcp is not None and gcp.get_secret_value() == "ya29.token-from-file"
    assert s.route_secret("aws") is None  # no credential: the AWS default chain
    assert s.route_credentials() == {"CLANKIE_BACKUP_KEY", "vertex_token"}
    assert "sk-backup-1234" not in repr(s) and "sk-backup-1234" not in s.model_dump_json()


@pytest.mark.parametrize(
    ("routes", "says"),
    [
        ("[{", "CLANKIE_MODEL_ROUTES: not JSON"),
        ({"name": "x"}, "a JSON list of routes"),
        ([{**BACKUP, "kind": "openai"}], "CLANKIE_MODEL_ROUTES"),
        ([{**BACKUP, "name": "primary"}], "is the primary's name"),
        ([{**BACKUP, "credential": None}], "needs a credential"),
        ([{**VERTEX, "region": None}], "needs region and project_id"),
        ([{**BEDROCK, "region": None}], "needs region"),
        ([BACKUP, BACKUP], "named twice"),
        ([{**BACKUP, "credential": "DISCORD_TOKEN"}], "is not a variable or credential name"),
        ([{**BACKUP, "credential": "HTTPS_PROXY"}], "is not a variable or credential name"),
        ([{**BACKUP, "base_url": "ftp://x"}], "must start with http"),
        ([{**BACKUP, "surprise": 1}], "CLANKIE_MODEL_ROUTES"),
        ([{**BACKUP, "name": f"r{i}"} for i in range(MAX_ROUTES + 1)], f"at most {MAX_ROUTES} routes"),
    ],
)
def test_a_bad_list_is_one_line_naming_it(routes: object, says: str) -> None:
    """Anything wrong in the list stops the load with one line that says what."""
    with pytest.raises(ConfigError) as info:
        settings.load({"HOME": "/h", "CLANKIE_MODEL_ROUTES": routes if isinstance(routes, str) else json.dumps(routes)})
    assert "\n" not in str(info.value) and says in str(info.value), str(info.value)


def test_the_bound_itself_loads() -> None:
    """MAX_ROUTES routes are taken; one more is refused (above)."""
    assert len(load([{**BACKUP, "name": f"r{i}"} for i in range(MAX_ROUTES)]).model_routes) == MAX_ROUTES


def test_a_bad_list_stops_the_tree_with_one_line_and_exit_78(tmp_path: Path) -> None:
    """`clankie run` with a route of no kind it knows: one line on stderr, exit 78, nothing started."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "CLANKIE_STATE": str(tmp_path / "s"),
           "CLANKIE_RUNTIME_DIR": str(tmp_path / "r"), "CLANKIE_MODEL_ROUTES": '[{"name": "b", "kind": "vertex"}]'}
    done = subprocess.run([sys.executable, "-m", "supervisor", "run"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == EX_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a credential" in lines[0], done.stderr


def test_a_route_secret_stays_out_of_every_child_environment_and_rides_the_pipe() -> None:
    """Its variable is dropped from the environment every child starts from, though CLANKIE_ variables pass;
    handed over on the pipe, it comes back under its variable's name, where the service's settings find it."""
    env = {"HOME": "/h", "CLANKIE_MODEL_ROUTES": json.dumps([BACKUP]), "CLANKIE_BACKUP_KEY": "sk-backup-1234",
           "CLANKIE_MODEL": "m"}
    s = settings.load(env)
    child = minimal(env, s)
    assert "CLANKIE_BACKUP_KEY" not in child and "sk-backup-1234" not in json.dumps(child)
    assert child["CLANKIE_MODEL"] == "m"  # the allowlist still passes the settings
    fd = hand_over({"route:CLANKIE_BACKUP_KEY": "sk-backup-1234"})
    got = receive({**child, "CLANKIE_SECRETS_FD": str(fd)})
    secret = settings.load(got).route_secret("backup")
    assert secret is not None and secret.get_secret_value() == "sk-backup-1234"


def test_only_known_secrets_and_route_secrets_are_handed_over() -> None:
    """A field that is neither a known secret nor a route's is refused before any pipe is made."""
    with pytest.raises(ValueError):
        hand_over({"CLANKIE_BACKUP_KEY": "x"})


DSN = "host=/run/postgresql dbname=clankie user=clankie password=pg-secret-77"


def test_the_dsn_rides_the_service_and_bridge_pipes_in_the_postgres_profile_only() -> None:
    """The service and the bridge are handed the DSN on their secrets pipes when the store is PostgreSQL; the hosts
    never are; in the files profile nobody is, though the variable is set (a spec naming it gets nothing either);
    and the variable never reaches a child's environment."""
    env = {"HOME": "/h", "CLANKIE_POSTGRES_DSN": DSN}
    postgres = settings.load({**env, "CLANKIE_STORE": "postgres"})
    files = settings.load(env)
    secrets = {spec.name: spec.secrets for spec in default_specs(store="postgres")[0]}
    assert handed_secrets(secrets["service"], postgres) == {"postgres_dsn": DSN}  # no model key set here
    assert handed_secrets(secrets["bridge"], postgres) == {"postgres_dsn": DSN}
    assert handed_secrets(secrets["browser"], postgres) == handed_secrets(secrets["tldraw"], postgres) == {}
    assert handed_secrets(secrets["service"], files) == {}
    assert all("postgres_dsn" not in spec.secrets for spec in default_specs()[0])
    child = minimal({**env, "CLANKIE_STORE": "postgres"}, postgres)
    assert "CLANKIE_POSTGRES_DSN" not in child and "pg-secret-77" not in json.dumps(child)
    got = receive({**child, "CLANKIE_SECRETS_FD": str(hand_over({"postgres_dsn": DSN}))})
    dsn = settings.load(got).postgres_dsn
    assert dsn is not None and dsn.get_secret_value() == DSN
