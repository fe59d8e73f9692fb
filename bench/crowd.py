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
``--alt-cap`` (1,024, the largest the in-flight bound allows, so fewer wait).
Ratios are ours over its.

Run: ``.venv/bin/python bench/crowd.py`` (about a minute); the issue's other
count: ``--rooms 10000``. Goal: all answered, 0 dropped, ≤ 2 kB per waiting message.

Last line: ``bench crowd: rooms=… answered=… dropped=… waiting_peak=… drain_s=… kb_per_waiting=… alt_cap=…
drain_vs_alt=… answered_vs_alt=…``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import Bench  # noqa: E402
from bench.scale_kit import times  # noqa: E402

WAITING = re.compile(r"waiting: (\d+) in")
ISSUE = {"answered": 575, "dropped": 1425}  # issue 25, 2,000 rooms, before: dropped at the cap


def dropped(state: Path) -> int:
    path = state / "receipts" / "bridge.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return sum(1 for r in lines if r["outcome"] == "dropped" and r.get("reason") != "self_or_bot_message")


async def burst(args: argparse.Namespace, cap: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ck-crowd-", dir="/tmp") as d:
        tmp = Path(d)
        ns = argparse.Namespace(rooms=[args.rooms], window=200_000, nofile=args.nofile)
        bench = Bench(ns, tmp, {"CLANKIE_DISCORD_MAX_TURNS": str(cap), "CLANKIE_BROWSER_IDLE_SECONDS": "300"})
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
            out = {"cap": cap, "answered": answered, "dropped": dropped(tmp / "state"), "waiting_peak": peak,
                   "drain_s": last - t0, "kb_per_waiting": (rss_peak - rss0) / 1024 / peak if peak else float("nan")}
        finally:
            await bench.stop()
    print(f"  cap {cap:>5}: answered {out['answered']}/{args.rooms}, dropped {out['dropped']}, "
          f"waiting at peak {out['waiting_peak']}, drained in {out['drain_s']:.1f} s, bridge "
          f"{out['kb_per_waiting']:.2f} kB per waiting message", flush=True)
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=2000)
    parser.add_argument("--cap", type=int, default=512, help="CLANKIE_DISCORD_MAX_TURNS of the tree measured")
    parser.add_argument("--alt-cap", type=int, default=1024, help="the side-by-side tree's cap (0: none)")
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=600.0, help="how long the burst may take to drain")
    args = parser.parse_args()
    print(f"crowd bench: {args.rooms} rooms at once, the real tree under RLIMIT_NOFILE {args.nofile}", flush=True)
    ours = await burst(args, args.cap)
    alt = await burst(args, args.alt_cap) if args.alt_cap else None
    tail = ""
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
