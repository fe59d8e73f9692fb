"""The service's own switches of what it reports, plugged into the process's one :func:`clankie.observability.configure`.

Beside the kernel's meter the service has two: its tracer
(:func:`service.telemetry.configure`: OpenTelemetry spans and GenAI metrics,
only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, also plugged into the agent
runtime's port) and the sizes its lane logs and evidence rotate at
(:func:`service.captain.records.configure`). :data:`PARTS` is what the
service's :data:`~service.app.SPEC` hands the entry; :func:`configure` does
what the entry does with them, for a service built in-process (tests).
"""

from __future__ import annotations

from collections.abc import Mapping

from clankie import observability
from clankie.child import tree_id
from clankie.settings import Settings
from service import telemetry
from service.captain import records


def _tracing(settings: Settings, environ: Mapping[str, str]) -> None:
    telemetry.configure(settings, tree_id(environ))  # the tree's id is service.instance.id unless the operator set one


def _records(settings: Settings, environ: Mapping[str, str]) -> None:
    records.configure(settings)


TRACING = observability.Part("tracing", _tracing, telemetry.shutdown)
RECORDS = observability.Part("records", _records, records.reset)
PARTS = (TRACING, RECORDS)
"""The service's switches, in the order they are set."""


def configure(settings: Settings, environ: Mapping[str, str] | None = None) -> None:
    """The service's observability, as its entry sets it: the meter, the tracer, the records' rotations."""
    observability.configure(settings, environ, PARTS)
