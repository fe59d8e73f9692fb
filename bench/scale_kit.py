"""bench/scale.py's parts: the stamping fake model, the reply index, and the arithmetic of its report."""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from aiohttp import web

from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from service.agent.compaction import SUMMARY_SYSTEM

TOKEN = re.compile(r"scale-(\d+)")
TARGETS = {"fds": 256, "kb_per_room": 5.0, "kb_per_turn": 1.0, "idle_tree_mb": 300.0}
SUMMARY = "Goal: keep the members company. Progress: " + "many greetings, each answered; " * 30
ISSUE = {"rooms_answered": "stops at ~1,015", "kb_per_turn": 13.0, "idle_tree_mb": 660.0}


class Anthropic(fa.FakeAnthropic):
    """The fake model, stamping each request's arrival by its newest ``scale-N`` token; keeps no bodies."""

    def __init__(self, limits: fa.RateLimits | None = None) -> None:
        super().__init__(limits=limits)
        self.served = 0  # requests answered or refused, all told
        self.arrived: dict[int, float] = {}
        self.last_size = 0
        self.summaries = 0
        self.respond_with(self._summary)

    def _summary(self, body: dict[str, Any]) -> fa.Scenario | None:
        """A compaction's summary call gets a fixed 1 kB summary (the echo would grow it without bound)."""
        system = body.get("system") or [{}]
        if isinstance(system, list) and system and isinstance(system[0], dict) and system[0].get("text") == SUMMARY_SYSTEM:
            self.summaries += 1
            return fa.text(SUMMARY)
        return None  # the echo

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=256 * 1024 * 1024)  # a 2,000-turn session is megabytes
        app.router.add_post("/v1/messages", self._messages)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self.base_url = f"http://{host}:{self._runner.addresses[0][1]}"
        return self.base_url

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        now = time.monotonic()
        self.served += 1
        raw = await request.read()  # cached: the base handler's request.json() reads it again
        self.last_size = len(raw)
        found = TOKEN.findall(raw.decode(errors="replace"))
        if found:  # the newest message's token is the largest
            self.arrived.setdefault(max(int(n) for n in found), now)
        try:
            return await super()._messages(request)
        finally:
            self.requests.clear()


@dataclass
class Replies:
    """Replies posted at the fake Discord, indexed by the message they answer (scanned incrementally)."""

    discord: FakeDiscord
    seen: int = 0
    at: dict[str, float] = field(default_factory=dict)

    def scan(self) -> None:
        posts = self.discord.posts
        for post in posts[self.seen:]:
            ref = post.message_reference or {}
            if ref.get("message_id") is not None:
                self.at.setdefault(str(ref["message_id"]), time.monotonic())
        self.seen = len(posts)

    def answered(self, message_id: str) -> bool:
        self.scan()
        return message_id in self.at

    async def wait(self, message_id: str, timeout: float) -> bool:
        """Whether ``message_id`` got its reply within ``timeout`` (woken by every call at the fake Discord)."""
        try:
            await self.discord.wait_for(lambda: self.answered(message_id), timeout)
        except TimeoutError:
            return False
        return True


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def tree_rss(pid: int) -> int:
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


def slope(samples: list[tuple[int, int]]) -> float:
    """Least-squares bytes per turn over ``(turn, rss)`` samples (NaN with fewer than two)."""
    if len(samples) < 2:
        return float("nan")
    mx = sum(x for x, _ in samples) / len(samples)
    my = sum(y for _, y in samples) / len(samples)
    var = sum((x - mx) ** 2 for x, _ in samples)
    return sum((x - mx) * (y - my) for x, y in samples) / var if var else float("nan")


def ratio(value: float, target: float) -> str:
    return f"{value / target:.2f}x target" if target else "-"


def times(value: float, base: float) -> float:
    """``value`` over ``base`` (NaN when the base is not positive)."""
    return value / base if base > 0 else float("nan")
