"""Tools the model may call, and running one assistant message's tool batch.

A tool has a JSON schema, a timeout and an async ``execute``. Its result is
text (or content blocks) or an error result; an exception, a timeout or an
unknown name becomes an error result the model can read, never a crash.
The batch runs concurrently; results come back in source order.

A tool that brings outside content into the run (``reads_untrusted``: a web
page) taints the run once it is called; a tool marked ``clean_only`` (a
shell) is then withdrawn for the rest of that run (:class:`Toolbox`): it is
no longer offered to the model, and a call to it gets an error result, not
a run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clankie.clock import Clock
from service.agent import observe
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
    reads_untrusted: bool = False  # its results carry content from outside the tree (a web page): they taint the run
    clean_only: bool = False  # withdrawn for the rest of a run once the run is tainted (a shell)

    def spec(self) -> dict[str, Any]:
        """The API ``tools`` entry (stable byte for byte across turns)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            **self.extra,
        }


class Toolbox:
    """One agent's tools, and which of them a run may still call: all of them until the run is tainted (it called
    a ``reads_untrusted`` tool), then all but the ``clean_only`` ones."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = {t.name: t for t in tools}
        self._specs = [t.spec() for t in tools]
        self._clean_specs = [t.spec() for t in tools if not t.clean_only]
        self._tainted = {t.name: _withdrawn(t) if t.clean_only else t for t in tools}

    def taints(self, calls: Sequence[Block]) -> bool:
        """Whether running ``calls`` brings outside content into the run (any of them names a ``reads_untrusted`` tool)."""
        return any((tool := self.tools.get(str(call.get("name")))) is not None and tool.reads_untrusted for call in calls)

    def specs(self, tainted: bool) -> list[dict[str, Any]]:
        """The API ``tools`` list for a run in this state."""
        return self._clean_specs if tainted else self._specs

    def usable(self, tainted: bool) -> dict[str, Tool]:
        """The tools by name for a run in this state (a withdrawn one answers with an error result)."""
        return self._tainted if tainted else self.tools


def _withdrawn(tool: Tool) -> Tool:
    async def refuse(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(content=f"{tool.name} is not available for the rest of this run: the run has read content "
                                  "from outside (a web page), and no such run may use it.", is_error=True)

    return Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema, execute=refuse,
                timeout=tool.timeout, extra=tool.extra, clean_only=True)


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
    with observe.execute_tool(name, call_id) as span:
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
