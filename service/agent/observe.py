"""The agent runtime's port for what it reports of its work: one span per model call and one per tool call.

The runtime never imports its host. It reports each model call
(:func:`chat`) and each tool call (:func:`execute_tool`) to the process's
:class:`Observer`, a protocol it defines here; until a host plugs one in
(:func:`plug`) nobody observes: every span is a no-op and nothing is kept.
The service plugs its telemetry in (:mod:`service.telemetry`, which turns
these into OpenTelemetry GenAI spans in the conversation of the turn they run
in); a test plugs in a recording observer.

What a span may be told is fixed by the types below, never a message: the
model, its token limit, the address a call goes to and the route's provider;
the time to the first chunk, the answer's model, usage, stop reason and id,
or the failure's code; a tool's name and call id and whether its result is an
error. No prompt, reply, tool input or tool output can be handed to one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from service.agent.outcome import Usage

__all__ = ["UNOBSERVED", "ChatSpan", "ModelCall", "Observer", "ToolSpan", "chat", "execute_tool", "plug"]


@dataclass(frozen=True, kw_only=True)
class ModelCall:
    """One model call as the runtime reports it, never its content: every call streams."""

    model: str
    max_tokens: int
    server: tuple[str, int] | None = None  # where the request goes (host, port); None: a model that calls nowhere
    provider: str = "anthropic"  # the route's provider (anthropic, gcp.vertex_ai, aws.bedrock)


class ChatSpan(Protocol):
    """What the runtime tells the span of one model call."""

    def first_chunk(self, seconds: float) -> None:
        """The stream's first chunk arrived, ``seconds`` after the request left."""

    def answered(self, model: str, usage: Usage, stop_reason: str, response_id: str, seconds: float) -> None:
        """The model answered: the model that did, its token counts, why it stopped, the answer's id, the call's time."""

    def failed(self, code: str, seconds: float) -> None:
        """The call failed with this kind of error (a code, never the provider's message) after ``seconds``."""


class ToolSpan(Protocol):
    """What the runtime tells the span of one tool call."""

    def ended(self, is_error: bool) -> None:
        """The tool call ended, with an error result or not."""


class Observer(Protocol):
    """Whoever watches the runtime's calls: a span around each model call and each tool call."""

    def chat(self, call: ModelCall) -> contextlib.AbstractContextManager[ChatSpan]:
        """The span of one model call, open while it streams."""

    def execute_tool(self, name: str, call_id: str) -> contextlib.AbstractContextManager[ToolSpan]:
        """The span of one tool call, open while it runs."""


class _Nothing:
    """Every span of the absent observer: takes what a span takes and keeps none of it."""

    def first_chunk(self, seconds: float) -> None:
        return None

    def answered(self, model: str, usage: Usage, stop_reason: str, response_id: str, seconds: float) -> None:
        return None

    def failed(self, code: str, seconds: float) -> None:
        return None

    def ended(self, is_error: bool) -> None:
        return None


_NOTHING = _Nothing()


class _Unobserved:
    """Nobody observes: no span, nothing kept."""

    @contextlib.contextmanager
    def chat(self, call: ModelCall) -> Iterator[ChatSpan]:
        yield _NOTHING

    @contextlib.contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        yield _NOTHING


UNOBSERVED: Observer = _Unobserved()
"""The observer of a process whose host plugged none in."""

_observer: Observer = UNOBSERVED


def plug(observer: Observer) -> Observer:
    """Make ``observer`` the one the runtime reports to in this process; returns the one before (to plug back)."""
    global _observer
    before, _observer = _observer, observer
    return before


def chat(call: ModelCall) -> contextlib.AbstractContextManager[ChatSpan]:
    """The span of one model call, from the process's observer."""
    return _observer.chat(call)


def execute_tool(name: str, call_id: str) -> contextlib.AbstractContextManager[ToolSpan]:
    """The span of one tool call, from the process's observer."""
    return _observer.execute_tool(name, call_id)
