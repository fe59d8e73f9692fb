"""The settings that let an operator see the tree: one group of :class:`clankie.settings.Settings`.

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``). What
they do: ``docs/observability.md``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import AliasChoices, BaseModel, Field, field_validator


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as a host and a port; ``ValueError`` says what is wrong."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port (e.g. 127.0.0.1:9464)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        ipaddress.IPv6Address(host)  # a ValueError names it
    elif ":" in host:
        raise ValueError(f"{value!r}: write an IPv6 host in brackets, [::1]:9464")
    return host, int(port)


class ObservabilitySettings(BaseModel):
    """The metrics endpoint and the trace exporter (docs/observability.md)."""

    metrics_listen: str | None = None  # supervisor: serve the tree's Prometheus metrics on host:port ([::1]:9464 for IPv6)
    metrics_max_connections: int = Field(default=16, ge=1, le=1024)  # supervisor: metrics connections held; then the oldest idle one goes
    metrics_header_seconds: float = Field(default=10.0, gt=0, le=3600)  # supervisor: to send a request (and take the answer)
    otel_exporter_otlp_endpoint: str | None = Field(  # service: send OpenTelemetry GenAI spans to this OTLP/HTTP collector (otel extra)
        default=None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT"))

    @field_validator("metrics_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_listen(value)
        return value.strip()

    @field_validator("otel_exporter_otlp_endpoint", mode="before")
    @classmethod
    def _endpoint(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip() or None
            if value is not None and not value.startswith(("http://", "https://")):
                raise ValueError(f"{value!r} is not an http(s) URL")
        return value
