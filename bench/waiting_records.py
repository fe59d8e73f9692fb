"""bench waiting_records: what the bridge holds per message that waits, one record against three (issue 28).

The bridge runs in-process as ``tests/bridge/harness.py`` runs it: the real
``BridgeApp`` and discord.py against the loopback fake Discord, with a fake
service on ``service.sock``. tracemalloc counts what the bridge allocates
(the fake Discord's own records and the harness's are left out) while:

1. ``waiting``: ``--rooms`` rooms each get ``--per-room`` messages while the
   one turn slot is held (``CLANKIE_DISCORD_MAX_TURNS=1``): every message waits
   for a slot;
2. ``buffered``: the same number of messages go to drifted rooms (reply policy
   ``addressed``, answered once, then one decline): every message is buffered
   for its room's catch-up turn (at most 20 per room: the backlog's bound).

Each is measured on this checkout and, side by side in the same run, on a
checkout of ``--alt-rev`` (default ``fcad6ac``: the last commit where a
buffered message was held three times, as an ``Inbound`` in its room's
backlog, a room and trigger in ``Bridge._pending`` and its journal entry),
each in a subprocess of its own with that checkout first on ``PYTHONPATH``.

Run: ``.venv/bin/python bench/waiting_records.py [--rooms 40] [--per-room 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ALT_REV = "fcad6ac"  # before issue 28: a buffered message in three stores, kept in step by a polled discard list
KINDS = ("waiting", "buffered")


def bridge_bytes(stats: list[tracemalloc.StatisticDiff]) -> int:
    """What the bridge allocated: the fake Discord's records and the harness's, in the same process, left out."""
    return sum(s.size_diff for s in stats if not any(
        "fake_discord" in f.filename or "/tests/" in f.filename for f in s.traceback))


async def measure(kind: str, rooms: int, per_room: int, tmp: Path) -> dict[str, Any]:
    """Bytes the bridge allocates per message that waits (``kind``), on the checkout first on ``sys.path``."""
    from clankie import ipc
    from clankie.protocol import TurnResult, TurnSubmit
    from clankie.testing.clock import FakeClock
    from clankie.testing.fake_discord import FakeDiscord
    from tests.bridge.harness import GUILD, PERSON, Harness, running

    env = {"CLANKIE_STATE": str(tmp / "state"), "CLANKIE_RUNTIME_DIR": str(tmp / "run"), "HOME": str(tmp / "state")}
    channels = [str(5000 + i) for i in range(rooms)]
    release = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if kind == "waiting":
            await release.wait()
            return TurnResult.settled("done", turn_id="t")
        if "clankie" in sub.trigger.text:
            return TurnResult.settled("hi!", turn_id="t")
        return TurnResult.silent(turn_id="t")

    def held(h: Harness) -> int:
        return len(h.app.bridge.waiting) if kind == "waiting" else h.app.bridge.pending_triggers

    overrides = ({"CLANKIE_DISCORD_MAX_TURNS": "1"} if kind == "waiting" else
                 {"CLANKIE_DISCORD_REPLY_POLICY": "addressed", "CLANKIE_DISCORD_ENGAGEMENT_DECLINES": "1",
                  "CLANKIE_DISCORD_CATCH_UP_SECONDS": "3600"})
    fake = FakeDiscord(guilds={GUILD: ["4999", *channels]})
    async with running(env, overrides=overrides, script=script, clock=FakeClock(), fake=fake) as h:
        if kind == "waiting":
            await h.fake.message("4999", "the turn that holds the only slot", author_id=PERSON)
            await h.service.wait_submits(1)
        else:
            for room in channels:  # answered once, then one decline: every room drifts
                for text in ("hey clankie", "meh"):
                    m = await h.fake.message(room, text, author_id=PERSON)
                    mid = str(m["id"])
                    await h.until(lambda mid=mid: h.outcomes(mid)[-1:] in (["settled"], ["silent"]))  # type: ignore[misc]  # bound per pass
        gc.collect()
        tracemalloc.start(12)
        try:
            before = tracemalloc.take_snapshot()
            for k in range(per_room):
                for room in channels:
                    await h.fake.message(room, f"a question about the match, number {k}", author_id=PERSON)
            count = rooms * per_room
            await h.until(lambda: held(h) == count, timeout=120)
            gc.collect()
            stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
        finally:
            tracemalloc.stop()
        release.set()
        return {"kind": kind, "messages": count, "bytes_per": bridge_bytes(stats) / count}


def run_one(kind: str, args: argparse.Namespace, checkout: Path) -> dict[str, Any]:
    """One measurement in a subprocess whose imports come from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", kind, "--rooms", str(args.rooms),
                          "--per-room", str(args.per_room)], cwd=checkout, env=env, capture_output=True, text=True,
                         check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=40)
    parser.add_argument("--per-room", type=int, default=15, help="at most 20: a backlog's bound")
    parser.add_argument("--alt-rev", default=ALT_REV)
    parser.add_argument("--measure", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        sys.path.insert(0, os.getcwd())
        with tempfile.TemporaryDirectory(prefix="ck-records-", dir="/tmp") as d:
            print(json.dumps(asyncio.run(measure(args.measure, args.rooms, args.per_room, Path(d)))))
        return 0
    count = args.rooms * args.per_room
    print(f"waiting_records bench: {count} messages in {args.rooms} rooms, ours against {args.alt_rev}", flush=True)
    results: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="ck-records-alt-", dir="/tmp") as d:
        alt = Path(d)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.alt_rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(alt)], input=archive.stdout, check=True)
        for kind in KINDS:
            for side, checkout in (("ours", REPO), ("alt", alt)):
                results[side, kind] = run_one(kind, args, checkout)["bytes_per"]
                print(f"  {kind:>8} {side:>4}: {results[side, kind]:7.0f} B per message", flush=True)
    ratio = {k: results["ours", k] / results["alt", k] for k in KINDS}
    for kind in KINDS:
        print(f"  {kind}: ours {ratio[kind]:.2f}x {args.alt_rev}'s")
    print(f"bench waiting_records: messages={count} rooms={args.rooms} "
          + " ".join(f"{k}_b={results['ours', k]:.0f} alt_{k}_b={results['alt', k]:.0f} {k}_ratio={ratio[k]:.2f}"
                     for k in KINDS) + f" alt_rev={args.alt_rev}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
