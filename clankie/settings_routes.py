"""The model's fallback routes and the failover policy: one group of :class:`clankie.settings.Settings`.

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``). What
they do: ``docs/providers.md``.

``CLANKIE_MODEL_ROUTES`` is a JSON list of routes, in the order they are
tried after the primary (``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``).
A route's ``credential`` names an environment variable or a systemd
credential that holds its secret; :func:`route_secrets` reads them (the
supervisor, and the service from what the supervisor handed it), and like
every secret it reaches only the service (:mod:`clankie.secrets`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator
from pydantic_settings import NoDecode

from clankie import urls
from clankie.errors import ConfigError

MAX_ROUTES = 8
PRIMARY = "primary"
"""The primary route's name (``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``); no fallback may take it."""

_NAME = r"^[a-z0-9_-]{1,32}$"
_CREDENTIAL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_NOT_CREDENTIALS = frozenset({
    "DISCORD_TOKEN", "CLANKIE_DISCORD_TOKEN", "discord_token", "CREDENTIALS_DIRECTORY", "CLANKIE_SECRETS_FD",
    "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
})  # a secret's variable must not be one a child is handed in its environment by name


class Route(BaseModel):
    """One fallback route: the same Claude model through another account or cloud, by the anthropic SDK's own client."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_NAME)
    kind: Literal["anthropic", "vertex", "bedrock"]
    model: str | None = Field(default=None, min_length=1, max_length=200)
    base_url: str | None = None
    region: str | None = Field(default=None, pattern=r"^[a-z0-9-]{1,40}$")
    project_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:-]{1,100}$")
    credential: str | None = None

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        return None if value is None else urls.http_base(value)

    @field_validator("credential")
    @classmethod
    def _credential(cls, value: str | None) -> str | None:
        if value is not None and (not _CREDENTIAL.match(value) or value in _NOT_CREDENTIALS
                                  or value.startswith(("OTEL_", "LC_", "PYTHON"))):
            raise ValueError(f"{value!r} is not a variable or credential name a route's secret may come from")
        return value

    def check(self) -> None:
        """What a route of its kind needs; ``ValueError`` says what is missing."""
        if self.name == PRIMARY:
            raise ValueError(f"route {PRIMARY!r} is the primary's name (ANTHROPIC_API_KEY); name the fallback otherwise")
        if self.kind in ("anthropic", "vertex") and self.credential is None:
            raise ValueError(f"route {self.name!r} ({self.kind}) needs a credential (the variable or credential "
                             "holding its API key or access token)")
        if self.kind == "vertex" and (self.region is None or self.project_id is None):
            raise ValueError(f"route {self.name!r} (vertex) needs region and project_id")
        if self.kind == "bedrock" and self.region is None:
            raise ValueError(f"route {self.name!r} (bedrock) needs region")


def parse_routes(value: Any) -> tuple[Route, ...]:
    """``CLANKIE_MODEL_ROUTES`` (JSON text or a list) as routes; ``ValueError`` names the first thing wrong."""
    if isinstance(value, str):
        if not value.strip():
            return ()
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at {exc.pos})") from None
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        raise ValueError('a JSON list of routes, e.g. [{"name": "backup", "kind": "anthropic", "credential": "BACKUP_KEY"}]')
    if len(value) > MAX_ROUTES:
        raise ValueError(f"at most {MAX_ROUTES} routes")
    routes = tuple(item if isinstance(item, Route) else Route.model_validate(item) for item in value)
    seen: set[str] = set()
    for route in routes:
        route.check()
        if route.name in seen:
            raise ValueError(f"route {route.name!r} is named twice")
        seen.add(route.name)
    return routes


class RouteSettings(BaseModel):
    """The fallback routes and when a route counts as down (docs/providers.md)."""

    # JSON list of fallback routes after the primary, each {name, kind (anthropic, vertex, bedrock), model, base_url, region, ...}
    model_routes: Annotated[tuple[Route, ...], NoDecode] = ()
    model_failover_after_seconds: float = Field(default=20.0, ge=0, le=3600)  # a 429 whose wait is longer marks its route down
    model_slow_start: bool = True  # a route's governor that knows nothing sends one call and learns before the rest
    _route_secrets: dict[str, SecretStr] = PrivateAttr(default_factory=dict)  # filled by load() (route_secrets)

    @field_validator("model_routes", mode="before")
    @classmethod
    def _routes(cls, value: Any) -> Any:
        return parse_routes(value)

    def route_secret(self, name: str) -> SecretStr | None:
        """The secret of route ``name``, as :func:`clankie.settings.load` found it (None: not configured or not here)."""
        return self._route_secrets.get(name)

    def route_credentials(self) -> frozenset[str]:
        """The variables and credential names that hold a route's secret: never in any child's environment."""
        return frozenset(r.credential for r in self.model_routes if r.credential is not None)


def route_secrets(routes: tuple[Route, ...], env: Mapping[str, str]) -> dict[str, SecretStr]:
    """Each route's secret by route name: its ``credential`` variable in ``env``, else that file in ``$CREDENTIALS_DIRECTORY``."""
    directory = (env.get("CREDENTIALS_DIRECTORY") or "").strip()
    out: dict[str, SecretStr] = {}
    for route in routes:
        if route.credential is None:
            continue
        value = (env.get(route.credential) or "").strip()
        if not value and directory:
            try:
                value = (Path(directory) / route.credential).read_text(encoding="utf-8").strip()
            except (FileNotFoundError, NotADirectoryError):
                value = ""
            except OSError as exc:
                raise ConfigError(f"cannot read credential {route.credential!r}: {exc.strerror}") from exc
        if value:
            out[route.name] = SecretStr(value)
    return out
