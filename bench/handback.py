"""A dead tree's shard served by the other tree until it returns (``CLANKIE_DISCORD_SHARD_TAKEOVER=any``), against
today's ``none``, where the shard's rooms wait for their own tree.

Two real trees (``clankie run``, all four children and their spares) on one real PostgreSQL (Debian's, a cluster this
bench starts) and one loopback Discord with two shards: tree A prefers shard 0, tree B shard 1. Guild G0 (shard 0)
has the fact room and ``--rooms`` traffic rooms, guild G1 (shard 1) as many. Throughout, ``--rate`` messages a second
(5) go round every traffic room of both guilds, each by one of 200 people. Each of ``--rounds`` rounds (3) tells A a
fact in G0's fact room, SIGKILLs A's supervisor (every process: a dead machine) and at once asks the room for the fact;
A comes back ``--down`` seconds (20) after its death, as systemd would start it again. Stamped on one clock
(``time.monotonic``):

* **kill → answer**: the question's answer in the room. With ``any`` tree B takes shard 0 at its lease's expiry and
  answers with A's lane from the database; with ``none`` the room waits for A to come back.
* **back → handback** (``any``): A restarted → A holds shard 0's lease again (B handed it back at A's claim), and
  **answered by A**: a question asked right after that is answered by A's tree.

After the rounds the traffic stops and every message is given ``--window`` seconds: **lost** counts those with no
reply in their room after them, **duplicates** those with more than one reply of their own; **session starts** are
the IDENTIFYs after the trees' first (a takeover and a handback RESUME).

The lease settings are the defaults (renew 2 s, TTL 6 s), the handback bound too (30 s).

Last line: ``bench handback: rounds=… down_s=… any_p50_ms=… any_max_ms=… none_p50_ms=… none_max_ms=…
answer_ratio=… handback_p50_ms=… handback_max_ms=… answered_by_a=k/n any_lost=… any_duplicates=… none_lost=…
none_duplicates=… any_session_starts=… none_session_starts=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.failover import answer_within, answered, p, responder, settle, traffic
from clankie.store import database
from clankie.store.leases import tree_holder
from clankie.testing.fake_discord import FakeDiscord
from clankie.testing.postgres import Cluster
from tests.integration.tree import PERSON, Tree, pg_tree
from tests.postgres import lease_row

G0, G1 = str(1000 << 22), str(1001 << 22)  # (id >> 22) % 2: shard 0 and shard 1
FACT = "4194304101"


def rooms_of(base: int, count: int) -> list[str]:
    return [str(base + i) for i in range(count)]


def replied(discord: FakeDiscord, message_id: str) -> Callable[[], bool]:
    """Whether the fact room has a reply after ``message_id`` (its own, or the run's it was absorbed into)."""
    return lambda: answered(discord, FACT, message_id)


async def until(check: Callable[[], bool], window: float) -> float | None:
    """Seconds until ``check()`` is true, or None after ``window``."""
    start = time.monotonic()
    while time.monotonic() - start < window:
        if check():
            return time.monotonic() - start
        await asyncio.sleep(0.05)
    return None


async def profile(root: Path, dsn: str, takeover: str, args: argparse.Namespace) -> dict[str, object]:
    """``args.rounds`` deaths of tree A under traffic with ``CLANKIE_DISCORD_SHARD_TAKEOVER=takeover``."""
    root.mkdir(parents=True, mode=0o700)
    r0, r1 = rooms_of(4194304200, args.rooms), rooms_of(4194305200, args.rooms)
    discord = FakeDiscord(guilds={G0: [FACT, *r0], G1: r1}, shards=2)
    await discord.start()
    env = {"CLANKIE_DISCORD_GUILD_IDS": f"{G0},{G1}", "CLANKIE_DISCORD_SHARD_COUNT": "2",
           "CLANKIE_DISCORD_SHARD_TAKEOVER": takeover}
    code = {"value": 0}
    kills: list[float | None] = []
    handbacks: list[float | None] = []
    by_a = 0
    sent: list[tuple[str, str]] = []
    asked: list[tuple[str, str]] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            a: Tree = await stack.enter_async_context(pg_tree(root / "a", discord, dsn, serving=True,
                                                              env={**env, "CLANKIE_DISCORD_SHARD_IDS": "0"}))
            b: Tree = await stack.enter_async_context(pg_tree(root / "b", discord, dsn, serving=True,
                                                              env={**env, "CLANKIE_DISCORD_SHARD_IDS": "1"}))
            for tree in (a, b):
                tree.anthropic.respond_with(responder(code))
            mine = tree_holder(a.state)
            await until(lambda: (lease_row(dsn, "0/2") or ("", 0))[0] == mine
                        and (lease_row(dsn, "1/2") or ("", 0))[0] == tree_holder(b.state), 60)
            identifies = discord.identifies
            load = asyncio.create_task(traffic(discord, [x for pair in zip(r0, r1, strict=True) for x in pair],
                                               args.rate, sent))
            try:
                for n in range(args.rounds):
                    code["value"] = 4700 + n
                    fact = str((await discord.message(FACT, f"clankie, remember: the door code is {4700 + n}",
                                                      author_id=PERSON))["id"])
                    await a.reply_to(fact, 60)
                    killed = time.monotonic()
                    await a.kill_supervisor()
                    asked.append((FACT, str((await discord.message(FACT, "clankie, what is the door code?",
                                                                   author_id=PERSON))["id"])))
                    wait = asyncio.create_task(answer_within(discord, f"it is {4700 + n}", killed, args.down + args.window, FACT))
                    await asyncio.sleep(max(0.0, killed + args.down - time.monotonic()))
                    await a.respawn()  # the machine is back
                    back = time.monotonic()
                    took = await wait
                    kills.append(took)
                    if takeover == "any":
                        held = await until(lambda: (lease_row(dsn, "0/2") or ("", 0))[0] == mine, args.window)
                        handbacks.append(None if held is None else time.monotonic() - back)
                    await a.ready(120)
                    again = str((await discord.message(FACT, "clankie, what is the door code?", author_id=PERSON))["id"])
                    asked.append((FACT, again))
                    await until(replied(discord, again), args.window)
                    by_a += (a.outcome_of(again) or {}).get("outcome") == "settled"  # A's tree answered it
                    print(f"  {takeover} round {n + 1}: answered in {took if took is None else round(took, 2)} s; "
                          f"back → handback {handbacks[-1] if handbacks else '-'}", flush=True)
            finally:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load
            lost, duplicates = await settle(discord, sent + asked, args.window)
            starts = discord.identifies - identifies
    finally:
        await discord.close()
    return {"kills": kills, "handbacks": handbacks, "by_a": by_a, "lost": lost, "duplicates": duplicates,
            "starts": starts, "messages": len(sent) + len(asked)}


def ms(values: list[float | None]) -> tuple[int | str, int | str]:
    done = [v * 1000 for v in values if v is not None]
    return (round(p(done, 50)), round(max(done))) if done else ("none", "none")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--down", type=float, default=20.0, help="seconds the dead tree stays down")
    parser.add_argument("--window", type=float, default=60.0, help="seconds a message may wait for its answer")
    parser.add_argument("--rate", type=float, default=5.0, help="traffic: messages a second, both guilds")
    parser.add_argument("--rooms", type=int, default=5, help="traffic rooms in each guild")
    args = parser.parse_args()
    cluster = Cluster()
    cluster.start()
    results: dict[str, dict[str, object]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-handback-") as tmp:
            for takeover in ("any", "none"):
                dsn = cluster.dsn(cluster.create_database())
                database.prepare(dsn)
                print(f"{takeover}: {args.rounds} deaths of tree A, back after {args.down:g} s, "
                      f"{args.rate:g} messages/s", flush=True)
                results[takeover] = await profile(Path(tmp) / takeover, dsn, takeover, args)
    finally:
        cluster.stop()
    anyr, noner = results["any"], results["none"]
    a50, amax = ms(anyr["kills"])  # type: ignore[arg-type]
    n50, nmax = ms(noner["kills"])  # type: ignore[arg-type]
    h50, hmax = ms(anyr["handbacks"])  # type: ignore[arg-type]
    ratio = f"{int(n50) / int(a50):.2f}" if isinstance(a50, int) and isinstance(n50, int) and a50 else "none"
    for name, r in results.items():
        print(f"{name}: kill → answer {ms(r['kills'])} ms (p50, max); lost {r['lost']}, answered twice "  # type: ignore[arg-type]
              f"{r['duplicates']} of {r['messages']}; session starts after the first {r['starts']}")
    print(f"bench handback: rounds={args.rounds} down_s={args.down:g} any_p50_ms={a50} any_max_ms={amax} "
          f"none_p50_ms={n50} none_max_ms={nmax} answer_ratio={ratio} handback_p50_ms={h50} handback_max_ms={hmax} "
          f"answered_by_a={anyr['by_a']}/{args.rounds} any_lost={anyr['lost']} any_duplicates={anyr['duplicates']} "
          f"none_lost={noner['lost']} none_duplicates={noner['duplicates']} any_session_starts={anyr['starts']} "
          f"none_session_starts={noner['starts']}")


if __name__ == "__main__":
    asyncio.run(main())
