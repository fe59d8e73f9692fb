"""Spam: one member posting in twenty rooms does not slow twenty ordinary people (issue 25, item 3).

The real tree (supervisor, service, bridge, both hosts; real discord.py
against the loopback fake Discord) behind a fake account limit of
``--limit`` requests per 10 s, with a model that takes about ``--think``
seconds per answer. Twenty rooms; in each, one ordinary person says
something every ``--every`` seconds (phases spread evenly) for ``--seconds``.

Three trees, one after another, in one run:

- ``quiet``: the ordinary people alone;
- ``spam``: the same, plus a spammer posting ``--spam-rate`` messages a second
  round-robin over the twenty rooms, with the default per-person and
  per-room pacing (``CLANKIE_USER_TURNS_PER_MINUTE`` 6,
  ``CLANKIE_ROOM_TURNS_PER_MINUTE`` 30);
- ``unpaced``: the same spam with both pacing settings at 0 (none), which
  is how every tree behaved before item 3.

What an ordinary person feels is the wait from their message to the bot's
next post in their room (an answer to them, or to a burst their message
joined). Reported: that wait's p50 and p90 per tree, and the p50 with the
spammer over the p50 without (goal ≤ 1.2×).

Last line: ``bench spam: quiet_p50_s=… spam_p50_s=… unpaced_p50_s=… spam_vs_quiet=… unpaced_vs_quiet=…``
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import Bench  # noqa: E402
from bench.scale_kit import Anthropic, pct, times  # noqa: E402
from clankie.testing import fake_anthropic as fa  # noqa: E402

ROOMS = 20
SPAMMER = "500000000000000999"


class Watch:
    """When the bot posted in each room (polled from the fake Discord as it goes)."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.seen = 0
        self.at: dict[str, list[float]] = {}

    def scan(self) -> None:
        posts = self.bench.discord.posts
        now = time.monotonic()
        for post in posts[self.seen:]:
            self.at.setdefault(post.channel_id, []).append(now)
        self.seen = len(posts)

    def after(self, room: str, sent: float) -> float | None:
        """Seconds from ``sent`` to the bot's first post in ``room`` after it, if there was one."""
        times_ = self.at.get(room, [])
        i = bisect.bisect_right(times_, sent)
        return times_[i] - sent if i < len(times_) else None


async def tree(args: argparse.Namespace, name: str, spam: bool, paced: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ck-spam-", dir="/tmp") as d:
        ns = argparse.Namespace(rooms=[ROOMS], window=200_000, nofile=4096)
        per_minute = {"CLANKIE_USER_TURNS_PER_MINUTE": "6", "CLANKIE_ROOM_TURNS_PER_MINUTE": "30"} if paced else {}
        bench = Bench(ns, Path(d), {"CLANKIE_BROWSER_IDLE_SECONDS": "300", **per_minute})
        bench.anthropic = Anthropic(limits=fa.RateLimits(requests=args.limit, window=10.0))
        think = fa.text("noted, thanks", delay=args.think / 8)  # about eight SSE events per answer
        bench.anthropic.respond_with(lambda body: think)
        watch = Watch(bench)
        sent: list[tuple[str, float]] = []
        try:
            await bench.boot()
            rooms = bench.room_ids[:ROOMS]
            t0 = time.monotonic()

            async def person(n: int) -> None:
                await asyncio.sleep(args.every * n / ROOMS)  # sleep: spread the people's phases over one period
                while time.monotonic() - t0 < args.seconds:
                    at = time.monotonic()
                    await bench.discord.message(rooms[n], f"a question from person {n}", mention_bot=True,
                                                author_id=str(500_000_000_000_000_100 + n), author_name=f"person{n}")
                    sent.append((rooms[n], at))
                    await asyncio.sleep(args.every)

            async def spammer() -> None:
                k = 0
                while time.monotonic() - t0 < args.seconds:
                    await bench.discord.message(rooms[k % ROOMS], f"spam {k}", mention_bot=True,
                                                author_id=SPAMMER, author_name="spammer")
                    k += 1
                    await asyncio.sleep(1 / args.spam_rate)

            async def watcher() -> None:
                while time.monotonic() - t0 < args.seconds + args.drain:
                    watch.scan()
                    await asyncio.sleep(0.02)

            jobs = [*(person(n) for n in range(ROOMS)), watcher()]
            if spam:
                jobs.append(spammer())
            await asyncio.gather(*jobs)
        finally:
            await bench.stop()
    waits = [w for room, at in sent if (w := watch.after(room, at)) is not None]
    out = {"name": name, "sent": len(sent), "answered": len(waits), "p50": pct(waits, 0.5), "p90": pct(waits, 0.9),
           "requests": bench.anthropic.served, "limited": bench.anthropic.rate_limited}
    print(f"  {name:>8}: {out['answered']}/{out['sent']} ordinary messages answered, wait p50 {out['p50']:.2f} s, "
          f"p90 {out['p90']:.2f} s; model requests {out['requests']}, 429s {out['limited']}", flush=True)
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the people (and the spammer) post")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between one ordinary person's messages")
    parser.add_argument("--spam-rate", type=float, default=5.0, help="the spammer's messages a second")
    parser.add_argument("--limit", type=int, default=50, help="the fake account's requests per 10 s")
    parser.add_argument("--think", type=float, default=0.8, help="seconds the model takes per answer")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to wait for answers after the posting ends")
    args = parser.parse_args()
    print(f"spam bench: {ROOMS} rooms, {ROOMS} people every {args.every:g} s, a spammer at {args.spam_rate:g}/s, "
          f"{args.limit} model requests per 10 s", flush=True)
    quiet = await tree(args, "quiet", spam=False, paced=True)
    spam = await tree(args, "spam", spam=True, paced=True)
    unpaced = await tree(args, "unpaced", spam=True, paced=False)
    spam_x, unpaced_x = times(spam["p50"], quiet["p50"]), times(unpaced["p50"], quiet["p50"])
    print(f"ordinary people's wait p50 with the spammer: {spam_x:.2f}x without (paced), {unpaced_x:.2f}x (unpaced)")
    print(f"bench spam: quiet_p50_s={quiet['p50']:.2f} spam_p50_s={spam['p50']:.2f} unpaced_p50_s={unpaced['p50']:.2f} "
          f"spam_vs_quiet={spam_x:.2f} unpaced_vs_quiet={unpaced_x:.2f} quiet_answered={quiet['answered']}/{quiet['sent']} "
          f"spam_answered={spam['answered']}/{spam['sent']} unpaced_answered={unpaced['answered']}/{unpaced['sent']}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
