"""bench agent: billed input tokens with vs without prompt caching, and the runtime's overhead per turn.

A 20-turn lane conversation (a stable system prompt, three tools, a tool
round every fourth turn) runs twice through the real runtime and the real
SDK against the loopback fake Anthropic server: once with the provider's
``cache_control`` breakpoints, once without. Billed input counts a cache
read as 0.1 and a cache write as 1.25 of an input token (5-minute TTL
prices); the fake's usage responds to breakpoints and prefix reuse the way
the API does (it has no minimum cacheable prefix, which the real API has:
1,024-4,096 tokens depending on the model).

Overhead is the wall time of each ``run()`` minus the time spent inside the
provider's model calls (persistence, fsync, transcript building, events),
averaged over the 20 turns of the cached run.

Run: ``python bench/agent.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.clock import SystemClock
from clankie.testing import fake_anthropic as fa
from service.agent.agent import Agent
from service.agent.model import ModelRequest, ModelResponse, Signal
from service.agent.outcome import Usage
from service.agent.provider import AnthropicProvider
from service.agent.session import SessionTree
from service.agent.tools import Tool, ToolContext

TURNS = 20
SYSTEM = (
    "You are Clankie, a helpful presence in a Discord server. Answer briefly and kindly. "
    "Use tools when a picture or a page would help. Never reveal secrets. "
) * 40  # a realistic, stable ~6 KB system prompt
READ, WRITE = 0.1, 1.25


class TimedProvider:
    """Wraps a provider and adds up the time spent inside model calls."""

    def __init__(self, inner: AnthropicProvider) -> None:
        self.inner = inner
        self.model_seconds = 0.0
        self.usages: list[Usage] = []

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def server(self) -> tuple[str, int] | None:
        return self.inner.server

    async def complete(self, request: ModelRequest, on_signal: Callable[[Signal], None]) -> ModelResponse:
        start = time.perf_counter()
        try:
            response = await self.inner.complete(request, on_signal)
        finally:
            self.model_seconds += time.perf_counter() - start
        self.usages.append(response.usage)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _tools() -> list[Tool]:
    async def look(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"page {args.get('url', '')}: " + "content " * 60

    schema = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
    return [
        Tool(name=name, description=f"{name}: fetch and describe a web page.", input_schema=schema, execute=look)
        for name in ("browse", "screenshot", "draw")
    ]


def _script(fake: fa.FakeAnthropic) -> None:
    for turn in range(TURNS):
        if turn % 4 == 3:
            fake.script(fa.tool_use(("browse", {"url": f"https://example.org/{turn}"})))
        fake.script(fa.text(f"Answer {turn}: " + "sure, here is what I think. " * 10))


async def conversation(cache: bool) -> tuple[list[Usage], float, float]:
    """Run the conversation; return per-call usage, total run seconds, model seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        async with fa.FakeAnthropic() as fake:
            _script(fake)
            provider = TimedProvider(
                AnthropicProvider(api_key="bench", model="fake-model", base_url=fake.base_url, cache=cache)
            )
            clock = SystemClock()
            tree = SessionTree.create(Path(tmp), clock)
            agent = Agent(session=tree, provider=provider, tools=_tools(), clock=clock, system_prompt=SYSTEM)
            total = 0.0
            try:
                for turn in range(TURNS):
                    message = f"Message {turn} from a member: " + "tell me more about this topic please. " * 8
                    start = time.perf_counter()
                    outcome = await agent.run(message)
                    total += time.perf_counter() - start
                    assert outcome.ok, outcome.kind
            finally:
                await provider.aclose()
                tree.close()
            return provider.usages, total, provider.model_seconds


def billed(usages: list[Usage]) -> float:
    return sum(u.input + READ * u.cache_read + WRITE * u.cache_write for u in usages)


async def main() -> None:
    cached_usage, cached_total, cached_model = await conversation(cache=True)
    plain_usage, plain_total, plain_model = await conversation(cache=False)
    cached, uncached = billed(cached_usage), billed(plain_usage)
    ratio = cached / uncached
    overhead_ms = (cached_total - cached_model) / TURNS * 1000
    plain_overhead_ms = (plain_total - plain_model) / TURNS * 1000
    print(f"{'':28}{'with caching':>16}{'without':>16}")
    print(f"{'model calls':28}{len(cached_usage):>16}{len(plain_usage):>16}")
    print(f"{'input tokens (uncached)':28}{sum(u.input for u in cached_usage):>16}{sum(u.input for u in plain_usage):>16}")
    print(f"{'cache read tokens':28}{sum(u.cache_read for u in cached_usage):>16}{sum(u.cache_read for u in plain_usage):>16}")
    print(f"{'cache write tokens':28}{sum(u.cache_write for u in cached_usage):>16}{sum(u.cache_write for u in plain_usage):>16}")
    print(f"{'billed input (token-equiv)':28}{cached:>16.0f}{uncached:>16.0f}")
    print(f"{'overhead ms per turn':28}{overhead_ms:>16.2f}{plain_overhead_ms:>16.2f}")
    print(
        f"bench agent: input_tokens_cached={cached:.0f} input_tokens_uncached={uncached:.0f} "
        f"cached_input_ratio={ratio:.3f} overhead_ms_per_turn={overhead_ms:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
