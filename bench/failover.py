"""A dead machine: its rooms answered by another tree, with their memory, in seconds (PostgreSQL) or never (files).

Real trees (``clankie run``, all four children and their spares) against one loopback Discord, each with its own
model double, on one shard (``0/1``). Three phases, side by side in one run:

* ``postgres``: two trees on one real PostgreSQL (Debian's, a cluster this bench starts), both preferring the shard.
  The one holding its lease serves; the other stands by (its bridge waits for the lease, no gateway session).
  Throughout, ``--rate`` messages a second (5) go to ``--rooms`` other rooms of the guild, each addressed to him by
  one of 200 people ("clankie, ping N"). Each of ``--kills`` rounds (10) tells the serving tree a fact in the fact room
  ("the door code is N"), SIGKILLs its supervisor (its children die with it: a dead machine), and at once asks the
  room for the fact. Stamped on one clock (``time.monotonic``): **kill → answer** (the standby's reply posted) and
  whether the answer's model request held the fact (**recalled**: the lane came from the database, not the dead
  disk). The killed tree is then started again, as the new standby, and the next round kills the other one. After
  the last round the traffic stops and every ping is given ``--window`` seconds: **lost** counts pings (and
  questions) with no reply in their room after them (a ping absorbed into a run is answered by that run's reply),
  **duplicates** those with more than one reply of their own.
* ``files``: ``--files-kills`` times one tree (today's default), told the fact, SIGKILLed, asked; nothing else can
  take its guild, so the question waits ``--window`` seconds for an answer that does not come. Counted, not timed.
* ``throughput``: one tree of each profile alone (the postgres one serving), one ping in each of ``--burst`` rooms
  (200) at once, each by another person, each a turn of its own with its lane opened cold: **turns a second** (the
  burst sent → its last reply) and **service memory per turn** (the service's RSS after less before, per turn).

The lease settings are the defaults (renew 2 s, TTL 6 s): a kill is noticed when the lease expires on the
database's clock, at most TTL after the dead tree's last renew, and taken at the standby's next try (every renew).

Last line: ``bench failover: kills=… postgres_answered=k/n postgres_p50_ms=… postgres_max_ms=… postgres_recalled=k/n
lost=… duplicates=… files_answered=k/n turns_per_s_files=… turns_per_s_postgres=… throughput_ratio=…
rss_per_turn_kib_files=… rss_per_turn_kib_postgres=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
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
from tests.integration.tree import CHAN, GUILD, PERSON, Tree, pg_tree, real_tree, tree_on

PEOPLE = 200  # the traffic's authors: each speaks every PEOPLE / rate seconds, well under a person's pace (6/min)
MARKERS = re.compile(r"(remember: the door code is \d+|what is the door code\?|ping \d+)")


def traffic_rooms(rooms: int) -> list[str]:
    return [str(900 + i) for i in range(rooms)]


def responder(code: dict[str, int]) -> fa.Responder:
    """The model double's answers: "noted" to a fact, the current code to the question, "pong N" to ping N; the
    request's newest marker decides (a cold lane's prompt carries the room's earlier messages before its trigger)."""

    def respond(body: dict[str, object]) -> fa.Scenario:
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else {}
        said = json.dumps(last.get("content") if isinstance(last, dict) else last)
        found = MARKERS.findall(said)
        marker = found[-1] if found else ""
        if marker.startswith("remember"):
            return fa.text("noted")
        if marker.startswith("what is"):
            return fa.text(f"it is {code['value']}")
        if marker.startswith("ping"):
            return fa.text(f"pong {marker.split()[1]}")
        return fa.text("ok")

    return respond


async def traffic(discord: FakeDiscord, rooms: list[str], rate: float, sent: list[tuple[str, str]]) -> None:
    """``rate`` pings a second, round the rooms, each by one of PEOPLE people, until cancelled."""
    n = 0
    start = time.monotonic()
    while True:
        room = rooms[n % len(rooms)]
        msg = await discord.message(room, f"clankie, ping {n}", author_id=str(7000 + n % PEOPLE))
        sent.append((room, str(msg["id"])))
        n += 1
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))


def replies(discord: FakeDiscord, room: str) -> dict[str, int]:
    """How many replies each message of ``room`` got."""
    counts: dict[str, int] = {}
    for post in discord.posts_in(room):
        ref = (post.message_reference or {}).get("message_id")
        if ref is not None:
            counts[str(ref)] = counts.get(str(ref), 0) + 1
    return counts


