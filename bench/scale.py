"""Scale: rooms by the thousand, one long room, and what an idle tree holds (issue 13's measure).

The real tree (``clankie run``: supervisor, service, bridge, browser and
tldraw hosts, with their warm spares) against the project's loopback fakes
(:mod:`clankie.testing`: Discord gateway and REST, Anthropic), which run in
this process so every timestamp is read on one clock. The supervisor is
started under ``RLIMIT_NOFILE`` 1,024 (soft **and** hard, systemd's default
soft limit; ``--nofile`` changes it), so the service's own raise to the hard
limit cannot hide an fd leak.

1. **Idle tree**: RSS summed over the supervisor and every descendant once
   the tree is ready (Chromium is not running: it starts on demand), and
   the same sum with Chromium up. **First screenshot after idle**: each a
   real turn in its own room whose model calls the screenshot tool (only the
   service may dial ``browser.sock``), a cold one, a warm one, then (the tree's
   ``CLANKIE_BROWSER_IDLE_SECONDS`` is 2 s here) wait for ``chromium down``
   in status and take one more: its extra time over the warm one is what the
   first screenshot after idle pays.
2. **One long room**: ``--turns`` (300; the issue's 2,000) turns, one after
   another as fast as the tree answers (each message waits for its reply),
   within ``--long-seconds`` (20 s): a lane whose turns slow down as it grows
   reports the turns it reached, and its turn time first and last. Service RSS
   growth per turn over all of them (``kb_per_turn``) and as the least-squares
   slope over the second half (``kb_per_turn_late``, past the first turns'
   one-off allocations); the model request's size at the last turn, then
   ``restart service`` and the time from the next message to its reply.
   RSS is not the retained heap: each turn builds the whole request (hundreds
   of kB after a few hundred turns) several times over, and the allocator's
   high-water follows the largest. Measured in-process with tracemalloc, the
   heap a long room keeps is about 4 kB/turn, nearly all of it the session
   branch since the last compaction (what the next request needs; bounded by
   the context window) and about 0.35 kB/turn of delivery index (bounded by
   ``CLANKIE_DELIVERY_RECORD_RETENTION_SECONDS`` and ``_MAX_RETAINED``); see
   docs/benchmarks.md.
3. **Rooms**: 100 and 1,000 rooms (``--rooms``; the issue's 100,1000,10000),
   cumulative, one message each, ``--concurrency`` in flight. After each
   step: service RSS and open fds, kB per room (RSS growth over the rooms
   answered so far, and over this step's rooms alone: past
   ``CLANKIE_LANES_MAX_LIVE`` those are idle, evicted rooms), ingress p50/p99
   (gateway MESSAGE_CREATE → the model request at the fake Anthropic). Every
   wait is bounded: a reply has ``--reply-timeout``, and once
   ``2 × concurrency`` messages in a row go unanswered the step stops sending
   and counts the rest as unanswered (the last line's ingress p99 is over
   every answered room); so does a step past ``--step-seconds`` (600 s). So a
   service that stops answering (issue 13 saw ``Errno 24`` at about 1,015
   rooms) shows as ``answered < rooms`` and the bench still ends.
4. **Side by side**: the same rooms on a second tree whose
   ``CLANKIE_LANES_MAX_LIVE`` is ``--baseline-max-live`` (1,000,000: every
   lane stays live, the behaviour before the bound; 0 skips it). Its fds and
   kB/room, and ours as ratios of them.

Run: ``.venv/bin/python bench/scale.py`` (about 40 s); the issue's counts:
``--rooms 100,1000,10000 --turns 2000 --long-seconds 90`` (several minutes).
Targets (issue 13): 10,000 of 10,000 answered, service fds ≤ 256, ≤ 5 kB per
idle room, ≤ 1 kB per turn, flat ingress, idle tree ≤ 300 MB.

Last line: ``bench scale: rooms=… answered=… service_fds=… kb_per_room=… kb_per_turn=…
ingress_p99_ms=… idle_tree_mb=… kb_per_turn_late=… fds_vs_all_live=… kb_per_room_vs_all_live=…``
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale_kit import TARGETS, Anthropic, Replies, pct, ratio, slope, times, tree_rss  # noqa: E402
from clankie import ipc  # noqa: E402
from clankie.errors import ChannelBroken, RemoteError  # noqa: E402
from clankie.protocol import ChildTarget, Empty, Record, StatusReply  # noqa: E402
from clankie.testing import fake_anthropic as fa  # noqa: E402
from clankie.testing.fake_discord import FakeDiscord  # noqa: E402
from tests.integration.tree import CLANKIE, GUILD, Site, tree_env  # noqa: E402


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path, extra_env: dict[str, str] | None = None) -> None:
        self.args = args
        self.tmp = tmp
        self.extra_env = extra_env or {}
        self.service_pid: int | None = None
        self.room_ids = [str(200_000 + i) for i in range(max(args.rooms))]
        self.long_chan = "199999"
        self.shot_chan = "199998"  # the screenshots' own room (the service alone may dial browser.sock)
        self.discord = FakeDiscord(guilds={GUILD: [self.long_chan, self.shot_chan, *self.room_ids]})
        self.anthropic = Anthropic()
        self.site = Site()
        self.replies = Replies(self.discord)
        self.proc: asyncio.subprocess.Process | None = None
        self.runtime = tmp / "run"
        self.seq = 0
        self.cwd = REPO  # where the tree runs from (a checkout of another revision, to compare against it)

    async def call(self, method: str, params: Record | None = None, timeout: float = 60.0) -> Record:
        conn = await ipc.connect(self.runtime / "control.sock", "test", timeout=timeout)
        try:
            return await conn.request(method, params or Empty(), timeout=timeout)
        finally:
            await conn.aclose()

    async def status(self) -> dict[str, Any]:
        reply = await self.call("status")
        assert isinstance(reply, StatusReply)
        return {c.name: c for c in reply.children}

    async def wait_status(self, pred: Any, what: str, timeout: float = 90.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while True:
            try:
                children = await self.status()
                if pred(children):
                    return children
            except (OSError, ChannelBroken, RemoteError):
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"the tree never got there: {what}")
            await asyncio.sleep(0.1)

    async def boot(self) -> None:
        await self.discord.start()
        await self.anthropic.start()
        await self.site.start()
        (self.tmp / "state").mkdir(mode=0o700)
        env = tree_env(self.tmp, self.runtime, self.discord, self.anthropic, {
            "CLANKIE_BROWSER_ALLOW_PRIVATE": "true",
            "CLANKIE_BROWSER_IDLE_SECONDS": "2",
            "CLANKIE_DISCORD_TOOL_CARD": "false",  # a screenshot turn's first post is its reply, not a card
            "CLANKIE_LOG_LEVEL": "WARNING",
            "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "60",
            # a window the long room fills several times over: its lane compacts, as a months-long one does
            "CLANKIE_MODEL_CONTEXT_WINDOW": str(self.args.window),
            "CLANKIE_COMPACTION_RESERVE_TOKENS": str(self.args.window // 5),
            "CLANKIE_COMPACTION_KEEP_TOKENS": str(self.args.window // 5),
            **self.extra_env,
        })
        nofile = self.args.nofile
        err = (self.tmp / "supervisor.stderr").open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            CLANKIE, "run", env=env, stdin=asyncio.subprocess.DEVNULL, stdout=err, stderr=err, cwd=self.cwd,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)),
        )
        await self.wait_status(
            lambda c: all(c[n].state == "running" for n in ("browser", "tldraw", "service"))
            and "discord: connected; service: connected" in c["bridge"].detail, "ready")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 40)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        await self.site.close()
        await self.anthropic.close()
        await self.discord.close()

    async def service_numbers(self) -> tuple[int, int]:
        pid = (await self.status())["service"].pid
        proc = psutil.Process(pid)
        return proc.memory_info().rss, proc.num_fds()

    async def say(self, room: str) -> tuple[str, int]:
        self.seq += 1
        sent = await self.discord.message(room, f"hello scale-{self.seq}", mention_bot=True)
        return str(sent["id"]), self.seq

    # ------------------------------------------------------------ 1. idle tree and the browser

    async def shot(self) -> float:
        """One screenshot through a real turn in its own room: only the service may dial browser.sock (issue 24),
        so the time is the whole turn's; cold, warm and after-idle differ by the browser's part alone."""
        self.replies.scan()
        self.anthropic.script(fa.tool_use(("browser_screenshot", {"url": self.site.url()})), fa.text("the page"))
        t0 = time.monotonic()
        mid, _ = await self.say(self.shot_chan)
        if not await self.replies.wait(mid, self.args.reply_timeout):
            raise TimeoutError("a screenshot turn got no reply")
        return (time.monotonic() - t0) * 1000

    async def idle_tree(self) -> dict[str, float]:
        assert self.proc is not None
        await self.wait_status(lambda c: c["browser"].detail.startswith("chromium down"), "chromium down")
        idle = tree_rss(self.proc.pid)
        cold = await self.shot()
        warm = await self.shot()
        with_chromium = tree_rss(self.proc.pid)
        await self.wait_status(lambda c: c["browser"].detail.startswith("chromium down"), "chromium down after idle")
        after_idle = await self.shot()
        return {"idle_mb": idle / 2**20, "chromium_mb": with_chromium / 2**20, "cold_ms": cold,
                "warm_ms": warm, "after_idle_ms": after_idle}

    # ------------------------------------------------------------ 2. one long room

    async def long_room(self, turns: int) -> dict[str, float]:
        self.replies.scan()
        mid, _ = await self.say(self.long_chan)  # the cold first turn, outside the measure
        await self.replies.wait(mid, self.args.reply_timeout)
        rss0, _ = await self.service_numbers()
        proc = psutil.Process((await self.status())["service"].pid)
        answered, t0 = 0, time.monotonic()
        took: list[float] = []
        samples: list[tuple[int, int]] = [(0, rss0)]  # (turns answered, service RSS), every 10 turns
        while answered < turns and time.monotonic() - t0 < self.args.long_seconds:
            t = time.monotonic()
            mid, _ = await self.say(self.long_chan)
            if not await self.replies.wait(mid, self.args.reply_timeout):
                break
            took.append((time.monotonic() - t) * 1000)
            answered += 1
            if answered % 10 == 0:
                samples.append((answered, proc.memory_info().rss))
        elapsed = time.monotonic() - t0
        first_ms, last_ms = pct(took[:50], 0.5), pct(took[-50:], 0.5)
        rss1, fds = await self.service_numbers()
        size = self.anthropic.last_size
        await self.call("restart", ChildTarget(name="service"), timeout=90)
        await self.wait_status(lambda c: "service: connected" in c["bridge"].detail, "bridge reconnected")
        t1 = time.monotonic()
        mid, _ = await self.say(self.long_chan)
        ok = await self.replies.wait(mid, self.args.reply_timeout)
        first = (time.monotonic() - t1) * 1000 if ok else float("nan")
        return {"turns": answered, "kb_per_turn": (rss1 - rss0) / 1024 / max(1, answered), "request_kb": size / 1024,
                "summaries": self.anthropic.summaries,
                "kb_per_turn_late": slope(samples[len(samples) // 2:]) / 1024,
                "turns_per_s": answered / elapsed if elapsed else 0.0, "first_after_restart_ms": first, "fds": fds,
                "first50_ms": first_ms, "last50_ms": last_ms}

    # ------------------------------------------------------------ 3. rooms

    async def rooms_step(self, rooms: list[str]) -> dict[str, Any]:
        sem = asyncio.Semaphore(self.args.concurrency)
        stop = asyncio.Event()
        misses = 0
        answered = 0
        ingress: list[float] = []
        budget_hit = [False]
        t0 = time.monotonic()

        async def one(room: str) -> None:
            nonlocal misses, answered
            async with sem:
                if stop.is_set() or time.monotonic() - t0 > self.args.step_seconds:
                    budget_hit[0] |= not stop.is_set()
                    return
                sent = time.monotonic()
                mid, seq = await self.say(room)
                if await self.replies.wait(mid, self.args.reply_timeout):
                    answered += 1
                    misses = 0
                    if seq in self.anthropic.arrived:
                        ingress.append((self.anthropic.arrived[seq] - sent) * 1000)
                else:
                    misses += 1
                    if misses >= 2 * self.args.concurrency:
                        stop.set()

        await asyncio.gather(*(one(r) for r in rooms))
        return {"answered": answered, "p50": pct(ingress, 0.5), "p99": pct(ingress, 0.99),
                "seconds": time.monotonic() - t0, "gave_up": stop.is_set(), "budget": budget_hit[0],
                "ingress": ingress}

    async def rooms(self) -> list[dict[str, Any]]:
        base, _ = await self.service_numbers()
        out, done, answered_total = [], 0, 0
        prev_rss, prev_answered = base, 0
        all_ingress: list[float] = []
        for count in self.args.rooms:
            step = await self.rooms_step(self.room_ids[done:count])
            answered_total += int(step["answered"])
            done = count
            try:
                rss, fds = await self.service_numbers()
            except (psutil.Error, RemoteError, OSError):
                rss, fds = 0, -1
            all_ingress.extend(step.pop("ingress"))
            out.append({**step, "rooms": count, "answered": answered_total, "rss_mb": rss / 2**20, "fds": fds,
                        "kb_per_room": (rss - base) / 1024 / max(1, answered_total),  # per room that has a lane
                        "p99_all": pct(all_ingress, 0.99),
                        # this step's rooms alone: RSS growth over the rooms it added (past lanes_max_live: idle rooms)
                        "kb_per_room_step": (rss - prev_rss) / 1024 / max(1, answered_total - prev_answered)})
            prev_rss, prev_answered = rss, answered_total
            print(f"  {count:>6} rooms: answered {answered_total:>6}  service rss {rss / 2**20:7.1f} MB  fds {fds:>5}  "
                  f"{out[-1]['kb_per_room']:6.2f} kB/room ({out[-1]['kb_per_room_step']:6.2f} this step)  "
                  f"ingress p50 {step['p50']:7.1f} ms  p99 {step['p99']:7.1f} ms  "
                  f"({step['seconds']:.0f} s{', stopped sending: no answers' if step['gave_up'] else ''}"
                  f"{', stopped sending: --step-seconds ran out' if step['budget'] else ''})", flush=True)
            if step["gave_up"] or step["budget"]:
                break
        return out


async def baseline(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The same rooms on a second tree with every lane kept live (the behaviour before the LRU bound)."""
    print(f"baseline: a second tree, CLANKIE_LANES_MAX_LIVE={args.baseline_max_live} (every lane live)", flush=True)
    with tempfile.TemporaryDirectory(prefix="ck-scale-base-", dir="/tmp") as d:
        bench = Bench(args, Path(d), {"CLANKIE_LANES_MAX_LIVE": str(args.baseline_max_live)})
        try:
            await bench.boot()
            return await bench.rooms()
        finally:
            await bench.stop()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000],
                        help="cumulative room counts (the issue's: 100,1000,10000)")
    parser.add_argument("--turns", type=int, default=300, help="turns of the long room (the issue's: 2000)")
    parser.add_argument("--long-seconds", type=float, default=20.0, help="time budget of the long room")
    parser.add_argument("--step-seconds", type=float, default=600.0, help="time budget of one rooms step")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--reply-timeout", type=float, default=20.0)
    parser.add_argument("--nofile", type=int, default=1024, help="RLIMIT_NOFILE (soft and hard) for the supervisor")
    parser.add_argument("--window", type=int, default=20_000,
                        help="CLANKIE_MODEL_CONTEXT_WINDOW of the trees (reserve and keep a fifth of it each)")
    parser.add_argument("--baseline-max-live", type=int, default=1_000_000,
                        help="CLANKIE_LANES_MAX_LIVE of the side-by-side tree (0: no baseline tree)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ck-scale-", dir="/tmp") as d:
        bench = Bench(args, Path(d))
        try:
            await bench.boot()
            print(f"scale bench: the real tree under RLIMIT_NOFILE {args.nofile}, fake Discord and Anthropic", flush=True)
            tree = await bench.idle_tree()
            print(f"idle tree: {tree['idle_mb']:.0f} MB (Chromium down), {tree['chromium_mb']:.0f} MB with Chromium up; "
                  f"screenshot cold {tree['cold_ms']:.0f} ms, warm {tree['warm_ms']:.0f} ms, first after idle "
                  f"{tree['after_idle_ms']:.0f} ms (+{tree['after_idle_ms'] - tree['warm_ms']:.0f} ms for the start)", flush=True)
            long = await bench.long_room(args.turns)
            print(f"one room, {long['turns']:.0f} turns ({long['turns_per_s']:.0f}/s): {long['kb_per_turn']:.2f} kB/turn of "
                  f"service RSS over all of them, {long['kb_per_turn_late']:.2f} kB/turn over the second half (slope); "
                  f"{long['summaries']:.0f} compactions, last request {long['request_kb']:.0f} kB, first turn after a restart "
                  f"{long['first_after_restart_ms']:.0f} ms; a turn took {long['first50_ms']:.0f} ms (p50, first 50) -> "
                  f"{long['last50_ms']:.0f} ms (last 50)", flush=True)
            steps = await bench.rooms()
        finally:
            await bench.stop()
    base = await baseline(args) if args.baseline_max_live > 0 else []
    last = steps[-1]
    print(f"vs targets: fds {ratio(last['fds'], TARGETS['fds'])}, kB/room {ratio(last['kb_per_room'], TARGETS['kb_per_room'])}, "
          f"kB/turn {ratio(long['kb_per_turn'], TARGETS['kb_per_turn'])}, idle tree {ratio(tree['idle_mb'], TARGETS['idle_tree_mb'])}")
    tail = ""
    if base:
        b = base[-1]
        fds_x, room_x = times(last["fds"], b["fds"]), times(last["kb_per_room"], b["kb_per_room"])
        print(f"vs every lane live (baseline tree) at {b['rooms']} rooms: answered {last['answered']:.0f} vs {b['answered']:.0f}; "
              f"service fds {last['fds']:.0f} vs {b['fds']:.0f} ({fds_x:.2f}x); kB/room {last['kb_per_room']:.2f} vs "
              f"{b['kb_per_room']:.2f} ({room_x:.2f}x), this step's rooms {last['kb_per_room_step']:.2f} vs "
              f"{b['kb_per_room_step']:.2f}; service RSS {last['rss_mb']:.0f} vs {b['rss_mb']:.0f} MB")
        tail = f" fds_vs_all_live={fds_x:.2f} kb_per_room_vs_all_live={room_x:.2f}"
    print(f"bench scale: rooms={args.rooms[-1]} answered={last['answered']:.0f} service_fds={last['fds']:.0f} "
          f"kb_per_room={last['kb_per_room']:.2f} kb_per_turn={long['kb_per_turn']:.2f} ingress_p99_ms={last['p99_all']:.1f} "
          f"idle_tree_mb={tree['idle_mb']:.0f} kb_per_turn_late={long['kb_per_turn_late']:.2f}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
