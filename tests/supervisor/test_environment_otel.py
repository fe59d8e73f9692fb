"""The service's traces are configured by the standard OTEL_* variables, which reach the service and no other child."""

from __future__ import annotations

from supervisor.environment import BRIDGE_PASSTHROUGH, SERVICE_PASSTHROUGH, for_child

FULL = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_HEADERS": "x-team=ops",
        "OTEL_SERVICE_NAME": "clankie-a", "OTEL_SOMETHING_UNKNOWN": "1", "ANTHROPIC_API_KEY": "sk-never"}


def test_the_service_gets_the_otel_variables_and_no_secret() -> None:
    env = for_child({}, FULL, SERVICE_PASSTHROUGH)
    assert env == {k: FULL[k] for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME")}


def test_the_bridge_gets_none_of_them() -> None:
    assert for_child({}, FULL, BRIDGE_PASSTHROUGH) == {}
