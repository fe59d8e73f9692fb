"""Crowd: thousands of rooms speaking at once through the real tree, past the held-turn bound (issue 25, item 1).

The real tree (``clankie run``: supervisor, service, bridge, both hosts) under
``RLIMIT_NOFILE`` 1,024, real discord.py against the loopback fake Discord,
and a fake model that answers at once (:mod:`bench.scale_kit`). ``--rooms``
rooms (2,000) each send one addressed message in the same instant. With
``CLANKIE_DISCORD_MAX_TURNS`` turns held (512 by default) the rest *wait* in
the bridge's journal and run as slots free; before, they were dropped with
``turn_backpressure`` (issue 25 measured 575 answered, 1,425 dropped).

Per tree: answered, dropped (receipts other than the bot's own echoes), the
most messages waiting at once (the bridge's status line), drain time (first
send to last reply), and the bridge's RSS growth over its RSS before the
burst, per message waiting at the peak (an upper bound of what a waiting
message costs: it includes discord.py's own per-message work).

Side by side in one run: the same burst on a second tree whose cap is
``--alt-cap`` (256: more of the burst waits, so the cost of waiting shows).
Ratios are ours over its.

Run: ``.venv/bin/python bench/crowd.py`` (about a minute); the issue's other
count: ``--rooms 10000``. Goal: all answered, 0 dropped, ≤ 2 kB per waiting message.
``--memory-rev REV`` runs the same burst, same cap, on a checkout of ``REV``
as well and prints the memory ratio (``--memory-rev 7be9779``: before the
gateway handed messages over without a task each).

``--provider-limit 50/10`` puts both trees behind a fake account limit (50
requests per 10 s, enforced by the fake model as the API does: 429
``rate_limit_error`` with ``retry-after`` and the ``anthropic-ratelimit-*``
headers). The side-by-side tree is then this project at ``--alt-rev``
(default: the last commit before the provider governor), run from a
checkout of that revision. Reported per tree: failed turns (goal 0), 429s
as a share of model requests (goal ≤ 5 %), and drain time over the limit's
floor: the first ``R`` requests find the bucket full, the rest go at ``R/W``
a second, so the floor is ``(rooms - R) / (R / W)`` (goal ≤ 1.2×).

Last line: ``bench crowd: rooms=… answered=… dropped=… waiting_peak=… drain_s=… kb_per_waiting=… alt_cap=…
drain_vs_alt=… answered_vs_alt=…``
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import Bench  # noqa: E402
from bench.scale_kit import Anthropic, times  # noqa: E402
from clankie.rotation import read_all  # noqa: E402
from clankie.testing.fake_anthropic import RateLimits  # noqa: E402

WAITING = re.compile(r"waiting: (\d+) in")
ISSUE = {"answered": 575, "dropped": 1425}  # issue 25, 2,000 rooms, before: dropped at the cap
BEFORE_GOVERNOR = "6baf208"  # the last commit whose runs each retried 429s on their own


def outcomes(state: Path) -> dict[str, int]:
    """Receipts by outcome, every kept segment read (the bot's own echoes left out)."""
    out: dict[str, int] = {}
    for r in read_all(state / "receipts" / "bridge.jsonl"):
        if r.get("reason") != "self_or_bot_message":
            out[r["outcome"]] = out.get(r["outcome"], 0) + 1
    return out


async def burst(args: argparse.Namespace, cap: int, checkout: Path | None = None, rev: str = "") -> dict[str, Any]:
    """One tree (this checkout's, or ``checkout``'s), one burst of ``args.rooms`` messages, measured."""
    with tempfile.TemporaryDirectory(prefix="ck-crowd-", dir="/tmp") as d:
        tmp = Path(d)
        ns = argparse.Namespace(rooms=[args.rooms], window=200_000, nofile=args.nofile)
        extra = {"CLANKIE_DISCORD_MAX_TURNS": str(cap), "CLANKIE_BROWSER_IDLE_SECONDS": "300"}
        if checkout is not None:
            extra["PYTHONPATH"] = str(checkout)
        bench = Bench(ns, tmp, extra)
        if checkout is not None:
            bench.cwd = checkout
        if args.limit is not None:
            bench.anthropic = Anthropic(limits=args.limit)
        try:
            await bench.boot()
            bridge = psutil.Process((await bench.status())["bridge"].pid)
            rss0 = bridge.memory_info().rss
            rooms = bench.room_ids[: args.rooms]
            t0 = time.monotonic()
            sent = await asyncio.gather(*(bench.say(room) for room in rooms))
            ids = [mid for mid, _ in sent]
            peak, rss_peak, last = 0, rss0, t0
            while time.monotonic() - t0 < args.timeout:
                left = [m for m in ids if not bench.replies.answered(m)]
                status = await bench.status()
                found = WAITING.search(status["bridge"].detail)
                waiting = int(found.group(1)) if found else 0
                if waiting >= peak:
                    peak, rss_peak = waiting, bridge.memory_info().rss
                if not left:
                    break
                await asyncio.sleep(0.2)
            answered = sum(1 for m in ids if bench.replies.answered(m))
            if answered:
                last = max(bench.replies.at[m] for m in ids if m in bench.replies.at)
            ends = outcomes(tmp / "state")
            served = bench.anthropic.served
            out = {"cap": cap, "answered": answered, "dropped": ends.get("dropped", 0), "waiting_peak": peak,
                   "drain_s": last - t0, "kb_per_waiting": (rss_peak - rss0) / 1024 / peak if peak else float("nan"),
                   "failed": ends.get("failed", 0), "requests": served, "limited": bench.anthropic.rate_limited,
                   "limited_share": bench.anthropic.rate_limited / served if served else float("nan")}
        finally:
            await bench.stop()
    name = f"{checkout.name} (at {rev})" if checkout is not None else f"cap {cap:>5}"
    print(f"  {name}: answered {out['answered']}/{args.rooms}, dropped {out['dropped']}, failed {out['failed']}, "
          f"waiting at peak {out['waiting_peak']}, drained in {out['drain_s']:.1f} s, bridge "
          f"{out['kb_per_waiting']:.2f} kB per waiting message; model requests {out['requests']}, "
          f"429s {out['limited']} ({out['limited_share']:.1%})", flush=True)
    return out


def limit(text: str) -> RateLimits:
    """``R/W``: R requests per W seconds."""
    requests, window = text.split("/")
    return RateLimits(requests=int(requests), window=float(window))


async def at_revision(args: argparse.Namespace, rev: str, name: str) -> dict[str, Any]:
    """The same burst on a tree run from a checkout of ``rev`` (a git worktree, removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="ck-crowd-alt-", dir="/tmp") as d:
        checkout = Path(d) / name
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(checkout), rev], check=True)
        try:
            return await burst(args, args.cap, checkout, rev)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(checkout)], check=True)


async def paced(args: argparse.Namespace) -> int:
    """Ours against the tree before the governor, both behind the same fake account limit."""
    assert args.limit is not None and args.limit.requests is not None
    rate = args.limit.requests / args.limit.window
    floor = max(0, args.rooms - args.limit.requests) / rate
    print(f"crowd bench: {args.rooms} rooms at once behind {args.limit.requests} requests per "
          f"{args.limit.window:g} s (floor {floor:.0f} s)", flush=True)
    ours = await burst(args, args.cap)
    alt = await at_revision(args, args.alt_rev, "before-governor")
    for label, r in (("ours", ours), ("before", alt)):
        print(f"  {label}: drain {r['drain_s']:.1f} s = {times(r['drain_s'], floor):.2f}x the floor, "
              f"failed {r['failed']}, 429 share {r['limited_share']:.1%}")
    print(f"bench crowd: rooms={args.rooms} limit={args.limit.requests}/{args.limit.window:g}s answered={ours['answered']} "
          f"failed={ours['failed']} dropped={ours['dropped']} limited_share={ours['limited_share']:.3f} "
          f"drain_s={ours['drain_s']:.1f} drain_vs_floor={times(ours['drain_s'], floor):.2f} "
          f"alt_rev={args.alt_rev} alt_answered={alt['answered']} alt_failed={alt['failed']} "
          f"alt_limited_share={alt['limited_share']:.3f} alt_drain_vs_floor={times(alt['drain_s'], floor):.2f}")
    return 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=2000)
    parser.add_argument("--cap", type=int, default=512, help="CLANKIE_DISCORD_MAX_TURNS of the tree measured")
    parser.add_argument("--alt-cap", type=int, default=256, help="the side-by-side tree's cap (0: none)")
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=600.0, help="how long the burst may take to drain")
    parser.add_argument("--provider-limit", dest="limit", type=limit, default=None, metavar="R/W",
                        help="a fake account limit of R requests per W seconds (compares with --alt-rev)")
    parser.add_argument("--alt-rev", default=BEFORE_GOVERNOR, help="the revision compared with under a provider limit")
    parser.add_argument("--memory-rev", default="", help="also run the burst at this revision, same cap (memory per waiting)")
    args = parser.parse_args()
    if args.limit is not None:
        return await paced(args)
    print(f"crowd bench: {args.rooms} rooms at once, the real tree under RLIMIT_NOFILE {args.nofile}", flush=True)
    ours = await burst(args, args.cap)
    alt = await burst(args, args.alt_cap) if args.alt_cap else None
    tail = ""
    if args.memory_rev:
        before = await at_revision(args, args.memory_rev, "before")
        kb_x = times(ours["kb_per_waiting"], before["kb_per_waiting"])
        print(f"vs {args.memory_rev} at the same cap: {kb_x:.2f}x the bridge's RSS per waiting message")
        tail += f" memory_rev={args.memory_rev} kb_per_waiting_before={before['kb_per_waiting']:.2f} kb_vs_before={kb_x:.2f}"
    if alt is not None:
        drain_x, answered_x = times(ours["drain_s"], alt["drain_s"]), times(ours["answered"], alt["answered"])
        print(f"vs cap {args.alt_cap}: drain {drain_x:.2f}x, answered {answered_x:.2f}x")
        tail = f" alt_cap={args.alt_cap} drain_vs_alt={drain_x:.2f} answered_vs_alt={answered_x:.2f}"
    if args.rooms == 2000:
        print(f"vs the issue's figures (dropped at the cap): answered {ours['answered']} vs {ISSUE['answered']}, "
              f"dropped {ours['dropped']} vs {ISSUE['dropped']}")
    print(f"bench crowd: rooms={args.rooms} answered={ours['answered']} dropped={ours['dropped']} "
          f"waiting_peak={ours['waiting_peak']} drain_s={ours['drain_s']:.1f} kb_per_waiting={ours['kb_per_waiting']:.2f}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
