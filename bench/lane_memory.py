"""bench lane_memory: one lane, 2,000 turns through the real agent; memory per turn and request size.

Each turn is one member message (about 600 characters) answered by the
loopback fake Anthropic's echo, through the real runtime and the real SDK.
The window is scaled down (20,000 tokens, reserve 4,000, keep 6,000) so the
lane compacts about every forty turns and 2,000 turns finish in about a
minute; summary calls get a fixed 1 kB summary.

``kb_per_turn`` is the Python heap allocated after turn 200 and still held
after the last turn (tracemalloc started at turn 200, after a collection;
allocations made by the fake server and aiohttp are excluded), divided by
the turns in between. ``request_kb`` is the mean size of the JSON body the model was sent
over the last 200 turns. For comparison, the old behaviour kept every entry
of the lane's tree in memory: ``old`` is what parsing every entry ever
written (from all of the lane's session files, carried copies counted once)
holds, per turn.

Run: ``.venv/bin/python bench/lane_memory.py``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie.clock import SystemClock
from clankie.testing import fake_anthropic as fa
from service.agent.agent import Agent, AgentConfig
from service.agent.compaction import SUMMARY_SYSTEM
from service.agent.provider import AnthropicProvider
from service.agent.retention import Retention
from service.agent.session import SessionTree

TURNS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
WARM = 200
SYSTEM = "You are Clankie, a helpful presence in a Discord server. Answer briefly and kindly. " * 10
CONFIG = AgentConfig(context_window=8_000, reserve_tokens=2_000, keep_recent_tokens=2_000)
KEEP_ALL = Retention(max_age_seconds=3650 * 86_400.0, max_files=100_000)  # every file stays, for the comparison
SUMMARY = "Goal: keep the members company. Progress: " + "many messages about many topics; " * 30
EXCLUDE = [
    tracemalloc.Filter(False, "*fake_anthropic*.py"),  # the fake server and its prompt cache
    tracemalloc.Filter(False, "*aiohttp*"),
    tracemalloc.Filter(False, tracemalloc.__file__),
]


def _is_summary(body: dict[str, Any]) -> bool:
    system = body.get("system") or [{}]
    return isinstance(system, list) and system[0].get("text") == SUMMARY_SYSTEM


def _summaries(body: dict[str, Any]) -> fa.Scenario | None:
    return fa.text(SUMMARY) if _is_summary(body) else None


def _heap() -> int:
    gc.collect()
    return sum(stat.size for stat in tracemalloc.take_snapshot().filter_traces(EXCLUDE).statistics("filename"))


def _old_tree_bytes(directory: Path) -> tuple[int, int]:
    """Heap held by every entry the lane ever wrote, parsed the way the old tree held them; and their count."""
    tracemalloc.start(1)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_bytes().splitlines()[1:]:
            entry = json.loads(line)
            entries.setdefault(entry["id"], entry)
    held = tracemalloc.get_traced_memory()[0] - before
    return held, len(entries)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lane = Path(tmp) / "lane"
        async with fa.FakeAnthropic() as fake:
            fake.respond_with(_summaries)
            provider = AnthropicProvider(api_key="bench", model="fake-model", base_url=fake.base_url)
            clock = SystemClock()
            tree = SessionTree.create(lane, clock, KEEP_ALL)
            agent = Agent(session=tree, provider=provider, tools=[], clock=clock, system_prompt=SYSTEM, config=CONFIG)
            request_sizes: list[int] = []
            warm_heap = 0
            start = time.perf_counter()
            try:
                for turn in range(TURNS):
                    message = f"Message {turn} from a member: " + "tell me more about this topic please. " * 15
                    outcome = await agent.run(message)
                    assert outcome.ok, outcome.kind
                    request_sizes += [len(json.dumps(b)) for b in fake.requests if not _is_summary(b)]
                    fake.requests.clear()
                    if turn + 1 == WARM:  # trace from here on: only what the later turns keep is counted
                        tracemalloc.start(1)
                        warm_heap = _heap()
                end_heap = _heap()
                tracemalloc.stop()
                memory_entries = len(tree.entries)
                memory_bytes = sum(len(json.dumps(e)) for e in tree.entries)
            finally:
                await provider.aclose()
                tree.close()
            seconds = time.perf_counter() - start
        files = sorted(lane.glob("*.jsonl"))
        disk = sum(p.stat().st_size for p in files)
        old_bytes, old_entries = _old_tree_bytes(lane)
    kb_per_turn = max(0, end_heap - warm_heap) / (TURNS - WARM) / 1024
    tail = request_sizes[-WARM:]
    request_kb = sum(tail) / len(tail) / 1024
    print(f"turns {TURNS} in {seconds:.1f} s; session files {len(files)} ({disk / 1024:.0f} kB on disk)")
    print(f"heap kept from turn {WARM} to turn {TURNS}: {(end_heap - warm_heap) / 1024:.0f} kB")
    print(f"in memory now: {memory_entries} entries, {memory_bytes / 1024:.1f} kB as JSON")
    print(f"request: mean {request_kb:.1f} kB over the last {WARM} turns, max {max(request_sizes) / 1024:.1f} kB")
    print(
        f"old behaviour (every entry in memory): {old_entries} entries, {old_bytes / 1024:.0f} kB, "
        f"{old_bytes / TURNS / 1024:.2f} kB per turn"
    )
    print(f"bench lane_memory: turns={TURNS} kb_per_turn={kb_per_turn:.2f} request_kb={request_kb:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
