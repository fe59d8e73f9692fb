"""Issue 38: the service's GenAI spans and metrics, checked against a copy of the OpenTelemetry registry, not our constants.

``semconv/gen_ai-1.41.0.json`` is the semantic-conventions registry's GenAI
client span and metric definitions at v1.41.0 (its ``_source`` says where
from and how). The service runs in-process on its real socket against the fake
Anthropic (the real SDK, real SSE); one turn makes a tool call and answers, a
second is refused by the provider. An in-memory span exporter and metric
reader see what an OTLP collector would, and every required, conditionally
required and recommended attribute of each span and metric definition is
either there, with the registry's type and a value the wire confirms, or named
below with the reason it does not apply; no opt-in (content) attribute is ever
set; nothing outside the definitions but ``clankie.*``. The resource carries
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``; the tracer, the meter
and the resource the registry's schema URL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from opentelemetry.sdk.metrics.export import Histogram, HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from clankie import settings as settings_mod
from clankie.errors import ConfigError
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service import telemetry
from service.app import ServiceApp
from service.captain.lanes.keys import room_lane_key
from service.otel import OtelTracer
from tests.service.captain.harness import FakeBridge, msg, run, service_env

REGISTRY: dict[str, Any] = json.loads((Path(__file__).parent / "semconv" / "gen_ai-1.41.0.json").read_text())
SPANS = {  # our span (by operation) -> the registry's definitions it follows (a provider's extends the generic one)
    "invoke_agent": ("span.gen_ai.invoke_agent.internal",),
    "chat": ("span.gen_ai.inference.client", "span.anthropic.inference.client"),
    "execute_tool": ("span.gen_ai.execute_tool.internal",),
}
METRICS = ("gen_ai.client.token.usage", "gen_ai.client.operation.duration", "gen_ai.client.operation.time_to_first_chunk")
NOT_REQUESTED = "not in the request Clankie sends (the API's default applies)"
PER_CALL = ("a turn's model calls are its chat spans, which carry it; a steered turn shares the calls of the run it "
            "joined, so a turn's own figure would count them twice")
NOT_SET: dict[tuple[str, str], str] = {
    **{("chat", name): NOT_REQUESTED for name in (
        "gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.top_k", "gen_ai.request.stop_sequences",
        "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty", "gen_ai.request.seed",
        "gen_ai.request.choice.count", "gen_ai.output.type")},
    ("chat", "gen_ai.usage.reasoning.output_tokens"): "Anthropic's usage does not count thinking tokens apart from output",
    **{("invoke_agent", name): NOT_REQUESTED for name in (
        "gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.stop_sequences",
        "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty", "gen_ai.request.seed",
        "gen_ai.request.choice.count", "gen_ai.output.type")},
    **{("invoke_agent", name): PER_CALL for name in (
        "gen_ai.request.max_tokens", "gen_ai.response.finish_reasons", "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens")},
    ("invoke_agent", "gen_ai.agent.id"): "the captain is one agent of the process, not a registered remote one",
    ("invoke_agent", "gen_ai.agent.description"): "none is configured",
    ("invoke_agent", "gen_ai.agent.version"): "none is configured",
    ("invoke_agent", "gen_ai.data_source.id"): "no data source (retrieval) is used",
    ("execute_tool", "gen_ai.tool.description"): ("the description is prompt text written for the model (tool "
                                                  "definitions are opt-in content); the name says which tool"),
}
"""Each required or recommended attribute the service does not set, and why (anything else missing fails)."""
ON_FAILURE = "error.type"  # conditionally required "if the operation ended in an error": set then, absent otherwise
ANSWER_ONLY = frozenset({"gen_ai.response.id", "gen_ai.response.model", "gen_ai.response.finish_reasons",
                         "gen_ai.response.time_to_first_chunk", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                         "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens"})
"""What only an answer tells: a call the provider refused (before any chunk) has none of it."""
WELL_KNOWN = ("gen_ai.provider.name", "gen_ai.operation.name", "gen_ai.token.type")
"""Attributes whose value must be one of the registry's members here (error.type is open: our codes are custom values)."""
TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "int": int, "double": float, "boolean": bool,
                                             "string[]": tuple}

