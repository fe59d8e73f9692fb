"""One typed settings tree, loaded once per process and passed down.

Values come from the environment (prefix ``CLANKIE_``; a few operator-facing
names such as ``DISCORD_TOKEN`` are unprefixed) and secrets also from
``$CREDENTIALS_DIRECTORY`` so systemd's ``LoadCredential=`` works. Nothing
else in the project reads ``os.environ``: :func:`load` takes the mapping.
The three directories come from :mod:`clankie.directories`, the only place
they are derived.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from clankie import shards, urls
from clankie.directories import discord_attachment_root, runtime_dir, state_dir, trimmed
from clankie.errors import ConfigError
from clankie.paths import process_environment
from clankie.settings_bounds import MAX_SECONDS, BoundsSettings
from clankie.settings_browser import BrowserUnitSettings
from clankie.settings_isolation import IsolationSettings
from clankie.settings_observability import ObservabilitySettings
from clankie.settings_routes import RouteSettings, route_secrets
from clankie.settings_spend import SpendSettings
from clankie.settings_store import StoreSettings

CREDENTIALS = {"discord_token": "discord_token", "anthropic_api_key": "anthropic_api_key", "postgres_dsn": "postgres_dsn"}
CREDENTIAL_VARIABLE = {"postgres_dsn": "CLANKIE_POSTGRES_DSN"}  # a credential whose variable is not its name upper-cased

FAILURE_REACTION = "CLANKIE_DISCORD_FAILURE_REACTION"

_ENV: ContextVar[Mapping[str, str]] = ContextVar("clankie_settings_env")

IdList = Annotated[tuple[str, ...], NoDecode]
SpareName = Literal["service", "bridge", "browser", "tldraw"]
SPARE_NAMES: tuple[SpareName, ...] = ("service", "bridge", "browser", "tldraw")
"""The default children that may keep a warm spare (``CLANKIE_SPARES``); all of them unless the operator says fewer."""
HostName = Literal["browser", "tldraw"]
HOST_NAMES: tuple[HostName, ...] = ("browser", "tldraw")
"""The hosts of the default tree (``CLANKIE_HOSTS``): each one's tools are offered to the model only while it runs."""


