"""Helpers for agent-runtime tests: a harness of fake server, real SDK provider, tree and agent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.agent.agent import Agent, AgentConfig
from service.agent.config import Meter
from service.agent.events import AgentEvent
from service.agent.provider import AnthropicProvider
from service.agent.session import SessionTree
from service.agent.tools import Tool, ToolContext, ToolResult

T = TypeVar("T")
SYSTEM = "You are Clankie, under test."


def arun(coro: Coroutine[Any, Any, T]) -> T:
    """Run one async test body on a fresh event loop."""
    return asyncio.run(coro)


@dataclass
class Harness:
    fake: FakeAnthropic
    provider: AnthropicProvider
    session: SessionTree
    agent: Agent
    clock: FakeClock
    events: list[AgentEvent] = field(default_factory=list)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_event(self, predicate: Callable[[AgentEvent], bool]) -> AgentEvent:
        """Wait until an event matching ``predicate`` has been emitted."""
        done: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
        for event in self.events:
            if predicate(event):
                return event

        def watch(event: AgentEvent) -> None:
            if predicate(event) and not done.done():
                done.set_result(event)

        unsubscribe = self.agent.subscribe(watch)
        try:
            return await asyncio.wait_for(done, 10)
        finally:
            unsubscribe()


@contextlib.asynccontextmanager
async def harness(
    tmp_path: Path,
    *,
    tools: Sequence[Tool] = (),
    clock: FakeClock | None = None,
    config: AgentConfig | None = None,
    session: SessionTree | None = None,
    read_timeout: float = 600.0,
    meter: Meter | None = None,
) -> AsyncIterator[Harness]:
    clock = clock or FakeClock()
    async with FakeAnthropic() as fake:
        provider = AnthropicProvider(
            api_key="test", model="fake-model", base_url=fake.base_url, read_timeout=read_timeout
        )
        tree = session or SessionTree.create(tmp_path / "lane", clock)
        agent = Agent(
            session=tree, provider=provider, tools=tools, clock=clock, system_prompt=SYSTEM, config=config, meter=meter
        )
        h = Harness(fake=fake, provider=provider, session=tree, agent=agent, clock=clock)
        agent.subscribe(h.events.append)
        try:
            yield h
        finally:
            await provider.aclose()
            tree.close()


def echo_tool(name: str = "echo", gate: asyncio.Event | None = None, log: list[str] | None = None) -> Tool:
    """A tool that (optionally) waits for ``gate``, then returns its ``text`` argument."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if log is not None:
            log.append(f"start {name}")
        ctx.update()
        if gate is not None:
            await gate.wait()
        if log is not None:
            log.append(f"end {name}")
        return ToolResult(content=f"{name}: {args.get('text', '')}")

    return Tool(
        name=name,
        description=f"Echo text back ({name}).",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        execute=execute,
        timeout=30.0,
    )


def user_texts(message: dict[str, Any]) -> list[str]:
    return [b["text"] for b in message["content"] if b.get("type") == "text"]
