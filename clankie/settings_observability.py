"""The settings that let an operator see the tree: one group of :class:`clankie.settings.Settings`.

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``). What
they do: ``docs/observability.md``.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import unquote

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


def parse_resource_attributes(value: str) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` as the SDK reads it: ``key=value`` pairs split on ``,``, values percent-decoded.

    A pair without ``=`` or with an empty key is a ``ValueError`` (the SDK would skip it with a warning nobody
    reads; the specification says to discard the whole variable): a resource an operator mistyped stops the tree
    at start, like every other bad value.
    """
    out: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item.strip()!r} is not key=value (e.g. service.namespace=ops,deployment.environment.name=prod)")
        out[key.strip()] = unquote(raw.strip())
    return out


class ObservabilitySettings(BaseModel):
    """The metrics endpoint and the trace exporter (docs/observability.md)."""

    metrics_listen: str | None = None  # supervisor: serve the tree's Prometheus metrics on host:port ([::1]:9464 for IPv6)
    metrics_max_connections: int = Field(default=16, ge=1, le=1024)  # supervisor: metrics connections held; then the oldest idle one goes
    metrics_header_seconds: float = Field(default=10.0, gt=0, le=3600)  # supervisor: to send a request (and take the answer)
    otel_exporter_otlp_endpoint: str | None = Field(  # service: send GenAI spans and metrics to this OTLP/HTTP collector (otel extra)
        default=None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT"))
    otel_service_name: str | None = Field(  # service: service.name of its traces and metrics (else OTEL_RESOURCE_ATTRIBUTES', else clankie)
        default=None, validation_alias=AliasChoices("OTEL_SERVICE_NAME"))
    otel_resource_attributes: str | None = Field(  # service: key=value,... resource of its traces and metrics (service.namespace=ops)
        default=None, validation_alias=AliasChoices("OTEL_RESOURCE_ATTRIBUTES"))

    @field_validator("metrics_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_listen(value)
        return value.strip()

    @field_validator("otel_service_name", "otel_resource_attributes")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return value.strip()

    @field_validator("otel_resource_attributes")
    @classmethod
    def _attributes(cls, value: str | None) -> str | None:
        if value is not None:
            parse_resource_attributes(value)  # a ValueError names the pair
        return value

    def otel_resource(self, instance: str | None = None) -> dict[str, str]:
        """The resource attributes of the service's telemetry: ``OTEL_RESOURCE_ATTRIBUTES``, then ``OTEL_SERVICE_NAME``.

        ``service.name`` is ``OTEL_SERVICE_NAME``, else the one in ``OTEL_RESOURCE_ATTRIBUTES``, else ``clankie``
        (the precedence the OpenTelemetry SDK specification gives them), so two trees on one collector are told
        apart by either variable. ``service.instance.id`` is the one in ``OTEL_RESOURCE_ATTRIBUTES``, else
        ``instance`` (the tree's id: one per ``clankie run``), so even two trees an operator named alike differ.
        """
        attributes = parse_resource_attributes(self.otel_resource_attributes or "")
        attributes["service.name"] = self.otel_service_name or attributes.get("service.name") or "clankie"
        if instance and "service.instance.id" not in attributes:
            attributes["service.instance.id"] = instance
        return attributes

    @field_validator("otel_exporter_otlp_endpoint", mode="before")
    @classmethod
    def _endpoint(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip() or None
            if value is not None and not value.startswith(("http://", "https://")):
                raise ValueError(f"{value!r} is not an http(s) URL")
        return value