def answered(discord: FakeDiscord, room: str, message_id: str) -> bool:
    """Whether a reply was posted in ``room`` after ``message_id``: its own, or the one of the run it was absorbed
    into (a burst in one room gets one answer)."""
    return any(int(post.id) > int(message_id) for post in discord.posts_in(room))


async def settle(discord: FakeDiscord, sent: list[tuple[str, str]], window: float) -> tuple[int, int]:
    """After the traffic stopped: (lost, duplicates) among ``sent`` once every one is answered or ``window`` passed.
    Lost: no reply in its room after it; a duplicate: more than one reply to it."""
    end = time.monotonic() + window
    while True:
        lost = sum(1 for room, mid in sent if not answered(discord, room, mid))
        if lost == 0 or time.monotonic() > end:
            counts: dict[str, int] = {}
            for room in {r for r, _ in sent}:
                counts.update(replies(discord, room))
            return lost, sum(1 for _, mid in sent if counts.get(mid, 0) > 1)
        await asyncio.sleep(0.2)


async def answer_within(discord: FakeDiscord, answer: str, since: float, window: float, room: str = CHAN
                        ) -> float | None:
    """Seconds from ``since`` until a post saying ``answer`` is in ``room`` (the fact room), or None after ``window``."""
    while time.monotonic() - since < window:
        if any(p.content == answer for p in discord.posts_in(room)):
            return time.monotonic() - since
        await asyncio.sleep(0.02)
    return None


async def ask(discord: FakeDiscord, text: str) -> str:
    return str((await discord.message(CHAN, text, author_id=PERSON))["id"])


async def postgres_rounds(root: Path, dsn: str, kills: int, window: float, rooms: int, rate: float
                          ) -> tuple[list[float | None], int, int, int, int]:
    """``kills`` SIGKILLs of the serving tree, alternating, under ``rate`` pings a second: the kill → answer times
    (None: unanswered), how many answers recalled the fact, the pings sent, and (lost, duplicates) among the pings
    and the questions."""
    root.mkdir(parents=True, mode=0o700)
    others = traffic_rooms(rooms)
    discord = FakeDiscord(guilds={GUILD: [CHAN, *others]})
    await discord.start()
    times: list[float | None] = []
    recalled = 0
    code = {"value": 0}
    sent: list[tuple[str, str]] = []
    asked: list[tuple[str, str]] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            serving = await stack.enter_async_context(pg_tree(root / "a", discord, dsn, serving=True))
            standby = await stack.enter_async_context(pg_tree(root / "b", discord, dsn, serving=False))
            for tree in (serving, standby):
                tree.anthropic.respond_with(responder(code))
            load = asyncio.create_task(traffic(discord, others, rate, sent))
            try:
                for n in range(kills):
                    code["value"] = 4700 + n
                    await serving.ask(f"clankie, remember: the door code is {4700 + n}", 60)
                    before = len(standby.anthropic.requests)
                    killed = time.monotonic()
                    await serving.kill_supervisor()
                    asked.append((CHAN, await ask(discord, "clankie, what is the door code?")))
                    took = await answer_within(discord, f"it is {4700 + n}", killed, window)
                    times.append(took)
                    if took is not None:
                        said = [json.dumps(r["messages"]) for r in standby.anthropic.requests[before:]]
                        recalled += any(f"the door code is {4700 + n}" in s and "what is the door code" in s for s in said)
                    print(f"  postgres kill {n + 1}: answered in {took if took is None else round(took, 2)} s", flush=True)
                    await serving.respawn()  # the dead machine comes back: the new standby
                    await serving.standing_by(120)
                    serving, standby = standby, serving
            finally:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load
            lost, duplicates = await settle(discord, sent + asked, window)
    finally:
        await discord.close()
    return times, recalled, len(sent), lost, duplicates


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


