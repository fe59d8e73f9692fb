"""Child specs are data: what to run, in what order, with which timings.

The default tree is :data:`DEFAULT_CHILDREN`, started in list order and
stopped in reverse (bridge first), less the hosts ``CLANKIE_HOSTS`` leaves out
and the browser when it runs in its own unit (``CLANKIE_BROWSER_HOST=external``). A child whose package has no
``__main__`` yet is left out of :func:`default_specs` (it lands with its
issue) and named in the supervisor's start-up log. Tests and the benchmark
pass their own specs as JSON (``clankie run --spec-file``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from clankie.errors import ConfigError
from clankie.secrets import VARIABLE
from clankie.settings import HOST_NAMES
from clankie.settings_browser import BrowserHostMode
from supervisor.environment import BRIDGE_PASSTHROUGH, SERVICE_PASSTHROUGH
from supervisor.lifecycle import Policy


@dataclass(frozen=True, slots=True)
class ChildSpec:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout: float = 10.0  # SIGTERM -> SIGKILL grace
    start_timeout: float = 60.0  # spawn -> ready, else STATUS names it
    heartbeat_timeout: float | None = None  # None: the heartbeat_timeout_seconds setting
    heartbeat_seconds: float | None = None  # None: the heartbeat_seconds setting
    watch_stalls: bool = False  # the service: enforce the stall watchdog on its runs
    proxy: bool = False  # the service: lanes/abort/say go to it
    sockets: tuple[str, ...] = ()  # listening sockets (clankie.paths names) the supervisor binds and hands down
    spare: bool = False  # keep a warm spare parked for it (with the hand-over on)
    policy: Policy = field(default_factory=Policy)
    secrets: tuple[str, ...] = ()  # secret fields handed over on a pipe (clankie.secrets), never in the env
    passthrough: tuple[str, ...] = ()  # extra variables of the supervisor's env this child gets (environment.py)


def module_argv(module: str) -> tuple[str, ...]:
    return (sys.executable, "-m", module)


SECRETS_OF = {"service": ("anthropic_api_key",), "bridge": ("discord_token",)}
"""Which child needs which secret; every other child gets none (the DSN: :data:`STORE_USERS`)."""

STORE_USERS = ("service", "bridge")
"""The children that keep durable state: in the postgres profile they get the DSN on their pipe too (the hosts keep
nothing and get neither the DSN nor the store's settings: :func:`supervisor.environment.for_child`)."""

PASSTHROUGH_OF = {"service": SERVICE_PASSTHROUGH, "bridge": BRIDGE_PASSTHROUGH}

DEFAULT_CHILDREN: tuple[tuple[str, str], ...] = (
    ("browser", "hosts.browser"),
    ("tldraw", "hosts.tldraw"),
    ("service", "service"),
    ("bridge", "bridge"),
)
"""(name, module) in start order; stop order is the reverse."""

DEFAULT_SOCKETS: dict[str, tuple[str, ...]] = {"browser": ("browser",), "tldraw": ("tldraw",), "service": ("service",)}
"""The listening sockets each default child serves (the bridge serves none)."""

HOST_CHILDREN = frozenset(HOST_NAMES)
"""The default children that are hosts: each runs only while ``CLANKIE_HOSTS`` lists it (its tools go with it)."""

DEFAULT_SPARES = frozenset(name for name, _module in DEFAULT_CHILDREN)
"""Default children that keep a warm spare unless ``CLANKIE_SPARES`` names fewer (:func:`spares_kept`)."""


def spares_kept(listed: Collection[str], *, bridge_spare: bool) -> frozenset[str]:
    """The default children that keep a warm spare: those ``CLANKIE_SPARES`` lists, the bridge only while
    ``CLANKIE_BRIDGE_SPARE`` is on too (the older switch, kept). A spare bridge RESUMEs the stored gateway session of
    every shard its tree runs, sharded or not (docs/supervision.md)."""
    return frozenset(listed).intersection(DEFAULT_SPARES) - (set() if bridge_spare else {"bridge"})


def has_main(module: str) -> bool:
    """True if ``python -m module`` would find a ``__main__`` (without importing the package)."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return False
    for base in spec.submodule_search_locations:
        path = Path(base, *rest.split(".")) if rest else Path(base)
        if (path / "__main__.py").is_file():
            return True
    return False


def default_specs(*, browser: BrowserHostMode = "child", spares: Collection[str] = DEFAULT_SPARES,
                  store: Literal["files", "postgres"] = "files",
                  hosts: Collection[str] = HOST_CHILDREN) -> tuple[list[ChildSpec], list[str]]:
    """The default tree, and the names left out because their package is not there yet. A host not in ``hosts``
    (``CLANKIE_HOSTS``) is not run at all; with the browser host ``external`` (its own systemd unit,
    ``CLANKIE_BROWSER_HOST``) the tree has no browser child and no spare for it;
    the children named in ``spares`` (:func:`spares_kept`) keep a warm spare; ``store`` ``postgres`` hands the
    DSN to :data:`STORE_USERS`."""
    specs, missing = [], []
    for name, module in DEFAULT_CHILDREN:
        if (name in HOST_CHILDREN and name not in hosts) or (name == "browser" and browser == "external"):
            continue
        if not has_main(module):
            missing.append(name)
            continue
        specs.append(
            ChildSpec(
                name=name,
                argv=module_argv(module),
                watch_stalls=name == "service",
                proxy=name == "service",
                sockets=DEFAULT_SOCKETS.get(name, ()),
                spare=name in spares,
                secrets=SECRETS_OF.get(name, ()) + (("postgres_dsn",) if store == "postgres" and name in STORE_USERS else ()),
                passthrough=PASSTHROUGH_OF.get(name, ()),
            )
        )
    return specs, missing


_POLICY_KEYS = {f.name for f in fields(Policy)}
_DURATIONS = ("stop_timeout", "start_timeout", "heartbeat_timeout", "heartbeat_seconds")


def specs_from_json(data: Any) -> list[ChildSpec]:
    """Build specs from ``[{"name", "argv", ...}]``; a bad file is a configuration error."""
    if not isinstance(data, list):
        raise ConfigError("spec file must hold a JSON list of children")
    out: list[ChildSpec] = []
    allowed = {f.name for f in fields(ChildSpec)}
    for item in data:
        if not isinstance(item, dict) or "name" not in item or "argv" not in item:
            raise ConfigError("each child spec needs a name and an argv")
        unknown = set(item) - allowed
        if unknown:
            raise ConfigError(f"child spec {item['name']!r}: unknown keys {sorted(unknown)}")
        policy = Policy(**{k: v for k, v in (item.get("policy") or {}).items() if k in _POLICY_KEYS})
        argv = tuple(sys.executable if a == "{python}" else str(a) for a in item["argv"])
        spec = ChildSpec(name=str(item["name"]), argv=argv)
        extra = {k: v for k, v in item.items() if k not in ("name", "argv", "policy")}
        if "sockets" in extra:
            extra["sockets"] = tuple(str(name) for name in extra["sockets"])
        for key in ("secrets", "passthrough"):
            if key in extra:
                extra[key] = tuple(str(v) for v in extra[key])
        bad = [k for k in ("secrets",) if not set(extra.get(k, ())) <= set(VARIABLE)]
        if bad:
            raise ConfigError(f"child spec {item['name']!r}: secrets must be among {sorted(VARIABLE)}")
        for key in _DURATIONS:
            value = extra.get(key)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"child spec {item['name']!r}: {key} must be a finite number of seconds above 0")
        out.append(replace(spec, policy=policy, **extra))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ConfigError("child names must be unique")
    return out


def load_spec_file(path: Path) -> list[ChildSpec]:
    try:
        return specs_from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read spec file {path}: {exc}") from exc