class _MappingEnvSource(EnvSettingsSource):
    """Reads the mapping handed to :func:`load` instead of ``os.environ``."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(_ENV.get(), self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _alias(*names: str) -> Any:
    return AliasChoices(*names)


class Settings(
    BaseSettings, BoundsSettings, SpendSettings, ObservabilitySettings, IsolationSettings, BrowserUnitSettings,
    RouteSettings, StoreSettings,
):
    """Every operator-facing setting (ARCHITECTURE §5). Build it with :func:`load`."""

    model_config = SettingsConfigDict(
        env_prefix="CLANKIE_",
        extra="ignore",
        frozen=True,
        env_ignore_empty=True,
        populate_by_name=True,
        allow_inf_nan=False,  # every number is finite: an `inf` stall or heartbeat would never fire
    )

    # paths: derived by clankie.directories, filled in by load()
    state_dir: Path
    runtime_dir: Path
    attachment_root: Path

    # secrets
    discord_token: SecretStr | None = Field(default=None, validation_alias=_alias("DISCORD_TOKEN"))
    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias=_alias("ANTHROPIC_API_KEY"))
    anthropic_base_url: str | None = Field(default=None, validation_alias=_alias("ANTHROPIC_BASE_URL"))

    # demo mode (scripts/run --demo): the built-in offline model, no key, no Discord
    demo: bool = False

    # discord admission
    discord_guild_ids: IdList = ()
    discord_channel_ids: IdList = ()
    discord_dm_policy: Literal["deny", "owner_only", "allowlist"] = "owner_only"
    discord_owner_id: str | None = None
    discord_dm_user_ids: IdList = ()
    discord_system_actor_ids: IdList = ()
    discord_trusted_rooms: IdList = ()
    discord_reply_policy: Literal["all", "addressed"] = "all"
    discord_context_messages: int = Field(default=10, ge=0, le=50)
    discord_engagement_declines: int = Field(default=3, ge=1, le=100)
    discord_catch_up_seconds: float = Field(default=20.0, gt=0, le=3600)
    discord_api_base: str | None = None
    discord_upload_limit_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    discord_failure_reaction: str = Field(default="\u26a0\ufe0f", max_length=64)  # ⚠️; set empty to disable
    discord_tool_card: bool = True
    # the gateway session outlives the process (docs/bridge.md, "No deaf window"); false: IDENTIFY at every start
    discord_gateway_resume: bool = True
    # sharding (docs/operations.md, "Running N trees on N machines"): unset runs one unsharded gateway session
    discord_shard_count: int | None = Field(default=None, ge=1, le=shards.MAX_SHARD_COUNT)
    discord_shard_ids: Annotated[tuple[int, ...], NoDecode] = ()  # "0,1" or "0-3"; empty: every shard of the count
    character_id: str = Field(default="clankie", pattern=r"^[a-z0-9_-]{1,32}$")

    # bridge durability (docs/bridge.md, "Nothing lost")
    recovery_horizon_seconds: float = Field(default=900.0, gt=0, le=7 * 86400, allow_inf_nan=False)
    recovery_max_rooms: int = Field(default=100, ge=1, le=100_000)
    recovery_max_pages: int = Field(default=5, ge=1, le=1000)
    recovery_max_messages: int = Field(default=1000, ge=1, le=1_000_000)
    bridge_retention_seconds: float = Field(default=7 * 3600.0, gt=0, le=30 * 86400, allow_inf_nan=False)

    # captain and model
    model: str = "claude-sonnet-4-5"
    model_context_window: int = Field(default=200_000, ge=1000)
    model_max_concurrent: int = Field(default=32, ge=1, le=1024)  # service: model calls in flight at once, every lane together
    model_rate_limit_retries: int = Field(default=10, ge=0, le=1000)  # 429s one model call waits out before its turn fails
    compaction_reserve_tokens: int = Field(default=16_384, ge=0)
    compaction_keep_tokens: int = Field(default=20_000, ge=0)
    session_retention_days: float = Field(default=30.0, gt=0, le=36_500)  # old session files of a lane (docs/operations.md)
    session_max_files: int = Field(default=50, ge=1, le=100_000)  # session files kept per lane, the current one included
    captain_durable: bool = True
    lanes_max_live: int = Field(default=256, ge=1, le=1_000_000)  # idle lanes past it are evicted, LRU (docs/captain.md)
    lanes_list_max: int = Field(default=1000, ge=1, le=1_000_000)  # rows `clankiectl lanes` gets, live ones first
    steer_max_images: int = Field(default=16, ge=0, le=1000)  # pictures waiting in one run's steering queue; past it, words only
    poison_runs: int = Field(default=3, ge=1)  # a delivery in this many runs the service died in fails as poison
    delivery_max_retained: int = Field(default=100_000, ge=100)  # delivery records kept; past it the oldest settled go

    # hosts
    hosts: Annotated[tuple[HostName, ...], NoDecode] = HOST_NAMES  # hosts the tree runs, so tools he is offered: "tldraw" or "none"
    browser_allow_private: bool = False
    chromium_path: Path | None = None
    browser_idle_seconds: float = Field(default=300.0, gt=0, le=MAX_SECONDS)  # Chromium closes after this long unused
    browser_pinned_hosts: str = ""  # name=ip,... resolved by the browser policy proxy and trusted (tests; docs/hosts.md)

    # supervision
    stall_seconds: float = Field(default=300.0, gt=0, le=MAX_SECONDS)
    stall_tick_seconds: float = Field(default=5.0, gt=0, le=3600)
    stall_abort_grace_seconds: float = Field(default=15.0, gt=0, le=MAX_SECONDS)
    heartbeat_seconds: float = Field(default=2.0, gt=0, le=3600)
    heartbeat_timeout_seconds: float = Field(default=20.0, gt=0, le=MAX_SECONDS)
    max_frame_bytes: int = Field(default=1024 * 1024, ge=4096, le=64 * 1024 * 1024)
    handover: bool = True  # the supervisor holds the listening sockets and keeps warm spares (docs/supervision.md)
    bridge_spare: bool = True  # the bridge keeps a parked spare too: logged in, no gateway socket (sharded or not)
    spares: Annotated[tuple[SpareName, ...], NoDecode] = SPARE_NAMES  # default children that keep a warm spare: "service,bridge" or "none"
    spare_delay_seconds: float = Field(default=0.5, ge=0, le=MAX_SECONDS)  # a ready child's next spare is spawned this much later
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # local sockets (docs/operations.md, "Security model")
    ipc_hello_seconds: float = Field(default=5.0, gt=0, le=300)
    control_idle_seconds: float = Field(default=60.0, gt=0, le=MAX_SECONDS)
    control_max_connections: int = Field(default=64, ge=4, le=4096)
    control_per_pid_connections: int = Field(default=8, ge=1, le=4096)

    @field_validator(
        "discord_guild_ids",
        "discord_channel_ids",
        "discord_dm_user_ids",
        "discord_system_actor_ids",
        "discord_trusted_rooms",
        mode="before",
    )
    @classmethod
    def _split_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("spares", "hosts", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        """``"service, bridge"`` as a tuple; ``"none"`` (or nothing) is none at all; a name twice counts once."""
        if isinstance(value, str):
            names = [part.strip().lower() for part in value.split(",") if part.strip()]
            return () if names == ["none"] else tuple(dict.fromkeys(names))
        return value

    @field_validator("discord_guild_ids", "discord_channel_ids", "discord_dm_user_ids", "discord_system_actor_ids")
    @classmethod
    def _snowflakes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not item.isdigit() or len(item) > 21:
                raise ValueError(f"{item!r} is not a Discord id")
        return value

    @model_validator(mode="after")
    def _demo_has_no_real_key(self) -> Settings:
        key = self.anthropic_api_key
        if self.demo and key is not None and key.get_secret_value().strip():
            raise ValueError("demo mode refuses to run with a real ANTHROPIC_API_KEY configured; unset it or run without --demo")
        return self

    @model_validator(mode="after")
    def _retention_covers_horizon(self) -> Settings:
        if self.bridge_retention_seconds < self.recovery_horizon_seconds:
            raise ValueError("CLANKIE_BRIDGE_RETENTION_SECONDS must be at least CLANKIE_RECOVERY_HORIZON_SECONDS")
        return self

    @field_validator("discord_shard_ids", mode="before")
    @classmethod
    def _shard_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            return shards.parse_ids(value) if value.strip() else ()
        return value

    @model_validator(mode="after")
    def _shards_fit(self) -> Settings:
        shards.check(self.discord_shard_ids, self.discord_shard_count)
        if self.discord_shard_takeover == "any" and self.discord_shard_count is None:  # one shard: nothing else to take
            raise ValueError("CLANKIE_DISCORD_SHARD_TAKEOVER=any needs CLANKIE_DISCORD_SHARD_COUNT: an unsharded bot has "
                             "one shard, which every tree prefers already")
        return self

    @field_validator("discord_api_base")
    @classmethod
    def _api_base(cls, value: str | None) -> str | None:
        return None if value is None else urls.discord_api_base(value)

    @field_validator("anthropic_base_url")
    @classmethod
    def _anthropic_base(cls, value: str | None) -> str | None:
        return None if value is None else urls.http_base(value)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.heartbeat_seconds >= self.heartbeat_timeout_seconds:
            raise ValueError(
                f"CLANKIE_HEARTBEAT_SECONDS ({self.heartbeat_seconds:g}) must be below "
                f"CLANKIE_HEARTBEAT_TIMEOUT_SECONDS ({self.heartbeat_timeout_seconds:g})"
            )
        for rotate, keep in (("LANE_LOG_ROTATE", "LANE_LOG_KEEP"), ("AUDIT_ROTATE", "AUDIT_KEEP")):
            if getattr(self, f"{keep.lower()}_bytes") < getattr(self, f"{rotate.lower()}_bytes"):
                raise ValueError(f"CLANKIE_{keep}_BYTES must be at least CLANKIE_{rotate}_BYTES")
        if self.control_per_pid_connections > self.control_max_connections:
            raise ValueError("CLANKIE_CONTROL_PER_PID_CONNECTIONS must not exceed CLANKIE_CONTROL_MAX_CONNECTIONS")
        return self

    @property
    def external_browser(self) -> bool:
        """This tree uses a browser host that runs in its own unit: ``CLANKIE_BROWSER_HOST=external`` and the browser
        named in ``CLANKIE_HOSTS`` (a tree without the browser dials none and shows none in its status)."""
        return self.browser_host == "external" and "browser" in self.hosts

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _MappingEnvSource(settings_cls))


def _credentials(env: Mapping[str, str]) -> dict[str, str]:
    directory = trimmed(env, "CREDENTIALS_DIRECTORY")
    found: dict[str, str] = {}
    if directory is None:
        return found
    for field, filename in CREDENTIALS.items():
        try:
            value = (Path(directory) / filename).read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise ConfigError(f"cannot read credential {filename!r}: {exc.strerror}") from exc
        if value:
            found[field] = value
    return found


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build the settings from ``env`` (default: this process's environment).

    Raises :class:`ConfigError` with one line per bad setting; callers in a
    process ``main`` turn that into exit status 78.
    """
    e = dict(process_environment() if env is None else env)
    init: dict[str, Any] = {
        "state_dir": state_dir(e),
        "runtime_dir": runtime_dir(e),
        "attachment_root": discord_attachment_root(e),
    }
    for field, value in _credentials(e).items():
        alias = CREDENTIAL_VARIABLE.get(field, field.upper())
        if not (e.get(alias) or "").strip():
            init[field] = value
    if (e.get("CLANKIE_DEMO") or "").strip().lower() in ("1", "true", "yes", "on") and not urls.is_loopback(
        e.get("CLANKIE_DISCORD_API_BASE") or ""
    ):
        # demo mode never talks to Discord, whatever token is set: a token is kept only for a Discord stand-in on
        # a loopback address (clankie.testing.fake_discord), where the bridge shows text updates and the card
        init["discord_token"] = None
    if FAILURE_REACTION in e and not e[FAILURE_REACTION].strip():
        init["discord_failure_reaction"] = ""  # set but empty: disabled (blank variables are otherwise ignored)
    init.update(overrides)
    token = _ENV.set(e)
    try:
        settings = Settings(**init)
        settings._route_secrets = route_secrets(settings.model_routes, e)  # each fallback route's secret, if here
        return settings
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            if not err["loc"]:  # a cross-field check: its message names the variables
                lines.append(str(err["msg"]).removeprefix("Value error, "))
                continue
            message = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"{_variable(str(err['loc'][0]))}: {message}")
        raise ConfigError("invalid settings: " + "; ".join(lines)) from None
    finally:
        _ENV.reset(token)


def _variable(loc: str) -> str:
    """The environment variable an operator sets for an error location (a field name or its alias)."""
    if loc not in Settings.model_fields:
        return loc.upper()  # pydantic reports an aliased field by its alias: DISCORD_TOKEN, ANTHROPIC_BASE_URL
    return "CLANKIE_" + loc.upper()


def child_environment(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment the supervisor hands a child: paths already made absolute."""
    env = dict(base)
    env["CLANKIE_STATE"] = str(settings.state_dir)
    env["CLANKIE_RUNTIME_DIR"] = str(settings.runtime_dir)
    env["CLANKIE_DISCORD_ATTACHMENT_ROOT"] = str(settings.attachment_root)
    return env
