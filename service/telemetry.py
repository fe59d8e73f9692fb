"""The service's traces: one span per turn, per model call and per tool call, or nothing at all.

The captain calls :func:`invoke_agent` around a turn; the agent runtime
reports each model call and tool call through the port it defines
(:mod:`service.agent.observe`), and the tracer installed here is plugged into
that port (:func:`install`), so those become :func:`chat` and
:func:`execute_tool` spans. By default all of them are no-ops, nothing is
plugged in and OpenTelemetry is never imported. With
``OTEL_EXPORTER_OTLP_ENDPOINT`` set (and the ``otel`` extra installed),
:func:`configure` installs :mod:`service.otel`, which emits spans and the
GenAI client metrics with the OpenTelemetry GenAI semantic conventions
(docs/observability.md, "Traces").

What a span may carry is fixed here, never a message: ids, codes, model
names, token counts, durations, the provider's address, tool names, and the
lane only as :func:`lane_hash`. The span types below take exactly those, so no
caller can hand one a prompt, a reply or a tool's input or output. A model
call's ``chat`` span names the conversation of the turn it runs in (the lane's
hash that :func:`invoke_agent` set for its context, and for the run's task
started inside it), as journald's ``LANE=`` does.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from clankie.errors import ConfigError
from clankie.journald import lane_hash
from clankie.settings import Settings
from service.agent import observe
from service.agent.observe import ChatSpan, ToolSpan
from service.agent.outcome import Usage

log = logging.getLogger(__name__)

TOOL_NAME_CHARS = 64
__all__ = ["ChatCall", "ChatSpan", "NoTracer", "ToolSpan", "Tracer", "TurnSpan", "chat", "configure", "execute_tool", "install",
           "invoke_agent", "lane_hash", "shutdown"]


class TurnSpan(Protocol):
    def ended(self, outcome: str, code: str | None) -> None:
        """The turn's result: its outcome and, if it failed, its code."""


@dataclass(frozen=True, kw_only=True)
class ChatCall:
    """What a ``chat`` span says of its request, never its content: every call streams."""

    model: str
    max_tokens: int
    server: tuple[str, int] | None = None  # where the request goes (host, port); None: a model that calls nowhere
    conversation: str | None = None  # the lane's hash (lane_hash), from the turn the call runs in
    provider: str = "anthropic"  # gen_ai.provider.name of the route the call went on (anthropic, gcp.vertex_ai, aws.bedrock)


class Tracer(Protocol):
    def invoke_agent(self, agent: str, lane: str, delivery_id: str,
                     model: str) -> contextlib.AbstractContextManager[TurnSpan]: ...

    def chat(self, call: ChatCall) -> contextlib.AbstractContextManager[ChatSpan]: ...

    def execute_tool(self, name: str, call_id: str) -> contextlib.AbstractContextManager[ToolSpan]: ...

    def shutdown(self) -> None: ...


class _Nothing:
    """Every span of the no-op tracer: takes what a span takes and keeps none of it."""

    def ended(self, *args: object) -> None:
        return None

    def first_chunk(self, seconds: float) -> None:
        return None

    def answered(self, model: str, usage: Usage, stop_reason: str, response_id: str, seconds: float) -> None:
        return None

    def failed(self, code: str, seconds: float) -> None:
        return None


_NOTHING = _Nothing()


class NoTracer:
    """Tracing off: no span, no import, nothing kept."""

    @contextlib.contextmanager
    def invoke_agent(self, agent: str, lane: str, delivery_id: str, model: str) -> Iterator[TurnSpan]:
        yield _NOTHING

    @contextlib.contextmanager
    def chat(self, call: ChatCall) -> Iterator[ChatSpan]:
        yield _NOTHING

    @contextlib.contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        yield _NOTHING

    def shutdown(self) -> None:
        return None


_tracer: Tracer = NoTracer()
_conversation: contextvars.ContextVar[str | None] = contextvars.ContextVar("clankie_trace_conversation", default=None)


class _Runtime:
    """The tracer as the agent runtime's observer: its model and tool calls become :func:`chat` and
    :func:`execute_tool` spans (a model call in the conversation of the turn it runs in)."""

    def chat(self, call: observe.ModelCall) -> contextlib.AbstractContextManager[ChatSpan]:
        return chat(call.model, call.max_tokens, call.server, call.provider)

    def execute_tool(self, name: str, call_id: str) -> contextlib.AbstractContextManager[ToolSpan]:
        return execute_tool(name, call_id)


_RUNTIME = _Runtime()


def install(tracer: Tracer) -> Tracer:
    """Make ``tracer`` the process's tracer (tests install one over an in-memory exporter); returns the one before.

    A tracer that records is plugged into the agent runtime's port as well; :class:`NoTracer` unplugs it, so with
    tracing off the runtime's calls cost no span at all."""
    global _tracer
    before, _tracer = _tracer, tracer
    observe.plug(observe.UNOBSERVED if type(tracer) is NoTracer else _RUNTIME)
    return before


def configure(settings: Settings, instance: str | None = None) -> None:
    """Install the OTLP tracer (spans and GenAI metrics) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; without the otel
    extra that is a ConfigError. ``instance`` is the tree's id (``service.instance.id`` unless the operator set one)."""
    if settings.otel_exporter_otlp_endpoint is None:
        return
    try:
        from service import otel
    except ImportError as exc:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed "
                          f"(pip install 'clankie[otel]'): {exc.name}") from None
    resource = settings.otel_resource(instance)  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, the tree's id
    install(otel.OtelTracer.to_endpoint(settings.otel_exporter_otlp_endpoint, resource))
    log.info("tracing: GenAI spans and metrics to the OTLP endpoint as service.name=%s (no message content)",
             resource["service.name"])


def shutdown() -> None:
    """Flush and close the tracer (the process is stopping)."""
    install(NoTracer()).shutdown()


@contextlib.contextmanager
def invoke_agent(agent: str, lane: str, delivery_id: str, model: str) -> Iterator[TurnSpan]:
    """A turn's span (``invoke_agent``) for a turn asking ``model``; the lane is exported only as :func:`lane_hash`.

    Inside it (and in tasks started inside it: the run a turn starts), :func:`chat` spans carry the same hash.
    """
    token = _conversation.set(lane_hash(lane))
    try:
        with _tracer.invoke_agent(agent, lane, delivery_id, model) as span:
            yield span
    finally:
        _conversation.reset(token)


def chat(model: str, max_tokens: int, server: tuple[str, int] | None,
         provider: str = "anthropic") -> contextlib.AbstractContextManager[ChatSpan]:
    """One model call's span (``chat <model>``) on ``provider``'s route, in the conversation of the turn it runs in."""
    return _tracer.chat(ChatCall(model=model, max_tokens=max_tokens, server=server, conversation=_conversation.get(),
                                 provider=provider))


def execute_tool(name: str, call_id: str) -> contextlib.AbstractContextManager[ToolSpan]:
    """One tool call's span (``execute_tool <name>``)."""
    return _tracer.execute_tool(name[:TOOL_NAME_CHARS], call_id)
