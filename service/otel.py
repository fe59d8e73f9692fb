"""OpenTelemetry GenAI spans and metrics (the ``otel`` extra): imported only by :func:`service.telemetry.configure`.

Span names, attributes and metrics follow the GenAI semantic conventions of
:data:`CONVENTIONS` (the last release that defines them in the
semantic-conventions repository itself; its schema URL is on the tracer, the
meter and the resource):

* ``invoke_agent <agent>`` (INTERNAL) per turn: ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.agent.name``, ``gen_ai.request.model``,
  ``gen_ai.conversation.id`` (the lane's hash, never the lane),
  ``clankie.delivery_id``, ``clankie.turn.outcome`` and, for a failed turn,
  ``error.type`` (its code);
* ``chat <model>`` (CLIENT) per model call: ``gen_ai.request.model``,
  ``gen_ai.request.max_tokens``, ``gen_ai.request.stream`` (every call
  streams), ``server.address``/``server.port``, ``gen_ai.conversation.id``
  (the hash of the turn's lane), ``gen_ai.response.time_to_first_chunk``,
  ``gen_ai.response.id``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens`` (every input token, cached or not, as the
  conventions count them for Anthropic), ``gen_ai.usage.output_tokens``,
  ``gen_ai.usage.cache_read.input_tokens``,
  ``gen_ai.usage.cache_creation.input_tokens``,
  ``gen_ai.response.finish_reasons``, ``error.type`` on failure;
* ``execute_tool <tool>`` (INTERNAL) per tool call: ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``error.type`` when the
  tool's result is an error.

And per model call, the GenAI client metrics (histograms with the
conventions' bucket boundaries): ``gen_ai.client.token.usage`` (``{token}``,
``gen_ai.token.type`` ``input`` or ``output``, for an answered call),
``gen_ai.client.operation.duration`` (seconds, with ``error.type`` for a
failed call) and ``gen_ai.client.operation.time_to_first_chunk`` (seconds),
each with the operation, provider, request model, response model (when
answered) and server.

No prompt, reply, tool input or tool output is ever set: the span types of
:mod:`service.telemetry` are handed none. Spans go out in batches from the
SDK's own thread (``BatchSpanProcessor``), so a slow collector costs a turn
nothing; its queue is the SDK's bounded one (2,048 spans; past that spans are
dropped, never buffered without bound). Metrics are aggregated in memory (a
few series: one per model, token type and error) and sent by the SDK's own
periodic reader (``OTEL_METRIC_EXPORT_INTERVAL``, 60 s by default).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from service.agent.outcome import Usage
from service.telemetry import ChatCall, ChatSpan, ToolSpan, TurnSpan, lane_hash

CONVENTIONS = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{CONVENTIONS}"
PROVIDER = "anthropic"
SCOPE = "clankie.service"
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""The bucket boundaries the conventions give the token and the time histograms (gen-ai-metrics.md)."""
DEFAULT_RESOURCE = {"service.name": "clankie"}
METRICS_FLUSH_MS = 2000  # the last metrics export at stop waits at most this (the SDK's default is 30 s, past the grace)
# record_exception / set_status_on_exception off on every span: an exception's message may quote content, so a
# span records only the code it is told


class _Metrics:
    """The GenAI client metrics of this process (one meter provider of its own; the global one is left alone)."""

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(SCOPE, schema_url=SCHEMA_URL)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", unit="s",
            description="Time to receive the first chunk, measured from when the client issues the generation "
                        "request to when the first chunk is received in the response stream.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)


def _server(call: ChatCall) -> dict[str, AttributeValue]:
    if call.server is None:
        return {}
    return {"server.address": call.server[0], "server.port": call.server[1]}


class _Turn:
    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, outcome: str, code: str | None) -> None:
        self.span.set_attribute("clankie.turn.outcome", outcome)
        if code:
            self.span.set_attribute("error.type", code)
            self.span.set_status(Status(StatusCode.ERROR))


