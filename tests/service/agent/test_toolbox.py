"""Which tools a run may still call: a ``reads_untrusted`` call taints the run, and ``clean_only`` tools are then
withdrawn from the request's list and refused if called anyway."""

from __future__ import annotations

import asyncio
from typing import Any

from service.agent.tools import Tool, Toolbox, ToolContext, ToolResult


async def _ran(args: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
    return "ran"


def _tool(name: str, *, reads_untrusted: bool = False, clean_only: bool = False) -> Tool:
    return Tool(name=name, description=name, input_schema={"type": "object"}, execute=_ran,
                reads_untrusted=reads_untrusted, clean_only=clean_only)


def _call(name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": name, "name": name, "input": {}}


def test_a_clean_run_has_every_tool_and_a_tainted_one_loses_the_clean_only_ones() -> None:
    """Before the taint every spec and tool; after it the shell is gone from the specs and answers with an error."""
    box = Toolbox([_tool("update"), _tool("page", reads_untrusted=True), _tool("shell", clean_only=True)])
    assert [s["name"] for s in box.specs(False)] == ["update", "page", "shell"]
    assert [s["name"] for s in box.specs(True)] == ["update", "page"]
    assert box.usable(False)["shell"] is box.tools["shell"]
    async def call_shell() -> ToolResult | str:
        return await box.usable(True)["shell"].execute({}, ToolContext(call_id="c", report=lambda: None))

    refused = asyncio.run(call_shell())
    assert isinstance(refused, ToolResult) and refused.is_error and "not available" in str(refused.content)
    assert box.usable(True)["update"] is box.tools["update"]


def test_only_a_call_to_a_reads_untrusted_tool_taints() -> None:
    """A batch taints when any call names a tool that reads outside content; other or unknown names do not."""
    box = Toolbox([_tool("update"), _tool("page", reads_untrusted=True), _tool("shell", clean_only=True)])
    assert not box.taints([_call("update"), _call("shell"), _call("nosuch")])
    assert box.taints([_call("update"), _call("page")])