async def burst(tree: Tree, rooms: list[str], window: float) -> tuple[float, float]:
    """One ping in each of ``rooms`` at once, each by another person: (turns a second, the service's RSS growth per
    turn in KiB). Each is a turn of its own, its lane opened cold."""
    service = await tree.child("service")
    assert service.pid is not None
    tree.anthropic.respond_with(responder({"value": 0}))
    before = rss(service.pid)
    start = time.monotonic()
    sent = [(room, str((await tree.discord.message(room, f"clankie, ping {i}", author_id=str(9000 + i)))["id"]))
            for i, room in enumerate(rooms)]
    lost, _ = await settle(tree.discord, sent, window)
    took = time.monotonic() - start
    grown = rss(service.pid) - before
    if lost:
        print(f"  {lost} of the burst unanswered within {window:g} s", flush=True)
    return (len(rooms) - lost) / took, grown / 1024 / len(rooms)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def throughput(root: Path, dsn: str, count: int, window: float) -> dict[str, tuple[float, float]]:
    """Each profile's one tree under the same burst: one ping in each of ``count`` rooms."""
    out: dict[str, tuple[float, float]] = {}
    names = [str(20_000 + i) for i in range(count)]
    root.mkdir(parents=True, mode=0o700)
    for profile in ("files", "postgres"):
        discord = FakeDiscord(guilds={GUILD: [CHAN, *names]})
        await discord.start()
        try:
            with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as rt:
                runtime = Path(rt)
                runtime.chmod(0o700)
                extra = {"CLANKIE_DISCORD_TOOL_CARD": "false"}
                if profile == "postgres":
                    extra |= {"CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn}
                async with tree_on(root / profile, runtime, discord, extra, lambda t: t.ready(90)) as tree:
                    out[profile] = await burst(tree, names, window)
        finally:
            await discord.close()
        print(f"  {profile}: {out[profile][0]:.1f} turns/s, {out[profile][1]:.1f} KiB of service RSS per turn", flush=True)
    return out


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--files-kills", type=int, default=2)
    parser.add_argument("--window", type=float, default=30.0, help="seconds a message may wait for its answer")
    parser.add_argument("--rate", type=float, default=5.0, help="traffic: messages a second during the kills")
    parser.add_argument("--rooms", type=int, default=10, help="rooms the traffic goes to")
    parser.add_argument("--burst", type=int, default=200, help="rooms given one message each at once (throughput)")
    args = parser.parse_args()
    cluster = Cluster()
    cluster.start()
    try:
        dsn = cluster.dsn(cluster.create_database())
        database.prepare(dsn)
        with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
            root = Path(tmp)
            print(f"postgres: {args.kills} kills of the serving tree, a standby tree on the same database, "
                  f"{args.rate:g} messages/s", flush=True)
            pg_times, recalled, pings, lost, duplicates = await postgres_rounds(
                root / "pg", dsn, args.kills, args.window, args.rooms, args.rate)
            print(f"files: {args.files_kills} kills of the one tree", flush=True)
            files_times = await files_rounds(root / "files", args.files_kills, args.window)
            print(f"throughput: one message in each of {args.burst} rooms at once, each profile", flush=True)
            burst_dsn = cluster.dsn(cluster.create_database())
            database.prepare(burst_dsn)
            rates = await throughput(root / "burst", burst_dsn, args.burst, 120.0)
    finally:
        cluster.stop()
    answered = [t for t in pg_times if t is not None]
    files_answered = [t for t in files_times if t is not None]
    ms = [t * 1000 for t in answered]
    p50 = round(p(ms, 50)) if ms else "none"
    worst = round(max(ms)) if ms else "none"
    (f_tps, f_kib), (p_tps, p_kib) = rates["files"], rates["postgres"]
    print(f"postgres: answered {len(answered)}/{len(pg_times)}, kill → answer p50 {p50} ms, max {worst} ms, "
          f"recalled the fact {recalled}/{len(pg_times)}; {pings} pings + {len(pg_times)} questions: lost {lost}, "
          f"answered twice {duplicates}")
    print(f"files: answered {len(files_answered)}/{len(files_times)} within {args.window:g} s")
    print(f"throughput: files {f_tps:.1f} turns/s, {f_kib:.1f} KiB/turn; postgres {p_tps:.1f} turns/s, "
          f"{p_kib:.1f} KiB/turn")
    print(f"bench failover: kills={args.kills} rate={args.rate:g} window_s={args.window:g} "
          f"postgres_answered={len(answered)}/{len(pg_times)} postgres_p50_ms={p50} postgres_max_ms={worst} "
          f"postgres_recalled={recalled}/{len(pg_times)} pings={pings} lost={lost} duplicates={duplicates} "
          f"files_answered={len(files_answered)}/{len(files_times)} "
          f"turns_per_s_files={f_tps:.1f} turns_per_s_postgres={p_tps:.1f} throughput_ratio={p_tps / f_tps:.2f} "
          f"rss_per_turn_kib_files={f_kib:.1f} rss_per_turn_kib_postgres={p_kib:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
