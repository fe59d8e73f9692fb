"""Tools the model may call, and running one assistant message's tool batch.

A tool has a JSON schema, a timeout and an async ``execute``. Its result is
text (or content blocks) or an error result; an exception, a timeout or an
unknown name becomes an error result the model can read, never a crash.
The batch runs concurrently; results come back in source order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from clankie.clock import Clock
from service import telemetry
from service.agent.content import Block

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    """What a tool returns: text or content blocks (text/image), possibly an error."""

    content: str | list[Block]
    is_error: bool = False


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Handed to a running tool: its call id and a way to report progress."""

    call_id: str
    report: Callable[[], None]

    def update(self) -> None:
        """Report a sign of life (emits ``ToolUpdate``; the watchdog sees it)."""
        self.report()


Execute = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult | str]]


@dataclass(frozen=True, kw_only=True)
class Tool:
    """One tool: name, description, input JSON schema, timeout in seconds, and its body."""

    name: str
    description: str
    input_schema: dict[str, Any]
    execute: Execute
    timeout: float = 120.0
    extra: dict[str, Any] = field(default_factory=dict)
    # what a call is about, content-free (e.g. a URL's host name), for ToolStart; None: nothing to say
    subject: Callable[[dict[str, Any]], str | None] | None = None

    def spec(self) -> dict[str, Any]:
        """The API ``tools`` entry (stable byte for byte across turns)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            **self.extra,
        }


@dataclass(frozen=True, kw_only=True)
class ToolCallHooks:
    """How the batch runner reports to the agent's event stream."""

    started: Callable[[str, str, str | None], None]  # call id, tool name, the call's subject
    updated: Callable[[str, str], None]
    ended: Callable[[str, str, bool], None]


async def run_batch(
    calls: list[Block], tools: dict[str, Tool], clock: Clock, hooks: ToolCallHooks
) -> list[Block]:
    """Run every ``tool_use`` block concurrently; return ``tool_result`` blocks in order.

    Cancellation (abort) cancels every running tool and propagates.
    """
    tasks = [asyncio.ensure_future(_run_one(call, tools, clock, hooks)) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _run_one(call: Block, tools: dict[str, Tool], clock: Clock, hooks: ToolCallHooks) -> Block:
    call_id, name = str(call["id"]), str(call["name"])
    tool = tools.get(name)
    hooks.started(call_id, name, _subject(tool, call))
    with telemetry.execute_tool(name, call_id) as span:
        if tool is None:
            result = ToolResult(content=f"Unknown tool {name!r}.", is_error=True)
        else:
            context = ToolContext(call_id=call_id, report=lambda: hooks.updated(call_id, name))
            result = await _execute(tool, dict(call.get("input") or {}), context, clock)
        span.ended(result.is_error)
    hooks.ended(call_id, name, result.is_error)
    return {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": result.content,
        "is_error": result.is_error,
    }


def _subject(tool: Tool | None, call: Block) -> str | None:
    if tool is None or tool.subject is None:
        return None
    try:
        return tool.subject(dict(call.get("input") or {}))
    except Exception:  # a subject is decoration: a bad input has none
        return None


async def _execute(tool: Tool, args: dict[str, Any], context: ToolContext, clock: Clock) -> ToolResult:
    body = asyncio.ensure_future(tool.execute(args, context))
    deadline = asyncio.ensure_future(clock.sleep(tool.timeout))
    try:
        await asyncio.wait({body, deadline}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        deadline.cancel()
        if not body.done():
            body.cancel()
            await asyncio.gather(body, return_exceptions=True)
    if body.cancelled():
        log.warning("tool %s timed out after %.1fs", tool.name, tool.timeout)
        return ToolResult(content=f"Tool {tool.name} timed out after {tool.timeout:g}s.", is_error=True)
    error = body.exception()
    if error is not None:
        log.warning("tool %s raised %s", tool.name, type(error).__name__)
        return ToolResult(content=f"Tool {tool.name} failed: {type(error).__name__}: {error}", is_error=True)
    value = body.result()
    return ToolResult(content=value) if isinstance(value, str) else value
