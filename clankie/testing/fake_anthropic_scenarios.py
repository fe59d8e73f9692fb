"""The fake Anthropic's script: what one request gets, and helpers that build the common answers.

A :class:`Reply` is a streamed (or JSON) answer with the misbehaviour to
apply to it; a :class:`Failure` is an HTTP error with the API's error body.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One streamed (or JSON) answer and the misbehaviour to apply to it.

    Event indices count SSE events from 0 (``message_start``). ``cut_after``
    ends the body cleanly before event N (no ``message_stop``);
    ``stall_after`` holds the connection silent before event N until
    ``stall_until`` is set, ``stall_seconds`` pass, or the server closes;
    ``disconnect_after`` drops the TCP connection; ``error_after`` sends an
    ``error`` event instead of event N and closes; ``garbage_after`` sends a
    ``data:`` line that is not JSON instead of event N and closes.
    """

    blocks: list[dict[str, Any]]
    stop_reason: str | None = "end_turn"
    chunk_size: int = 12
    pings: int = 0
    delay: float = 0.0
    cut_after: int | None = None
    stall_after: int | None = None
    stall_seconds: float | None = None
    stall_until: asyncio.Event | None = None
    disconnect_after: int | None = None
    error_after: int | None = None
    garbage_after: int | None = None
    error_type: str = "overloaded_error"
    error_message: str = "Overloaded"
    output_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class Failure:
    """An HTTP error response with the API's error body."""

    status: int
    error_type: str
    message: str
    error_code: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)


Scenario = Reply | Failure
Responder = Callable[[dict[str, Any]], Scenario | None]


# -- helpers -------------------------------------------------------------------


def text(*chunks: str, **options: Any) -> Reply:
    """A plain text answer (the chunks are joined into one block)."""
    return Reply(blocks=[{"type": "text", "text": "".join(chunks)}], **options)


def tool_use(*calls: tuple[str, dict[str, Any]], text: str | None = None, **options: Any) -> Reply:
    """An answer that calls tools: ``tool_use(("name", {...}), ...)``."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for name, args in calls:
        blocks.append({"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name, "input": args})
    return Reply(blocks=blocks, stop_reason="tool_use", **options)


def thinking(thought: str, answer: str, **options: Any) -> Reply:
    """A thinking block followed by a text answer."""
    blocks = [
        {"type": "thinking", "thinking": thought, "signature": "sig-fake"},
        {"type": "text", "text": answer},
    ]
    return Reply(blocks=blocks, **options)


def overloaded() -> Failure:
    return Failure(status=529, error_type="overloaded_error", message="Overloaded")


def server_error() -> Failure:
    return Failure(status=500, error_type="api_error", message="Internal server error")


def rate_limited(retry_after: float | None = None, error_code: str | None = None) -> Failure:
    return Failure(
        status=429,
        error_type="rate_limit_error",
        message="Number of request tokens has exceeded your per-minute rate limit",
        error_code=error_code,
        retry_after=retry_after,
    )


def spend_limit() -> Failure:
    """A 429 carrying a spend-limit ``error_code``: a usage limit, never retried."""
    return Failure(
        status=429,
        error_type="rate_limit_error",
        message="This organization has crossed the monthly API usage threshold of its API tier.",
        error_code="enforced_spend_limit_reached",
    )


def legacy_usage_limit() -> Failure:
    return Failure(
        status=400,
        error_type="invalid_request_error",
        message="You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC.",
    )


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000) -> Failure:
    return Failure(
        status=400,
        error_type="invalid_request_error",
        message=f"prompt is too long: {tokens} tokens > {maximum} maximum",
    )
