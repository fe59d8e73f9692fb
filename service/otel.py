"""OpenTelemetry GenAI spans (the ``otel`` extra): imported only by :func:`service.telemetry.configure`.

Span names and attributes follow the GenAI semantic conventions:

* ``invoke_agent <agent>`` (INTERNAL) per turn: ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.agent.name``, ``gen_ai.conversation.id``
  (the lane's hash, never the lane), ``clankie.delivery_id``,
  ``clankie.turn.outcome`` and, for a failed turn, ``error.type`` (its code);
* ``chat <model>`` (CLIENT) per model call: ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` (every input
  token, cached or not, as the conventions count them),
  ``gen_ai.usage.output_tokens``, ``gen_ai.usage.cache_read.input_tokens``,
  ``gen_ai.usage.cache_creation.input_tokens``,
  ``gen_ai.response.finish_reasons``, ``error.type`` on failure;
* ``execute_tool <tool>`` (INTERNAL) per tool call: ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``error.type`` when the
  tool's result is an error.

No prompt, reply, tool input or tool output is ever set: the span types of
:mod:`service.telemetry` are handed none. Spans go out in batches from the
SDK's own thread (``BatchSpanProcessor``), so a slow collector costs a turn
nothing; its queue is the SDK's bounded one (2,048 spans; past that spans are
dropped, never buffered without bound).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from service.agent.outcome import Usage
from service.telemetry import ChatSpan, ToolSpan, TurnSpan, lane_hash

PROVIDER = "anthropic"
SCOPE = "clankie.service"
# record_exception / set_status_on_exception off on every span: an exception's message may quote content, so a
# span records only the code it is told


class _Turn:
    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, outcome: str, code: str | None) -> None:
        self.span.set_attribute("clankie.turn.outcome", outcome)
        if code:
            self.span.set_attribute("error.type", code)
            self.span.set_status(Status(StatusCode.ERROR))


class _Chat:
    def __init__(self, span: Span) -> None:
        self.span = span

    def answered(self, model: str, usage: Usage, stop_reason: str) -> None:
        s = self.span
        s.set_attribute("gen_ai.response.model", model)
        s.set_attribute("gen_ai.usage.input_tokens", usage.input + usage.cache_read + usage.cache_write)
        s.set_attribute("gen_ai.usage.output_tokens", usage.output)
        s.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read)
        s.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write)
        s.set_attribute("gen_ai.response.finish_reasons", (stop_reason,))

    def failed(self, code: str) -> None:
        self.span.set_attribute("error.type", code)
        self.span.set_status(Status(StatusCode.ERROR))


class _Tool:
    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, is_error: bool) -> None:
        if is_error:
            self.span.set_attribute("error.type", "tool_error")
            self.span.set_status(Status(StatusCode.ERROR))


class OtelTracer:
    """The GenAI spans of a turn, on an SDK tracer provider of this process's own (the global one is left alone)."""

    def __init__(self, processor: SpanProcessor) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": "clankie"}))
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SCOPE)

    @classmethod
    def to_endpoint(cls, endpoint: str) -> OtelTracer:
        """Batches to ``<endpoint>/v1/traces`` over OTLP/HTTP (protobuf); headers etc. from the standard OTEL_* variables."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))

    @classmethod
    def to_exporter(cls, exporter: SpanExporter, processor: type[SpanProcessor] | None = None) -> OtelTracer:
        """Over any exporter (tests: an in-memory one, with the simple processor)."""
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        return cls((processor or SimpleSpanProcessor)(exporter))  # type: ignore[call-arg]

    @contextlib.contextmanager
    def invoke_agent(self, agent: str, lane: str, delivery_id: str) -> Iterator[TurnSpan]:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": PROVIDER, "gen_ai.agent.name": agent,
                      "gen_ai.conversation.id": lane_hash(lane), "clankie.delivery_id": delivery_id}
        with self.tracer.start_as_current_span(f"invoke_agent {agent}", kind=SpanKind.INTERNAL, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield _Turn(span)

    @contextlib.contextmanager
    def chat(self, model: str) -> Iterator[ChatSpan]:
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": model}
        with self.tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield _Chat(span)

    @contextlib.contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                      "gen_ai.tool.type": "function"}
        with self.tracer.start_as_current_span(f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield _Tool(span)

    def shutdown(self) -> None:
        self.provider.shutdown()
