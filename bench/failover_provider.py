"""Failover provider: Anthropic down is not Clankie down (issue 36), and a cold start that learns before it bursts.

The real tree (supervisor, service, bridge, both hosts; real discord.py
against the loopback fake Discord; the real SDK against loopback fake
accounts). Two parts, each as a pair of trees in the same run, side by side:

1. **Outage.** ``--rooms`` rooms, one person in each saying something every
   ``--every`` seconds (phases spread evenly) for ``--seconds``; the primary
   account answers every call with ``529 overloaded_error`` from
   ``--down-at`` for ``--outage`` seconds, then heals. ``routes``: a second
   Anthropic account (its own key and its own prompt cache) named in
   ``CLANKIE_MODEL_ROUTES``; ``today``: the tree of ``--today`` (main before
   this work, exported with ``git archive``), as every tree ran before.
   Reported: the share of messages answered (a bot post in the room after it,
   within the drain, and no failure reaction on it; goal ≥ 99 %), the reply wait p50 of messages sent during
   the outage over the p50 of those sent before it (goal within +2 s), the
   cache-read share of each room's second call on the fallback (its median
   over rooms: cache read / every input token of that call; goal ≥ 80 %),
   the seconds from the heal to the primary's first answered call (goal
   ≤ 30 s) and messages answered twice (two replies referencing one message;
   goal 0).
2. **Cold burst.** ``--burst-rooms`` rooms each say one thing at once, right
   after the tree is ready, against an account of ``--limit`` requests per
   10 s (the fake enforces it with 429s and ``retry-after``). ``slow``: the
   default slow start; ``today``: the tree of ``--today`` again.
   Reported: 429s as a share of the requests (goal ≤ 2 %).

The issue's outage is 60 s under 100 rooms; the defaults are scaled down (30
rooms, a 20 s outage in 60 s of traffic) to fit a shared two-core machine;
``--rooms 100 --seconds 120 --outage 60`` runs the issue's shape.

Last line: ``bench failover_provider: answered=… today_answered=… outage_p50_s=… before_p50_s=… … burst_429_share=…``
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiohttp import web  # noqa: E402

from bench.scale import Bench  # noqa: E402
from bench.scale_kit import Anthropic, pct, times  # noqa: E402
from clankie.testing import fake_anthropic as fa  # noqa: E402
from clankie.testing.fake_anthropic_cache import PromptCache  # noqa: E402

TODAY = "caf62d1"  # main before issue 36: one endpoint, one governor that learns at each answer's end
BACKUP_KEY = "sk-bench-backup-route"
FAILED = "\u26a0\ufe0f"  # the reaction a failed addressed turn gets (CLANKIE_DISCORD_FAILURE_REACTION's default)
ROOM = re.compile(r"room-(\d+)")


class Account(Anthropic):
    """One fake account (bench/scale.py's: it keeps no bodies): can be down (529) for a while, and notes each
    answered call's room, time and usage. Like the API, it caches only prefixes of 1,024 tokens or more."""

    def __init__(self, limits: fa.RateLimits | None = None, api_key: str | None = None) -> None:
        super().__init__(limits=limits)
        self.api_key = api_key
        self.cache = PromptCache(1024, now=time.monotonic)
        self.down = False
        self.answered: list[tuple[float, int | None, dict[str, Any]]] = []  # (when, room, usage)
        self.respond_with(lambda body: fa.overloaded() if self.down else self._summary(body))

    async def _answer(self, request: web.Request, body: dict[str, Any], *args: Any, **kwargs: Any) -> web.StreamResponse:
        if not self.down:
            found = ROOM.findall(json.dumps(body.get("messages", [])[-1:]))
            usage = self.cache.usage(body, record=False)
            self.answered.append((time.monotonic(), int(found[-1]) if found else None, usage))
        return await super()._answer(request, body, *args, **kwargs)


class Watch:
    """When the bot posted in each room, and which message each post answers."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.seen = 0
        self.at: dict[str, list[float]] = {}
        self.replies: Counter[str] = Counter()

    def scan(self) -> None:
        posts = self.bench.discord.posts
        now = time.monotonic()
        for post in posts[self.seen:]:
            self.at.setdefault(post.channel_id, []).append(now)
            ref = post.message_reference or {}
            if ref.get("message_id") is not None:
                self.replies[str(ref["message_id"])] += 1
        self.seen = len(posts)

    def after(self, room: str, sent: float) -> float | None:
        times_ = self.at.get(room, [])
        i = bisect.bisect_right(times_, sent)
        return times_[i] - sent if i < len(times_) else None


def second_call_cache_share(backup: Account) -> float:
    """Median over rooms of the cache-read share of each room's second answered call on the fallback."""
    calls: dict[int, list[dict[str, Any]]] = {}
    for _, room, usage in backup.answered:
        if room is not None:
            calls.setdefault(room, []).append(usage)
    shares = []
    for usages in calls.values():
        if len(usages) >= 2:
            u = usages[1]
            total = u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
            if total:
                shares.append(u.get("cache_read_input_tokens", 0) / total)
    return pct(shares, 0.5)


def export(rev: str, into: Path) -> Path:
    """The tree at ``rev``, exported with ``git archive`` (what "today" ran before this work)."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=data, check=True)
    return into


def run_from(bench: Bench, extra: dict[str, str], code: Path | None) -> None:
    """Run ``bench``'s tree from ``code`` (another revision's checkout) when given."""
    if code is not None:
        extra["PYTHONPATH"] = str(code)
        bench.cwd = code


async def outage(args: argparse.Namespace, name: str, routed: bool, code: Path | None = None) -> dict[str, Any]:
    """One tree through the outage (from ``code`` when given); what its people saw."""
    backup = Account(api_key=BACKUP_KEY)
    await backup.start()
    extra = {"CLANKIE_BROWSER_IDLE_SECONDS": "300"}
    if routed:
        extra |= {"CLANKIE_MODEL_ROUTES": json.dumps([{"name": "backup", "kind": "anthropic", "base_url": backup.base_url,
                                                        "credential": "BENCH_BACKUP_KEY"}]),
                  "BENCH_BACKUP_KEY": BACKUP_KEY}
    with tempfile.TemporaryDirectory(prefix="ck-failover-", dir="/tmp") as d:
        run_from_extra = dict(extra)
        bench = Bench(argparse.Namespace(rooms=[args.rooms], window=200_000, nofile=4096), Path(d), run_from_extra)
        run_from(bench, run_from_extra, code)
        primary = Account()
        bench.anthropic = primary
        watch = Watch(bench)
        sent: list[tuple[str, float, str]] = []
        healed_at = back_at = float("nan")
        try:
            await bench.boot()
            rooms = bench.room_ids[: args.rooms]
            t0 = time.monotonic()
            down_at, heal_at = t0 + args.down_at, t0 + args.down_at + args.outage

            async def person(n: int) -> None:
                await asyncio.sleep(args.every * n / args.rooms)  # sleep: spread the people's phases over one period
                k = 0
                while time.monotonic() - t0 < args.seconds:
                    at = time.monotonic()
                    msg = await bench.discord.message(rooms[n], f"room-{n} says hello, message {k}", mention_bot=True,
                                                      author_id=str(500_000_000_000_000_100 + n), author_name=f"p{n}")
                    sent.append((rooms[n], at, str(msg["id"])))
                    k += 1
                    await asyncio.sleep(args.every)  # sleep: the person's pace

            async def weather() -> None:
                nonlocal healed_at
                await asyncio.sleep(max(0.0, down_at - time.monotonic()))  # sleep: the outage starts on schedule
                primary.down = True
                await asyncio.sleep(max(0.0, heal_at - time.monotonic()))  # sleep: and lasts --outage seconds
                primary.down = False
                healed_at = time.monotonic()

            async def watcher() -> None:
                while time.monotonic() - t0 < args.seconds + args.drain:
                    watch.scan()
                    await asyncio.sleep(0.05)  # sleep: the step of a loop that reads the fake Discord

            await asyncio.gather(*(person(n) for n in range(args.rooms)), weather(), watcher())
            back = [when for when, _, _ in primary.answered if when >= healed_at]
            back_at = min(back) if back else float("nan")
        finally:
            await bench.stop()
            await backup.close()
    failed = {mid for _, _, mid in sent if FAILED in bench.discord.reactions.get(mid, [])}  # the turn failed: ⚠️
    waits = {mid: None if mid in failed else watch.after(room, at) for room, at, mid in sent}
    answered = [w for w in waits.values() if w is not None]
    before = [w for (room, at, mid) in sent if at < down_at and (w := waits[mid]) is not None]
    during = [w for (room, at, mid) in sent if down_at <= at < heal_at and (w := waits[mid]) is not None]
    out = {
        "name": name, "sent": len(sent), "answered": len(answered), "share": len(answered) / max(1, len(sent)),
        "failed": len(failed),
        "before_p50": pct(before, 0.5), "during_p50": pct(during, 0.5),
        "during_sent": sum(1 for _, at, _ in sent if down_at <= at < heal_at), "during_answered": len(during),
        "twice": sum(1 for n in watch.replies.values() if n > 1), "back_s": back_at - healed_at,
        "cache_share": second_call_cache_share(backup), "primary_calls": primary.served, "backup_calls": backup.served,
    }
    print(f"  outage {name:>6}: {out['answered']}/{out['sent']} answered ({out['share']:.1%}, {out['failed']} failed); "
          f"during the outage "
          f"{out['during_answered']}/{out['during_sent']}, wait p50 {out['during_p50']:.2f} s (before {out['before_p50']:.2f} s); "
          f"answered twice {out['twice']}; back on the primary {out['back_s']:.1f} s after it healed; fallback's second-call "
          f"cache-read share {out['cache_share']:.0%}; calls primary {out['primary_calls']}, backup {out['backup_calls']}",
          flush=True)
    return out


async def burst(args: argparse.Namespace, name: str, slow: bool, code: Path | None = None) -> dict[str, Any]:
    """One cold tree (from ``code`` when given), every room at once against the account's limit; the 429s it met."""
    extra = {"CLANKIE_BROWSER_IDLE_SECONDS": "300", "CLANKIE_MODEL_SLOW_START": "true" if slow else "false"}
    with tempfile.TemporaryDirectory(prefix="ck-burst-", dir="/tmp") as d:
        bench = Bench(argparse.Namespace(rooms=[args.burst_rooms], window=200_000, nofile=4096), Path(d), extra)
        run_from(bench, extra, code)
        account = Account(limits=fa.RateLimits(requests=args.limit, window=10.0))
        bench.anthropic = account
        watch = Watch(bench)
        try:
            await bench.boot()
            rooms = bench.room_ids[: args.burst_rooms]
            t0 = time.monotonic()
            sent = await asyncio.gather(*(bench.discord.message(room, f"room-{n} wakes up", mention_bot=True,
                                                                author_id=str(500_000_000_000_000_100 + n))
                                          for n, room in enumerate(rooms)))
            while time.monotonic() - t0 < args.burst_drain:
                watch.scan()
                if all(watch.at.get(room) for room in rooms):
                    break
                await asyncio.sleep(0.05)  # sleep: the step of a loop that reads the fake Discord
            spent = time.monotonic() - t0
        finally:
            await bench.stop()
    answered = sum(1 for room in rooms if watch.at.get(room))
    out = {"name": name, "rooms": len(sent), "answered": answered, "requests": account.served,
           "limited": account.rate_limited, "share": account.rate_limited / max(1, account.served), "seconds": spent}
    print(f"  burst {name:>6}: {answered}/{len(sent)} rooms answered in {spent:.1f} s; {out['limited']} 429s in "
          f"{out['requests']} requests ({out['share']:.1%})", flush=True)
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=30, help="rooms with one person each (the issue: 100)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between one person's messages")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the people post")
    parser.add_argument("--down-at", type=float, default=15.0, help="when the primary goes down, from the first message")
    parser.add_argument("--outage", type=float, default=20.0, help="how long the primary answers 529 (the issue: 60)")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to wait for answers after the posting ends")
    parser.add_argument("--burst-rooms", type=int, default=100, help="rooms that speak at once in the cold burst")
    parser.add_argument("--limit", type=int, default=20, help="the cold burst's account: requests per 10 s")
    parser.add_argument("--burst-drain", type=float, default=120.0, help="seconds the cold burst may take")
    parser.add_argument("--today", default=TODAY, help="the revision whose trees are 'today' (git archive); '' runs "
                        "today's side from this checkout with no routes and CLANKIE_MODEL_SLOW_START=false")
    args = parser.parse_args()
    print(f"failover bench: {args.rooms} rooms, a message every {args.every:g} s each for {args.seconds:g} s, the primary "
          f"down (529) from {args.down_at:g} s for {args.outage:g} s; then {args.burst_rooms} rooms at once against "
          f"{args.limit} requests per 10 s", flush=True)
    with tempfile.TemporaryDirectory(prefix="ck-today-", dir="/tmp") as d:
        code = export(args.today, Path(d)) if args.today else None
        routed = await outage(args, "routes", routed=True)
        today = await outage(args, "today", routed=False, code=code)
        slow = await burst(args, "slow", slow=True)
        cold = await burst(args, "today", slow=False, code=code)
    slowdown = routed["during_p50"] - routed["before_p50"]
    print(f"answered: {routed['share']:.1%} with routes vs {today['share']:.1%} today "
          f"({times(routed['share'], today['share']):.2f}x); wait p50 during the outage {routed['during_p50']:.2f} s vs "
          f"{today['during_p50']:.2f} s today ({times(routed['during_p50'], today['during_p50']):.2f}x); 429 share at a cold "
          f"burst {slow['share']:.1%} vs {cold['share']:.1%} today ({times(slow['share'], cold['share']):.2f}x)")
    print(f"bench failover_provider: rooms={args.rooms} outage_s={args.outage:g} answered={routed['share']:.4f} "
          f"today_answered={today['share']:.4f} answered_ratio={times(routed['share'], today['share']):.2f} "
          f"before_p50_s={routed['before_p50']:.2f} outage_p50_s={routed['during_p50']:.2f} outage_minus_before_s={slowdown:.2f} "
          f"today_outage_p50_s={today['during_p50']:.2f} fallback_second_call_cache_read={routed['cache_share']:.3f} "
          f"back_on_primary_s={routed['back_s']:.1f} answered_twice={routed['twice']} today_answered_twice={today['twice']} "
          f"burst_rooms={args.burst_rooms} burst_429_share={slow['share']:.4f} today_burst_429_share={cold['share']:.4f} "
          f"burst_429_ratio={times(slow['share'], cold['share']):.2f} today_rev={args.today or 'this'}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