TRIGGER = "clankie, what did Dana say about the cake on saturday?"
UPDATE = "checking the thread about Dana's cake"
ANSWER = "Dana is bringing the lemon cake."
OTEL_ENV = {"OTEL_SERVICE_NAME": "clankie-night",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=ignored,service.namespace=ops,deployment.environment.name=eu%2Cwest"}


def definition(kind: str) -> dict[str, dict[str, str]]:
    """The registry's attributes of one of our spans: the union of its definitions (the most demanding level wins)."""
    rank = {"required": 0, "conditionally_required": 1, "recommended": 2, "opt_in": 3}
    out: dict[str, dict[str, str]] = {}
    for group in SPANS[kind]:
        for name, level in REGISTRY["spans"][group]["attributes"].items():
            if name not in out or rank[level["level"]] < rank[out[name]["level"]]:
                out[name] = level
    return out


def check_attributes(kind: str, got: Mapping[str, Any], defined: dict[str, dict[str, str]], *, failed: bool) -> None:
    """Every attribute the definition asks for is set (or excused in NOT_SET), typed as the registry says; no content."""
    for name, level in defined.items():
        if level["level"] == "opt_in":
            assert name not in got, f"{kind}: opt-in {name} is content and never set"
        elif name == ON_FAILURE:
            assert (name in got) == failed, f"{kind}: error.type is set exactly when the operation failed"
        elif (kind, name) in NOT_SET:
            assert name not in got, f"{kind}: {name} is set; drop it from NOT_SET"
        elif failed and name in ANSWER_ONLY:
            assert name not in got, f"{kind}: a refused call has no {name}"
        else:
            assert name in got, f"{kind}: {level['level']} {name} is missing"
    for name, value in got.items():
        if name.startswith("clankie."):
            continue
        assert name in defined, f"{kind}: {name} is not in the conventions' definition"
        entry = REGISTRY["attributes"][name]
        assert isinstance(value, TYPES[entry["type"]]) and not (entry["type"] != "boolean" and isinstance(value, bool)), \
            f"{kind}: {name}={value!r} is not {entry['type']}"
        if isinstance(value, tuple):
            assert all(isinstance(v, str) for v in value), f"{kind}: {name}={value!r}"
        if name in WELL_KNOWN:
            assert value in entry["members"], f"{kind}: {name}={value!r} is not a well-known value"


@pytest.fixture
def telemetry_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, **OTEL_ENV}


@pytest.fixture
def exported(telemetry_env: dict[str, str]) -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """The service's tracer over in-memory exporters, its resource from the settings (OTEL_SERVICE_NAME and the rest)."""
    memory, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer = OtelTracer.to_exporter(memory, reader=reader, resource=settings_mod.load(telemetry_env).otel_resource())
    before = telemetry.install(tracer)
    try:
        yield memory, reader
    finally:
        telemetry.install(before)
        tracer.shutdown()


def points(metric: Metric) -> list[HistogramDataPoint]:
    assert isinstance(metric.data, Histogram)
    out = [p for p in metric.data.data_points if isinstance(p, HistogramDataPoint)]
    assert len(out) == len(metric.data.data_points)
    return out


def number(span: ReadableSpan, name: str) -> float:
    value = (span.attributes or {})[name]
    assert isinstance(value, (int, float))
    return value


def histograms(reader: InMemoryMetricReader) -> tuple[dict[str, Metric], Any, Any]:
    """The metrics read now, by name, with their resource and scope (one of each: the service's own providers)."""
    data = reader.get_metrics_data()
    assert data is not None and len(data.resource_metrics) == 1
    resource = data.resource_metrics[0]
    assert len(resource.scope_metrics) == 1
    scope = resource.scope_metrics[0]
    return {m.name: m for m in scope.metrics}, resource, scope


