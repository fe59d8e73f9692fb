"""What a process reports, switched on once from its settings and back off for tests: one :func:`configure`, one
:func:`reset` (structlog's ``configure`` and ``reset_defaults``).

A process has up to three process-wide switches of what it reports: its
meter (:data:`clankie.metrics.METER`, on when ``CLANKIE_METRICS_LISTEN`` is
set: the supervisor serves what the children count) and, in the service, its
tracer (:mod:`service.telemetry`, on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set) and the sizes its lane logs and evidence rotate at
(:mod:`service.captain.records`). The kernel owns the meter; a process
package hands its own switches in as :class:`Part` values (the kernel imports
none of them). Every child's entry (:func:`clankie.entry.run_child`) calls
:func:`configure` once, with its spec's parts, as soon as the settings of its
life are read and its logging is set up; nothing else switches any of them.
:func:`reset` puts every switch :func:`configure` set back to its default
(tests, after each one: ``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clankie.metrics import METER
from clankie.settings import Settings

__all__ = ["Part", "configure", "reset"]


@dataclass(frozen=True)
class Part:
    """One process-wide switch a process package adds: how its settings set it, and how it goes back to its default."""

    name: str
    configure: Callable[[Settings, Mapping[str, str]], None]
    """Set the switch from this life's settings and environment (without secrets); may raise ConfigError."""
    reset: Callable[[], None]
    """Back to its default (for tests: the next one starts from nothing observed)."""


_configured: list[Part] = []


def configure(settings: Settings, environ: Mapping[str, str] | None = None, parts: Sequence[Part] = ()) -> None:
    """Switch this process's observability on as ``settings`` say: the meter, then each of the process's ``parts``."""
    METER.enabled = settings.metrics_listen is not None  # the supervisor serves them; off, counting costs nothing
    for part in parts:
        part.configure(settings, {} if environ is None else environ)
        if part not in _configured:
            _configured.append(part)


def reset() -> None:
    """Every switch back to its default: the meter off and empty, each part :func:`configure` set reset, last first."""
    METER.reset()
    while _configured:
        _configured.pop().reset()
