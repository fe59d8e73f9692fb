"""A dead machine: its room answered by another tree, with its memory, in seconds (PostgreSQL) or never (files).

Real trees (``clankie run``, all four children and their spares) against one loopback Discord, each with its own
model double, on one shard (``0/1``). Two profiles, side by side in one run:

* ``postgres``: two trees on one real PostgreSQL (Debian's, a cluster this bench starts), both preferring the shard.
  The one holding its lease serves; the other stands by (its bridge waits for the lease, no gateway session). Each of
  ``--kills`` rounds tells the serving tree a fact in the room ("the door code is N"), SIGKILLs its supervisor (its
  children die with it: a dead machine), and at once asks the room for the fact. Stamped on one clock
  (``time.monotonic``): **kill → answer** (the standby's reply posted) and whether the answer's model request held
  the fact (**recalled**: the lane came from the database, not the dead disk). The killed tree is then started
  again, as the new standby, and the next round kills the other one.
* ``files``: one tree (today's default), told the fact, SIGKILLed, asked; nothing else can take its guild, so the
  question waits ``--window`` seconds for an answer that does not come (the machine is dead). Counted, not timed.

The lease settings are the defaults (renew 2 s, TTL 6 s): a kill is noticed when the lease expires on the
database's clock, at most TTL after the dead tree's last renew, and taken at the standby's next try (every renew).

Last line: ``bench failover: kills=… postgres_answered=k/n postgres_p50_ms=… postgres_max_ms=… postgres_recalled=k/n
postgres_duplicates=… files_answered=k/n answered_ratio=…`` (duplicates: posts beyond one "noted" and one answer a
round, so a message answered twice shows).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from clankie.store import database
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from clankie.testing.postgres import Cluster
from tests.integration.tree import CHAN, GUILD, PERSON, pg_tree, real_tree


async def answer_within(discord: FakeDiscord, answer: str, since: float, window: float) -> float | None:
    """Seconds from ``since`` until a post saying ``answer`` is in the room, or None after ``window``."""
    while time.monotonic() - since < window:
        if any(p.content == answer for p in discord.posts_in(CHAN)):
            return time.monotonic() - since
        await asyncio.sleep(0.02)
    return None


async def ask(discord: FakeDiscord, text: str) -> str:
    return str((await discord.message(CHAN, text, author_id=PERSON))["id"])


async def postgres_rounds(root: Path, dsn: str, kills: int, window: float) -> tuple[list[float | None], int, int]:
    """``kills`` SIGKILLs of the serving tree, alternating; the kill → answer times (None: unanswered), how many
    answers recalled the fact, and the posts beyond the two each round should make (a message answered twice)."""
    root.mkdir(parents=True, mode=0o700)
    discord = FakeDiscord(guilds={GUILD: [CHAN]})
    await discord.start()
    times: list[float | None] = []
    recalled = 0
    try:
        async with contextlib.AsyncExitStack() as stack:
            serving = await stack.enter_async_context(pg_tree(root / "a", discord, dsn, serving=True))
            standby = await stack.enter_async_context(pg_tree(root / "b", discord, dsn, serving=False))
            for n in range(kills):
                fact = f"the door code is {4700 + n}"
                serving.anthropic.script(fa.text("noted"))
                standby.anthropic.script(fa.text(f"it is {4700 + n}"))
                await serving.ask(f"clankie, remember: {fact}", 60)
                before = len(standby.anthropic.requests)
                killed = time.monotonic()
                await serving.kill_supervisor()
                await ask(discord, "clankie, what is the door code?")
                took = await answer_within(discord, f"it is {4700 + n}", killed, window)
                times.append(took)
                if took is not None and len(standby.anthropic.requests) > before:
                    recalled += fact in json.dumps(standby.anthropic.requests[-1]["messages"])
                print(f"  postgres kill {n + 1}: answered in {took if took is None else round(took, 2)} s", flush=True)
                await serving.respawn()  # the dead machine comes back: the new standby
                await serving.standing_by(120)
                serving, standby = standby, serving
        extra = len(discord.posts_in(CHAN)) - 2 * kills  # "noted" and the answer, each round
    finally:
        await discord.close()
    return times, recalled, extra


async def files_rounds(root: Path, kills: int, window: float) -> list[float | None]:
    """``kills`` SIGKILLs of today's one tree; each question waits ``window`` s (nothing can take its guild)."""
    times: list[float | None] = []
    for n in range(kills):
        with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as rt:
            runtime = Path(rt)
            runtime.chmod(0o700)
            (root / f"files{n}").mkdir(parents=True, mode=0o700)
            async with real_tree(root / f"files{n}", runtime, {"CLANKIE_DISCORD_TOOL_CARD": "false"}) as t:
                t.anthropic.script(fa.text("noted"), fa.text(f"it is {4800 + n}"))
                await t.ask(f"clankie, remember: the door code is {4800 + n}", 60)
                killed = time.monotonic()
                await t.kill_supervisor()
                await ask(t.discord, "clankie, what is the door code?")
                took = await answer_within(t.discord, f"it is {4800 + n}", killed, window)
                times.append(took)
                print(f"  files kill {n + 1}: answered in {took} s (window {window:g} s)", flush=True)
    return times


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--window", type=float, default=30.0, help="seconds a question may wait for its answer")
    args = parser.parse_args()
    cluster = Cluster()
    cluster.start()
    try:
        name = cluster.create_database()
        dsn = cluster.dsn(name)
        database.prepare(dsn)
        with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
            root = Path(tmp)
            print(f"postgres: {args.kills} kills of the serving tree, a standby tree on the same database", flush=True)
            pg_times, recalled, extra = await postgres_rounds(root / "pg", dsn, args.kills, args.window)
            print(f"files: {args.kills} kills of the one tree", flush=True)
            files_times = await files_rounds(root / "files", args.kills, args.window)
    finally:
        cluster.stop()
    answered = [t for t in pg_times if t is not None]
    files_answered = [t for t in files_times if t is not None]
    ms = [t * 1000 for t in answered]
    p50 = round(p(ms, 50)) if ms else "none"
    worst = round(max(ms)) if ms else "none"
    ratio = f"{len(answered) / len(files_answered):.1f}" if files_answered else ("inf" if answered else "n/a")
    print(f"postgres: answered {len(answered)}/{len(pg_times)}, kill → answer p50 {p50} ms, max {worst} ms, "
          f"recalled the fact {recalled}/{len(pg_times)}, posts beyond one answer each {extra}")
    print(f"files: answered {len(files_answered)}/{len(files_times)} within {args.window:g} s")
    print(f"bench failover: kills={args.kills} window_s={args.window:g} postgres_answered={len(answered)}/{len(pg_times)} "
          f"postgres_p50_ms={p50} postgres_max_ms={worst} postgres_recalled={recalled}/{len(pg_times)} "
          f"postgres_duplicates={extra} "
          f"files_answered={len(files_answered)}/{len(files_times)} answered_ratio={ratio}")


if __name__ == "__main__":
    asyncio.run(main())