def test_a_turn_s_spans_and_metrics_carry_every_attribute_the_registry_asks_for(
    telemetry_env: dict[str, str], exported: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """A tool call, an answer and a refused call: spans and metrics against the registry copy, values against the wire."""
    memory, reader = exported
    requests: list[dict[str, Any]] = []
    base_url = ""

    async def body() -> None:
        nonlocal base_url
        async with FakeAnthropic() as fake:
            base_url = fake.base_url
            fake.script(fa.tool_use(("send_text_update", {"text": UPDATE})), fa.text(ANSWER), fa.spend_limit())
            app = ServiceApp(settings_mod.load(service_env(telemetry_env, fake)))
            await app.start()
            try:
                bridge = FakeBridge()
                await bridge.connect(app)
                result = await bridge.submit(msg("m1", TRIGGER))
                assert (result.outcome, result.text) == ("settled", ANSWER)
                refused = await bridge.submit(msg("m2", "clankie, and the candles?"))
                assert refused.outcome == "failed"
            finally:
                await app.close()
            requests.extend(fake.requests)

    run(body())
    spans = sorted(memory.get_finished_spans(), key=lambda s: s.start_time or 0)
    by_kind: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_kind.setdefault(str((span.attributes or {})["gen_ai.operation.name"]), []).append(span)
    assert {k: len(v) for k, v in by_kind.items()} == {"invoke_agent": 2, "chat": 3, "execute_tool": 1}
    assert len(requests) == 3  # one chat span per request the fake saw

    # the resource and the schema URL
    for span in spans:
        assert span.resource.attributes["service.name"] == "clankie-night"  # OTEL_SERVICE_NAME wins over the attribute
        assert span.resource.attributes["service.namespace"] == "ops"
        assert span.resource.attributes["deployment.environment.name"] == "eu,west"  # percent-decoded
        assert span.resource.schema_url == REGISTRY["schema_url"]
        assert span.instrumentation_scope is not None and span.instrumentation_scope.schema_url == REGISTRY["schema_url"]

    # every span against its definitions
    for kind, group in by_kind.items():
        defined = definition(kind)
        expected_kind = {"client": SpanKind.CLIENT, "internal": SpanKind.INTERNAL}
        for span in group:
            assert span.kind is expected_kind[REGISTRY["spans"][SPANS[kind][0]]["span_kind"]]
            got = dict(span.attributes or {})
            failed = span.status.is_ok is False
            check_attributes(kind, got, defined, failed=failed)
            subject = got.get("gen_ai.agent.name") or got.get("gen_ai.tool.name") or got.get("gen_ai.request.model")
            assert span.name == f"{kind} {subject}"

    # the values, against what went over the wire
    lane = room_lane_key("clankie", msg("m1", TRIGGER).room)
    turns, chats = by_kind["invoke_agent"], by_kind["chat"]
    url = urlsplit(base_url)
    for chat, request in zip(chats, requests, strict=True):
        got = dict(chat.attributes or {})
        assert request["stream"] is True and got["gen_ai.request.stream"] is True
        assert got["gen_ai.request.max_tokens"] == request["max_tokens"]
        assert got["gen_ai.request.model"] == request["model"]
        assert (got["server.address"], got["server.port"]) == (url.hostname, url.port)
        assert got["gen_ai.conversation.id"] == telemetry.lane_hash(lane)
    answered, refused_chat = chats[:2], chats[2]
    firsts = [number(chat, "gen_ai.response.time_to_first_chunk") for chat in answered]  # the refused call had none
    assert all(first > 0 for first in firsts)
    ids = [dict(c.attributes or {})["gen_ai.response.id"] for c in answered]
    assert all(str(i).startswith("msg_") for i in ids) and len(set(ids)) == 2
    assert dict(refused_chat.attributes or {})["error.type"] == "usage_limit"
    for turn in turns:
        got = dict(turn.attributes or {})
        assert got["gen_ai.request.model"] == requests[0]["model"] and got["gen_ai.conversation.id"] == telemetry.lane_hash(lane)
    exported_text = json.dumps([json.loads(s.to_json()) for s in spans])
    for content in (TRIGGER, UPDATE, ANSWER, "Dana", "cake", "candles", lane):
        assert content not in exported_text, content

    # the metrics
    metrics, resource_metrics, scope = histograms(reader)
    assert resource_metrics.resource.attributes["service.name"] == "clankie-night"
    assert resource_metrics.resource.schema_url == REGISTRY["schema_url"] == scope.schema_url
    assert set(METRICS) <= set(metrics)
    for name in METRICS:
        spec, metric = REGISTRY["metrics"][name], metrics[name]
        assert spec["instrument"] == "histogram" and isinstance(metric.data, Histogram)
        assert metric.unit == spec["unit"]
        for point in points(metric):
            assert list(point.explicit_bounds) == spec["explicit_bucket_boundaries"]
            got = dict(point.attributes or {})
            check_attributes(name, got, spec["attributes"], failed="error.type" in got)
            assert (got["server.address"], got["server.port"]) == (url.hostname, url.port)
    tokens = {dict(p.attributes or {})["gen_ai.token.type"]: p for p in points(metrics["gen_ai.client.token.usage"])}
    assert tokens["input"].sum == sum(number(c, "gen_ai.usage.input_tokens") for c in answered)  # as the spans count them
    assert tokens["output"].sum == sum(number(c, "gen_ai.usage.output_tokens") for c in answered)
    assert tokens["input"].count == tokens["output"].count == 2
    durations = points(metrics["gen_ai.client.operation.duration"])
    assert sum(p.count for p in durations) == 3
    assert [dict(p.attributes or {}).get("error.type") for p in durations if "error.type" in (p.attributes or {})] == ["usage_limit"]
    first_chunks = points(metrics["gen_ai.client.operation.time_to_first_chunk"])
    assert sum(p.count for p in first_chunks) == 2 and sum(p.sum for p in first_chunks) == pytest.approx(sum(firsts))
    whole = [p for p in durations if "error.type" not in (p.attributes or {})]  # the answered calls, on the same clock
    assert sum(p.sum for p in first_chunks) < sum(p.sum for p in whole)  # each first chunk came before its answer


def test_the_excuses_name_only_attributes_the_registry_asks_for() -> None:
    """NOT_SET cannot go stale: each entry is a required or recommended attribute of that span's definitions."""
    for (kind, name), reason in NOT_SET.items():
        assert reason and definition(kind)[name]["level"] in ("required", "conditionally_required", "recommended"), name


@pytest.mark.parametrize(("variables", "resource"), [
    ({}, {"service.name": "clankie"}),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=tree-b"}, {"service.name": "tree-b"}),
    ({"OTEL_SERVICE_NAME": "tree-a", "OTEL_RESOURCE_ATTRIBUTES": "service.name=tree-b, k=v%3Dw"},
     {"service.name": "tree-a", "k": "v=w"}),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=eu-1"}, {"service.name": "clankie", "service.instance.id": "eu-1"}),
])
def test_the_resource_is_otel_service_name_over_otel_resource_attributes_over_clankie(
    env: dict[str, str], variables: dict[str, str], resource: dict[str, str]
) -> None:
    """The SDK specification's precedence, values percent-decoded; the tree's id is the instance unless one is set."""
    assert settings_mod.load({**env, **variables}).otel_resource("0123abcd") == {"service.instance.id": "0123abcd", **resource}


def test_a_malformed_otel_resource_attributes_stops_the_process(env: dict[str, str]) -> None:
    """A pair without '=' is a configuration error naming it (exit 78), not a warning nobody reads."""
    with pytest.raises(ConfigError, match=r"OTEL_RESOURCE_ATTRIBUTES.*'tree-a'"):
        settings_mod.load({**env, "OTEL_RESOURCE_ATTRIBUTES": "service.namespace=ops,tree-a"})