class _Chat:
    def __init__(self, span: Span, call: ChatCall, metrics: _Metrics) -> None:
        self.span = span
        self.metrics = metrics
        self.common: dict[str, AttributeValue] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": call.provider,
                                                  "gen_ai.request.model": call.model, **_server(call)}
        self.first: float | None = None

    def first_chunk(self, seconds: float) -> None:
        self.first = seconds
        self.span.set_attribute("gen_ai.response.time_to_first_chunk", seconds)

    def answered(self, model: str, usage: Usage, stop_reason: str, response_id: str, seconds: float) -> None:
        s = self.span
        s.set_attribute("gen_ai.response.model", model)
        if response_id:
            s.set_attribute("gen_ai.response.id", response_id)
        tokens_in = usage.input + usage.cache_read + usage.cache_write
        s.set_attribute("gen_ai.usage.input_tokens", tokens_in)
        s.set_attribute("gen_ai.usage.output_tokens", usage.output)
        s.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read)
        s.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write)
        s.set_attribute("gen_ai.response.finish_reasons", (stop_reason,))
        answered = {**self.common, "gen_ai.response.model": model}
        self.metrics.tokens.record(tokens_in, {**answered, "gen_ai.token.type": "input"})
        self.metrics.tokens.record(usage.output, {**answered, "gen_ai.token.type": "output"})
        self._measured(seconds, answered)

    def failed(self, code: str, seconds: float) -> None:
        self.span.set_attribute("error.type", code)
        self.span.set_status(Status(StatusCode.ERROR))
        self._measured(seconds, {**self.common, "error.type": code})

    def _measured(self, seconds: float, attributes: dict[str, AttributeValue]) -> None:
        self.metrics.duration.record(seconds, attributes)
        if self.first is not None:
            self.metrics.first_chunk.record(self.first, {k: v for k, v in attributes.items() if k != "error.type"})


class _Tool:
    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, is_error: bool) -> None:
        if is_error:
            self.span.set_attribute("error.type", "tool_error")
            self.span.set_status(Status(StatusCode.ERROR))


class OtelTracer:
    """The GenAI spans and metrics of a turn, on SDK providers of this process's own (the global ones are left alone).

    ``resource`` is :meth:`clankie.settings.Settings.otel_resource` (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``); the SDK adds its own ``telemetry.sdk.*`` attributes.
    """

    def __init__(self, processor: SpanProcessor, reader: MetricReader | None = None,
                 resource: Mapping[str, str] = DEFAULT_RESOURCE) -> None:
        self.resource = Resource.create(dict(resource), schema_url=SCHEMA_URL)
        self.provider = TracerProvider(resource=self.resource)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SCOPE, schema_url=SCHEMA_URL)
        self.meters = MeterProvider(resource=self.resource, metric_readers=[reader] if reader is not None else [])
        self.metrics = _Metrics(self.meters)
        self._open = True

    @classmethod
    def to_endpoint(cls, endpoint: str, resource: Mapping[str, str] = DEFAULT_RESOURCE) -> OtelTracer:
        """Spans in batches to ``<endpoint>/v1/traces`` and metrics to ``<endpoint>/v1/metrics`` over OTLP/HTTP
        (protobuf); headers, timeouts and the export interval from the standard OTEL_* variables."""
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        base = endpoint.rstrip("/")
        return cls(BatchSpanProcessor(OTLPSpanExporter(endpoint=base + "/v1/traces")),
                   PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=base + "/v1/metrics")), resource)

    @classmethod
    def to_exporter(cls, exporter: SpanExporter, processor: type[SpanProcessor] | None = None, *,
                    reader: MetricReader | None = None, resource: Mapping[str, str] = DEFAULT_RESOURCE) -> OtelTracer:
        """Over any exporter and metric reader (tests: in-memory ones, with the simple span processor)."""
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        return cls((processor or SimpleSpanProcessor)(exporter), reader, resource)  # type: ignore[call-arg]

    @contextlib.contextmanager
    def invoke_agent(self, agent: str, lane: str, delivery_id: str, model: str) -> Iterator[TurnSpan]:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": PROVIDER, "gen_ai.agent.name": agent,
                      "gen_ai.request.model": model, "gen_ai.conversation.id": lane_hash(lane),
                      "clankie.delivery_id": delivery_id}
        with self.tracer.start_as_current_span(f"invoke_agent {agent}", kind=SpanKind.INTERNAL, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield _Turn(span)

    @contextlib.contextmanager
    def chat(self, call: ChatCall) -> Iterator[ChatSpan]:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": call.provider, "gen_ai.request.model": call.model,
            "gen_ai.request.max_tokens": call.max_tokens, "gen_ai.request.stream": True, **_server(call)}
        if call.conversation is not None:
            attributes["gen_ai.conversation.id"] = call.conversation
        with self.tracer.start_as_current_span(f"chat {call.model}", kind=SpanKind.CLIENT, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield _Chat(span, call, self.metrics)

    @contextlib.contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                      "gen_ai.tool.type": "function"}
        with self.tracer.start_as_current_span(f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield _Tool(span)

    def shutdown(self) -> None:
        """Flush and close both providers (the spans still batched and the metrics not yet sent go out now); once."""
        if self._open:
            self._open = False
            self.provider.shutdown()
            self.meters.shutdown(timeout_millis=METRICS_FLUSH_MS)
