"""Where the durable state lives and how shards are owned: files on one machine, or PostgreSQL with leases (one group of
:class:`clankie.settings.Settings`).

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings` inherits; it is never built on its
own. The comment after a field is its description in ``docs/settings-reference.md`` (``scripts/gen-docs``). What they
do, and why the lease's numbers are what they are: ``docs/multi-machine.md``.

The DSN is a secret (it may hold a password): it is read from ``CLANKIE_POSTGRES_DSN`` or the systemd credential
``postgres_dsn``, is never logged, and every text that names the database uses :func:`describe_dsn`, which leaves the
password out. Checking its syntax needs the driver, imported here only when the profile is ``postgres``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

from clankie.store.lease import LEASE_MARGIN

SECRET_KEYS = frozenset({"password", "sslpassword"})
"""DSN parameters that are never shown."""


class StoreSettings(BaseModel):
    """The store profile, the PostgreSQL DSN and the shard leases (docs/multi-machine.md)."""

    # files: one machine, state under CLANKIE_STATE (the default, today's behaviour); postgres: the multi-machine profile
    store: Literal["files", "postgres"] = "files"
    # libpq connection string or URL of the database (postgres profile); a secret: also the credential postgres_dsn
    postgres_dsn: SecretStr | None = None
    lease_renew_seconds: float = Field(default=2.0, gt=0, le=60)  # how often a holder renews each shard lease it holds
    lease_ttl_seconds: float = Field(default=6.0, gt=0, le=600)  # a lease's life on the database's clock after a renew
    # none: take only CLANKIE_DISCORD_SHARD_IDS; any: also any shard of the count whose lease is free or expired (postgres)
    discord_shard_takeover: Literal["none", "any"] = "none"
    # how long a tree serving a shard for another waits for that shard's open deliveries before it hands the shard back
    lease_handback_seconds: float = Field(default=30.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _store_consistent(self) -> StoreSettings:
        least = 2 * self.lease_renew_seconds + LEASE_MARGIN
        if self.lease_ttl_seconds < least:
            raise ValueError(
                f"CLANKIE_LEASE_TTL_SECONDS ({self.lease_ttl_seconds:g}) must be at least twice "
                f"CLANKIE_LEASE_RENEW_SECONDS plus {LEASE_MARGIN:g} s ({least:g}): a holder must survive one failed renew"
            )
        if self.discord_shard_takeover == "any" and self.store != "postgres":  # accepted and inert would mislead
            raise ValueError("CLANKIE_DISCORD_SHARD_TAKEOVER=any needs CLANKIE_STORE=postgres: on files no other tree "
                             "can reach a shard's state")
        if self.store == "postgres":
            if self.postgres_dsn is None or not self.postgres_dsn.get_secret_value().strip():
                raise ValueError("CLANKIE_STORE=postgres needs CLANKIE_POSTGRES_DSN or the credential postgres_dsn")
            parse_dsn(self.postgres_dsn.get_secret_value())
        return self

    def postgres_password(self) -> SecretStr | None:
        """The DSN's password, if it has one (for the redactor: it must never leave the process in words)."""
        if self.store != "postgres" or self.postgres_dsn is None:
            return None
        password = parse_dsn(self.postgres_dsn.get_secret_value()).get("password")
        return SecretStr(password) if password else None


def parse_dsn(dsn: str) -> dict[str, str]:
    """The DSN's parameters; ValueError (naming no value) when libpq cannot parse it."""
    from psycopg import ProgrammingError, conninfo

    try:
        return {k: str(v) for k, v in conninfo.conninfo_to_dict(dsn).items() if v is not None}
    except ProgrammingError:
        raise ValueError("CLANKIE_POSTGRES_DSN is not a libpq connection string or postgresql:// URL") from None


def describe_dsn(dsn: str) -> str:
    """The DSN as an operator may read it in a log or a status line: every parameter but the password."""
    try:
        params = parse_dsn(dsn)
    except ValueError:
        return "(unparsable DSN)"
    shown = {k: v for k, v in params.items() if k not in SECRET_KEYS}
    return " ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "(defaults)"
