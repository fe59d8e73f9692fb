"""Chaos: people keep talking while random SIGKILLs hit random processes of the real tree.

``clankie run`` and its four real children (service, bridge, browser host,
tldraw host) run against the fake Discord and a fake Anthropic whose answers
take about a second. Messages go out at random moments into random rooms;
meanwhile a killer SIGKILLs a random process every few seconds: one of the
children (the supervisor restarts it) or the supervisor itself (its children
die with it; the bench starts a new ``clankie run`` on the same state, as
systemd would). A seed makes a run repeatable.

Side by side in the same run and with the same seed: this tree, and the tree
as it was before the ingress journal and honest attempt counting (``--base``,
a git revision checked out into a temporary worktree).

Per tree it prints messages, kills per process, lost (no outcome at all),
failed (an outcome, but no answer), duplicates (extra replies to one
message), and the extra latency of the messages a kill landed on (time to
their outcome minus the median of the undisturbed ones), p50/p99.

Run: ``.venv/bin/python bench/chaos.py [--seed N] [--messages 200] [--rooms 20] [--base REV]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from clankie import ipc
from clankie.errors import ClankieError
from clankie.jsonl import read_lines
from clankie.protocol import Empty, StatusReply
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord

REPO = Path(__file__).resolve().parents[1]
GUILD = "100"
PERSON = "500000000000000001"
FINAL = frozenset({"settled", "absorbed", "silent", "failed", "expired"})
ANSWERED = frozenset({"settled", "absorbed"})
TARGETS = ("bridge", "service", "browser", "tldraw", "supervisor")
BASE_REV = "a80ec8d"  # main before the ingress journal and honest attempt counting


class SlowAnthropic(fa.FakeAnthropic):
    """A short answer streamed over about a second, as a model that thinks a little."""

    def _default(self, body: dict[str, Any]) -> fa.Scenario:
        return fa.text("sure, noted that", chunk_size=4, delay=0.12)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        with contextlib.suppress(ConnectionError):
            return await super()._messages(request)
        return web.Response(status=499)


@dataclass
class Result:
    name: str
    messages: int = 0
    kills: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    failed: int = 0
    duplicates: int = 0
    extra_ms: list[float] = field(default_factory=list)
    undisturbed_ms: list[float] = field(default_factory=list)

    def pct(self, q: float) -> float:
        xs = sorted(self.extra_ms)
        return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] / 1000 if xs else 0.0


class Tree:
    """One `clankie run` (restartable) on a state dir, reached over its control socket."""

    def __init__(self, tmp: Path, code: Path, discord: FakeDiscord, anthropic: fa.FakeAnthropic) -> None:
        self.state, self.runtime, self.code = tmp / "state", tmp / "run", code
        self.log = tmp / "supervisor.log"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.state),
            "CLANKIE_STATE": str(self.state), "CLANKIE_RUNTIME_DIR": str(self.runtime), "PYTHONPATH": str(code),
            "CLANKIE_HEARTBEAT_SECONDS": "0.5", "CLANKIE_LOG_LEVEL": os.environ.get("CHAOS_LOG_LEVEL", "WARNING"),
            "DISCORD_TOKEN": discord.token, "CLANKIE_DISCORD_API_BASE": discord.api_base,
            "CLANKIE_DISCORD_GUILD_IDS": GUILD, "ANTHROPIC_API_KEY": "sk-bench", "ANTHROPIC_BASE_URL": anthropic.base_url,
            "CLANKIE_USER_TURNS_PER_MINUTE": "0", "CLANKIE_ROOM_TURNS_PER_MINUTE": "0",  # one author speaks for the crowd
            "CLANKIE_BUDGET_USER_DAY_USD": "0", "CLANKIE_BUDGET_ROOM_DAY_USD": "0",  # ... and pays for it: no day budgets
        }
        self.proc: asyncio.subprocess.Process | None = None

    async def spawn(self) -> None:
        with self.log.open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "import sys; from supervisor.app import main; sys.exit(main())", "run",
                env=self.env, cwd=self.code, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
            )

    async def status(self) -> StatusReply | None:
        try:
            conn = await ipc.connect(self.runtime / "control.sock", "bench", timeout=5)
        except (OSError, ClankieError):
            return None
        try:
            reply = await conn.request("status", Empty(), timeout=5)
        except (OSError, ClankieError):
            return None
        finally:
            await conn.aclose()
        return reply if isinstance(reply, StatusReply) else None

    async def until_ready(self, timeout: float = 60.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = await self.status()
            if st is not None and all(c.state == "running" for c in st.children) and any(
                    c.name == "bridge" and "discord: connected; service: connected" in c.detail for c in st.children):
                return True
            await asyncio.sleep(0.1)
        return False

    async def kill(self, target: str) -> bool:
        if target == "supervisor":
            assert self.proc is not None
            self.proc.kill()
            await self.proc.wait()
            await self.spawn()
            return True
        st = await self.status()
        child = next((c for c in st.children if c.name == target), None) if st else None
        if child is None or child.pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        return True

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def run_tree(name: str, code: Path, seed: int, messages: int, rooms: list[str]) -> Result:
    rng = random.Random(seed)
    discord = FakeDiscord(guilds={GUILD: rooms})
    anthropic = SlowAnthropic()
    await discord.start()
    await anthropic.start()
    result = Result(name, messages, {t: 0 for t in TARGETS})
    with tempfile.TemporaryDirectory(prefix="ck-chaos-", dir="/tmp") as d:
        tree = Tree(Path(d), code, discord, anthropic)
        tree.state.mkdir(mode=0o700)
        await tree.spawn()
        try:
            if not await tree.until_ready():
                raise SystemExit(f"{name}: the tree never became ready; see {tree.log}")
            sent: dict[str, float] = {}
            kills: list[float] = []
            sending = asyncio.create_task(send(discord, rng, messages, rooms, sent))
            killing = asyncio.create_task(kill_loop(tree, random.Random(seed + 1), sending, kills, result))
            await sending
            await killing
            await settle(tree, sent)
            score(tree, discord, sent, kills, result)
            if result.lost and os.environ.get("CHAOS_KEEP"):
                keep = Path(os.environ["CHAOS_KEEP"])
                shutil.copytree(d, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
                (keep / "sent.json").write_text(json.dumps({"sent": sent, "kills": kills}))
        finally:
            await tree.stop()
            await anthropic.close()
            await discord.close()
    return result


async def send(discord: FakeDiscord, rng: random.Random, n: int, rooms: list[str], sent: dict[str, float]) -> None:
    for i in range(n):
        await asyncio.sleep(rng.expovariate(1 / 0.15))
        room = rng.choice(rooms)
        m = await discord.message(room, f"chaos message {i} in {room}", author_id=PERSON)
        sent[m["id"]] = time.time()


async def kill_loop(tree: Tree, rng: random.Random, sending: asyncio.Task[None], kills: list[float], result: Result) -> None:
    await asyncio.sleep(1.0)
    while not sending.done():
        target = rng.choice(TARGETS)
        if await tree.kill(target):
            result.kills[target] += 1
            kills.append(time.time())
        await asyncio.sleep(rng.uniform(2.0, 4.0))


def finals(tree: Tree) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in read_lines(tree.state / "receipts" / "bridge.jsonl"):
        if r.get("outcome") in FINAL:
            out.setdefault(r["delivery_id"], []).append(r)
    return out


async def settle(tree: Tree, sent: dict[str, float], quiet: float = 30.0, cap: float = 150.0) -> None:
    """Wait until every message has an outcome, or nothing has moved for ``quiet`` seconds."""
    start = last_change = time.monotonic()
    seen = -1
    while time.monotonic() - start < cap:
        done = sum(1 for mid in sent if mid in finals(tree))
        if done == len(sent):
            return
        if done != seen:
            seen, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > quiet:
            return
        await asyncio.sleep(0.5)


def score(tree: Tree, discord: FakeDiscord, sent: dict[str, float], kills: list[float], result: Result) -> None:
    got = finals(tree)
    latency: dict[str, float] = {}
    disturbed: set[str] = set()
    for mid, at in sent.items():
        outs = got.get(mid)
        if not outs:
            result.lost += 1
            continue
        if outs[0]["outcome"] not in ANSWERED:
            result.failed += 1
            continue
        done = outs[0]["at"]
        latency[mid] = (done - at) * 1000
        if any(at <= k <= done for k in kills):
            disturbed.add(mid)
    replies: dict[str, int] = {}
    for post in discord.posts:
        ref = str((post.message_reference or {}).get("message_id"))
        if ref in sent:
            replies[ref] = replies.get(ref, 0) + 1
    result.duplicates = sum(n - 1 for n in replies.values() if n > 1)
    result.undisturbed_ms = [v for k, v in latency.items() if k not in disturbed]
    base = statistics.median(result.undisturbed_ms) if result.undisturbed_ms else 0.0
    result.extra_ms = [max(0.0, latency[k] - base) for k in disturbed]


@contextlib.contextmanager
def checkout(rev: str) -> Any:
    """The tree at ``rev`` in a temporary git worktree (removed afterwards)."""
    path = Path(tempfile.mkdtemp(prefix="ck-base-", dir="/tmp")) / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)
        shutil.rmtree(path.parent, ignore_errors=True)


def line(r: Result) -> str:
    kills = ", ".join(f"{k} {v}" for k, v in r.kills.items())
    return (f"{r.name:<8} messages={r.messages} kills={sum(r.kills.values())} ({kills}) lost={r.lost} failed={r.failed} "
            f"duplicates={r.duplicates} disturbed={len(r.extra_ms)} extra_p50_s={r.pct(0.5):.2f} "
            f"extra_p99_s={r.pct(0.99):.2f} undisturbed_p50_s={statistics.median(r.undisturbed_ms) / 1000 if r.undisturbed_ms else 0:.2f}")


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rooms", type=int, default=20)
    ap.add_argument("--base", default=BASE_REV, help="git revision to compare with ('' to skip)")
    args = ap.parse_args(argv)
    rooms = [str(1000 + i) for i in range(args.rooms)]
    results = [await run_tree("now", REPO, args.seed, args.messages, rooms)]
    if args.base:
        with checkout(args.base) as base:
            results.append(await run_tree("before", base, args.seed, args.messages, rooms))
    print(f"chaos bench: {args.messages} messages over {args.rooms} rooms, seed {args.seed}, random SIGKILLs every 2-4 s")
    for r in results:
        print(line(r))
    now = results[0]
    if len(results) > 1:
        before = results[1]
        print(f"answered: now {now.messages - now.lost - now.failed}/{now.messages} vs before "
              f"{before.messages - before.lost - before.failed}/{before.messages}; "
              f"unanswered ratio now/before = {(now.lost + now.failed) / max(1, before.lost + before.failed):.2f}")
    print(f"bench chaos: messages={now.messages} kills={sum(now.kills.values())} lost={now.lost} failed={now.failed} "
          f"duplicates={now.duplicates} recovered_p50_s={now.pct(0.5):.2f} recovered_p99_s={now.pct(0.99):.2f}")
    return 0 if now.lost == 0 and now.duplicates == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
