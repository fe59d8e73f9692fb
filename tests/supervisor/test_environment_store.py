"""The store's settings and its DSN reach only the children that keep durable state (issue 34, the postgres profile)."""

from __future__ import annotations

from supervisor.environment import STORE_VARIABLES, for_child
from supervisor.spec import STORE_USERS, default_specs

BASE = {"CLANKIE_STORE": "postgres", "CLANKIE_LEASE_TTL_SECONDS": "6", "CLANKIE_STATE": "/s", "PATH": "/bin"}


def test_a_child_not_handed_the_dsn_gets_none_of_the_store_settings() -> None:
    assert for_child(BASE, {}, (), store=False) == {"CLANKIE_STATE": "/s", "PATH": "/bin"}
    assert for_child(BASE, {}, (), store=True) == BASE
    assert set(STORE_VARIABLES) >= {"CLANKIE_STORE", "CLANKIE_LEASE_TTL_SECONDS", "CLANKIE_DISCORD_SHARD_TAKEOVER"}
    assert "CLANKIE_POSTGRES_DSN" not in STORE_VARIABLES  # a secret: on the pipe, never in an env


def test_the_postgres_profile_hands_the_dsn_to_the_service_and_the_bridge_alone() -> None:
    files, _ = default_specs()
    postgres, _ = default_specs(store="postgres")
    assert all("postgres_dsn" not in spec.secrets for spec in files)
    holders = {spec.name for spec in postgres if "postgres_dsn" in spec.secrets}
    assert holders == set(STORE_USERS) == {"service", "bridge"}
    assert {s.name: s.secrets[0] for s in postgres if s.secrets} == {"service": "anthropic_api_key",
                                                                     "bridge": "discord_token"}
