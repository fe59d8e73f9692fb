"""What each child's environment holds: an allowlist, never the supervisor's whole environment.

Every child gets the basics (``PATH``, locale, ``HOME``, ``TMPDIR``,
``PYTHONPATH``…), the ``CLANKIE_*`` settings with the paths made absolute,
and the variables its spec passes through (the service: ``ANTHROPIC_BASE_URL``,
the proxy variables and the ``OTEL_*`` ones of its traces and metrics; the bridge: the proxy variables). No secret is ever
in a child's environment (:data:`clankie.secrets.SECRET_VARIABLES`): the
service and the bridge get theirs on a one-shot pipe (:mod:`clankie.secrets`),
hosts get none, and so neither do Chromium, Playwright's Node driver or the
rasterizer they start. Nor do systemd's variables for the supervisor
(``NOTIFY_SOCKET``, ``WATCHDOG_*``, ``LISTEN_*``, ``JOURNAL_STREAM``).
"""

from __future__ import annotations

from collections.abc import Mapping

from clankie.secrets import SECRET_VARIABLES
from clankie.settings import Settings, child_environment
from clankie.settings_store import StoreSettings
from supervisor.systemd import NOTIFY_ENV

BASE_VARIABLES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
        "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONFAULTHANDLER",
        "SSL_CERT_FILE", "SSL_CERT_DIR",
    }
)
BASE_PREFIXES = ("LC_", "CLANKIE_")

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
"""Passed to the two children that talk to the internet (service, bridge); hosts go through the browser policy."""

OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
)
"""The standard OpenTelemetry variables, for the service's traces and GenAI metrics (docs/observability.md)."""

SERVICE_PASSTHROUGH = ("ANTHROPIC_BASE_URL", *PROXY_VARIABLES, *OTEL_VARIABLES)
BRIDGE_PASSTHROUGH = PROXY_VARIABLES


def _never(name: str) -> bool:
    return name in SECRET_VARIABLES or name in NOTIFY_ENV


def minimal(env: Mapping[str, str], settings: Settings) -> dict[str, str]:
    """The environment every child starts from: the allowlisted variables of ``env`` and the settings' paths."""
    routed = settings.route_credentials()  # a fallback route's secret travels on the pipe, like the model key
    kept = {
        k: v for k, v in env.items()
        if not _never(k) and k not in routed and (k in BASE_VARIABLES or k.startswith(BASE_PREFIXES))
    }
    out = child_environment(settings, kept)
    out.setdefault("CLANKIE_HEARTBEAT_SECONDS", str(settings.heartbeat_seconds))
    return out


STORE_VARIABLES = tuple(f"CLANKIE_{name.upper()}" for name in StoreSettings.model_fields if name != "postgres_dsn")
"""The store's settings (the DSN is a secret, never in an env): only a child handed the DSN gets them; any other
keeps nothing durable and reads the files profile, so its settings need no database."""


def for_child(base: Mapping[str, str], full: Mapping[str, str], passthrough: tuple[str, ...], *,
              store: bool = True) -> dict[str, str]:
    """``base`` (from :func:`minimal`) plus the names in ``passthrough`` taken from the supervisor's ``full`` env;
    without ``store`` (a child not handed the DSN) none of :data:`STORE_VARIABLES`."""
    out = {k: v for k, v in base.items() if store or k not in STORE_VARIABLES}
    for name in passthrough:
        if name in full and not _never(name):
            out[name] = full[name]
    return out
