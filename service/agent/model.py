"""The provider seam: what the agent asks of a model, and what it gets back.

:class:`Provider` is a Protocol so the runtime never imports the SDK; the
real implementation is :class:`service.agent.provider.AnthropicProvider`.
A provider raises :class:`service.agent.failures.ProviderError` for every
failure, already classified.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from service.agent.content import Block, Message
from service.agent.outcome import Usage


@dataclass(frozen=True, kw_only=True)
class Signal:
    """One streamed sign of life from the provider: ``kind`` is ``text`` or a marker name.

    ``opened`` comes first, when the stream's response arrives, with its rate-limit headers: the account took the
    call (the governor learns from it then, not at the answer's end); it is not a chunk of the answer.
    """

    kind: str
    text: str = ""
    rate_limits: dict[str, str] = field(default_factory=dict)  # ``opened``: the response's anthropic-ratelimit-* headers


CacheTtl = Literal["5m", "1h"]
"""A prompt-cache lifetime the API takes (``cache_control.ttl``)."""


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One model call. ``system`` and ``tools`` must be byte-stable across turns (caching).

    ``prefix_ttl`` is the cache lifetime of the prefix every lane shares (tools
    and system prompt), ``cache_ttl`` that of the lane's conversation; the API
    requires the longer lifetime first, so ``prefix_ttl`` is never the shorter.
    """

    system: str
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int = 4096
    cache_ttl: CacheTtl = "5m"
    prefix_ttl: CacheTtl = "5m"
    summary: bool = False  # a compaction's summary call (its own prompt; not the lane's conversation)


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """A complete assistant message (``stop_reason`` is never None here)."""

    content: list[Block]
    stop_reason: str
    usage: Usage
    model: str
    rate_limits: dict[str, str] = field(default_factory=dict)  # the answer's anthropic-ratelimit-* headers
    id: str = ""  # the answer's id (msg_...), for traces; empty for a model that gives none


class Provider(Protocol):
    """Streams one model call."""

    @property
    def model(self) -> str: ...

    @property
    def server(self) -> tuple[str, int] | None:
        """Where the calls go (host, port) for traces; None for a model that calls nowhere."""
        ...

    async def complete(
        self, request: ModelRequest, on_signal: Callable[[Signal], None]
    ) -> ModelResponse:
        """Stream the call, report every sign of life, return the final message.

        Raises ``ProviderError`` (classified) on any failure, including a
        stream that ends without ``message_stop`` (kind ``TRUNCATED``).
        Cancellation closes the call.
        """
        ...

    async def aclose(self) -> None: ...
