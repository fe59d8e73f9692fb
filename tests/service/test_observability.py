"""The service's observability, set once as its entry sets it (service.observability) and reset for the next test:
the records rotate at the sizes its settings say, an OTLP endpoint installs the tracer and plugs it into the agent
runtime's port, and one reset puts the default rotations, no tracer and nothing plugged back."""

from __future__ import annotations

from pathlib import Path

from clankie import observability as kernel
from clankie.rotation import segments
from clankie.settings import load
from clankie.testing.clock import FakeClock
from service import observability, telemetry
from service.agent import observe
from service.captain.deliveries import Evidence
from service.otel import OtelTracer

SMALL_AUDIT = {"CLANKIE_AUDIT_ROTATE_BYTES": "4096", "CLANKIE_AUDIT_KEEP_BYTES": "12288"}


def _evidence_rotated(directory: Path) -> bool:
    """Whether 200 evidence lines (about 20 kB) rotated the evidence file."""
    evidence = Evidence(directory / "evidence.jsonl", FakeClock())
    for n in range(200):
        evidence.record(f"d{n}", "accepted", lane="l")
    return bool(segments(evidence.path))


def test_the_evidence_rotates_at_the_configured_size_until_reset(tmp_path: Path) -> None:
    """Configured with a 4 kB audit rotation the evidence rotates; after the reset the 16 MiB default holds again."""
    observability.configure(load({"HOME": "/h", **SMALL_AUDIT}))
    assert _evidence_rotated(tmp_path / "configured")
    kernel.reset()
    assert not _evidence_rotated(tmp_path / "reset")


def test_an_otlp_endpoint_installs_the_tracer_and_plugs_it_into_the_runtime_until_reset() -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT the process's tracer is the OTLP one and the agent runtime reports to it;
    the reset shuts it down and unplugs the runtime (nothing listens at the endpoint: nothing is ever exported)."""
    observability.configure(load({"HOME": "/h", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}), {})
    installed = telemetry.install(telemetry.NoTracer())
    assert isinstance(installed, OtelTracer)
    telemetry.install(installed)
    assert observe.plug(observe.UNOBSERVED) is not observe.UNOBSERVED
    telemetry.install(installed)
    kernel.reset()
    assert isinstance(telemetry.install(telemetry.NoTracer()), telemetry.NoTracer)
    assert observe.plug(observe.UNOBSERVED) is observe.UNOBSERVED
