"""No deaf window: SIGKILLs of the bridge under steady traffic, the gateway session RESUMEd vs today's IDENTIFY.

The real tree (``python -m supervisor run`` with bench/recovery.py's spec:
``stable_after`` 1 s, restart intensity raised, so kills a few seconds apart
each count as an isolated crash) against the loopback fakes in this process,
whose gateway keeps a dead socket's session resumable and replays on RESUME.
A person speaks at ``--rate`` messages a second, round-robin over ``--rooms``
rooms of one guild, for the whole run. Each of ``--kills`` rounds waits until
the bridge has been up 1.5 s, SIGKILLs it, and stamps (one clock,
``time.monotonic``, beside ``time.time`` for the receipts):

* **session starts per kill**: IDENTIFYs the fake saw for that kill (goal 0);
* **kill → session up**: the fake's RESUMED (or, IDENTIFYing, its READY) for the next bridge; with ``--shards N``
  (one bridge on N shards, one guild per shard, the rooms spread over them) the last of the N;
* **gap message → answer**: each message sent between the kill and the session up, to the
  bridge's closing receipt for it (settled, or absorbed into a reply of the same room);
* **catch-up reads per kill**: rooms whose history the next bridge read back (its recovery's
  ``rooms read``, at least one ``GET /channels/…/messages`` each): today's catch-up;
* at the end, with traffic stopped and every message given 120 s to close: **lost** (never
  closed) and **duplicates** (closed twice, or two replies).

Run once per ``--modes`` (default all three) in one invocation: ``spare`` (the bridge keeps a parked spare,
logged in with no gateway socket, which the supervisor hands the slot and which RESUMEs; each kill waits for
a parked spare first), ``resume`` (no bridge spare: the next bridge starts cold and RESUMEs) and ``identify``
(``CLANKIE_DISCORD_GATEWAY_RESUME=false``, no bridge spare: IDENTIFY and history catch-up), printed side by
side with the ratios.

Last line: ``bench resume: kills=… rate=… rooms=… <mode>_starts_per_kill=… <mode>_up_p50_ms=…
<mode>_up_max_ms=… <mode>_gap_p50_ms=… <mode>_gap_max_ms=… <mode>_reads_per_kill=… … lost=… duplicates=…``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.recovery import CHAN, GUILD, PERSON, Site, Tree
from clankie.shards import shard_of
from clankie.testing.fake_discord import FakeDiscord
from tests.replies import CLOSING

STEADY = 1.5  # seconds the bridge is up before a kill (above the spec's stable_after)


def guilds(rooms: list[str], shards: int) -> dict[str, list[str]]:
    """The rooms over one guild, or (``shards`` > 0) over one guild per shard, round-robin; CHAN in GUILD (shard 0)."""
    if not shards:
        return {GUILD: [CHAN, *rooms]}
    ids = [GUILD, *(str((1000 * shards + k) << 22) for k in range(1, shards))]  # (id >> 22) % shards == k
    assert [shard_of(g, shards) for g in ids] == list(range(shards))
    out: dict[str, list[str]] = {g: [] for g in ids}
    out[GUILD].append(CHAN)
    for n, room in enumerate(rooms):
        out[ids[n % shards]].append(room)
    return out


class ResumeTree(Tree):
    """bench/recovery.py's tree of ours, with many rooms, no tool card, the resume setting, and maybe shards."""

    def __init__(self, mode: str, work: Path, site: Site, rooms: list[str], shards: int = 0) -> None:
        super().__init__("ours", work, site, None)
        self.mode = mode
        self.shards = shards
        self.bridge_spare = mode == "spare"
        self.discord = FakeDiscord(guilds=guilds(rooms, shards), shards=max(1, shards))  # CHAN: is the tree up

    def env(self) -> dict[str, str]:
        sharded = {"CLANKIE_DISCORD_SHARD_COUNT": str(self.shards),
                   "CLANKIE_DISCORD_GUILD_IDS": ",".join(self.discord.guilds)} if self.shards else {}
        return {**super().env(), "CLANKIE_DISCORD_TOOL_CARD": "false",
                "CLANKIE_DISCORD_GATEWAY_RESUME": "false" if self.mode == "identify" else "true", **sharded}

    def closings(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with contextlib.suppress(FileNotFoundError):
            for raw in (self.state / "receipts" / "bridge.jsonl").read_text().splitlines():
                with contextlib.suppress(ValueError):
                    r = json.loads(raw)
                    if r.get("outcome") in CLOSING:
                        out.setdefault(str(r["delivery_id"]), []).append(f"{r['outcome']}@{r['at']}")
        return out

    def has_receipt(self, message_id: str) -> bool:
        """Whether any bridge wrote a receipt for ``message_id`` (admitted, waiting, dropped …) at all."""
        with contextlib.suppress(FileNotFoundError):
            return f'"delivery_id":"{message_id}"' in (self.state / "receipts" / "bridge.jsonl").read_text().replace(" ", "")
        return False

    def history_reads(self) -> int:
        """Rooms the bridges' catch-ups read back (their ``recovery: N rooms read`` lines, each at least one
        ``GET /channels/…/messages?after=``); a resumed delivery's look for its own earlier post is not one."""
        with contextlib.suppress(FileNotFoundError):
            text = (self.work / "supervisor.log").read_text(errors="replace")
            return sum(int(n) for n in re.findall(r"recovery: (\d+) rooms read", text))
        return 0


@dataclass
class Result:
    starts: list[int] = field(default_factory=list)
    up_ms: list[float] = field(default_factory=list)
    gap_ms: list[float] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    sent: int = 0
    lost: int = 0
    duplicates: int = 0


async def traffic(t: ResumeTree, rooms: list[str], rate: float, sent: list[tuple[str, float, float]],
                  stop: asyncio.Event) -> None:
    """Messages at ``rate`` a second, round-robin over ``rooms``: (id, monotonic, wall) of each."""
    n = 0
    start = time.monotonic()
    while not stop.is_set():
        msg = await t.discord.message(rooms[n % len(rooms)], f"clankie, message {n}", author_id=PERSON)
        sent.append((str(msg["id"]), time.monotonic(), time.time()))
        n += 1
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))


async def run_mode(mode: str, root: Path, site: Site, args: argparse.Namespace) -> Result:
    rooms = [str(300 + i) for i in range(args.rooms)]
    work = root / mode
    work.mkdir()
    t = ResumeTree(mode, work, site, rooms, args.shards)
    sessions = max(1, args.shards)  # a kill is over once every shard's session is up again
    res = Result()
    sent: list[tuple[str, float, float]] = []
    stop = asyncio.Event()
    try:
        await t.start()
        feeder = asyncio.create_task(traffic(t, rooms, args.rate, sent, stop))
        gaps: list[tuple[float, float]] = []  # (kill, up) monotonic
        spare = mode == "spare"
        for i in range(args.kills):
            if await t.steady("bridge", spare=spare) != spare:
                raise RuntimeError(f"{mode}: no parked bridge spare before kill {i + 1}")
            await asyncio.sleep(STEADY)
            ids, ups, reads = t.discord.identifies, t.discord.resumes + t.discord.readies, t.history_reads()
            pid = await t.pid("bridge")
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            await t.discord.wait_for(lambda ups=ups: t.discord.resumes + t.discord.readies >= ups + sessions, 60)  # type: ignore[misc]
            up = time.monotonic()
            gaps.append((t0, up))
            res.up_ms.append((up - t0) * 1000)
            await t.steady("bridge", spare=False)
            res.starts.append(t.discord.identifies - ids)
            res.reads.append(t.history_reads() - reads)
            print(f"  {mode} kill {i + 1}: up after {res.up_ms[-1]:.0f} ms, {res.starts[-1]} session starts, "
                  f"{res.reads[-1]} rooms read back", flush=True)
        stop.set()
        await feeder
        res.sent = len(sent)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            closed = t.closings()
            if all(mid in closed for mid, _, _ in sent):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)  # a late duplicate would land now
        closed = t.closings()
        lost = [(mid, wall) for mid, _, wall in sent if mid not in closed]
        res.lost = len(lost)
        for mid, wall in lost:  # which, and when: with the tree's logs kept (--work), enough to find out why
            print(f"  {mode} lost: message {mid} sent at {wall:.3f} (wall), "
                  f"{'with' if t.has_receipt(mid) else 'without'} any receipt", flush=True)
        replies: dict[str, int] = {}
        for p in t.discord.posts:
            ref = str((p.message_reference or {}).get("message_id"))
            replies[ref] = replies.get(ref, 0) + 1
        res.duplicates = sum(1 for mid, _, _ in sent if len(closed.get(mid, [])) > 1 or replies.get(mid, 0) > 1)
        for mid, mono, wall in sent:
            if any(k <= mono < u for k, u in gaps) and mid in closed:
                at = float(closed[mid][0].split("@")[1])
                res.gap_ms.append(max(0.0, at - wall) * 1000)
    finally:
        stop.set()
        await t.close()
    return res


def p50(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


def top(v: list[float]) -> float:
    return max(v) if v else float("nan")


async def amain(args: argparse.Namespace) -> int:
    site = Site()
    await site.start()
    try:
        with tempfile.TemporaryDirectory(prefix="ckres-", dir="/tmp") as d:
            root = Path(args.work) if args.work else Path(d)
            root.mkdir(parents=True, exist_ok=True)
            out = {mode: await run_mode(mode, root, site, args) for mode in args.modes}
    finally:
        await site.close()
    print(f"protocol: {args.kills} kills per mode, {args.rate:g} msg/s over {args.rooms} rooms"
          f"{f', {args.shards} shards in one bridge' if args.shards else ''} (issue: 20 kills, 50 msg/s, 100 rooms)")
    for name, m in out.items():
        print(f"{name:>8}: starts/kill {statistics.mean(m.starts):.2f}, up p50 {p50(m.up_ms):.0f} ms max {top(m.up_ms):.0f} ms, "
              f"gap→answer p50 {p50(m.gap_ms):.0f} ms max {top(m.gap_ms):.0f} ms ({len(m.gap_ms)} gap messages), "
              f"rooms read back/kill {statistics.mean(m.reads):.1f}, sent {m.sent}, lost {m.lost}, duplicates {m.duplicates}")
    for slow, fast in (("identify", "resume"), ("resume", "spare")):
        if slow in out and fast in out:
            a, b = out[slow], out[fast]
            print(f"ratio {slow}/{fast}: up p50 {p50(a.up_ms) / p50(b.up_ms):.1f}x, gap→answer p50 "
                  f"{p50(a.gap_ms) / p50(b.gap_ms):.1f}x, session starts {statistics.mean(a.starts):.2f} vs "
                  f"{statistics.mean(b.starts):.2f} per kill")
    fields = " ".join(
        f"{name}_starts_per_kill={statistics.mean(m.starts):.2f} {name}_up_p50_ms={p50(m.up_ms):.0f} "
        f"{name}_up_max_ms={top(m.up_ms):.0f} {name}_gap_p50_ms={p50(m.gap_ms):.0f} {name}_gap_max_ms={top(m.gap_ms):.0f} "
        f"{name}_reads_per_kill={statistics.mean(m.reads):.1f}"
        for name, m in out.items()
    )
    lost, dups = sum(m.lost for m in out.values()), sum(m.duplicates for m in out.values())
    shards = f" shards={args.shards}" if args.shards else ""
    print(f"bench resume: kills={args.kills} rate={args.rate:g} rooms={args.rooms}{shards} {fields} lost={lost} "
          f"duplicates={dups}")
    return 0


MODES = ("spare", "resume", "identify")


def modes(value: str) -> list[str]:
    """``--modes spare,resume``: a comma-separated subset of :data:`MODES`, in the order given."""
    out = [m.strip() for m in value.split(",") if m.strip()]
    if not out or any(m not in MODES for m in out):
        raise argparse.ArgumentTypeError(f"modes are among {', '.join(MODES)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kills", type=int, default=10, help="bridge kills per mode (issue: 20)")
    ap.add_argument("--rate", type=float, default=20.0, help="messages a second (issue: 50)")
    ap.add_argument("--rooms", type=int, default=50, help="rooms the traffic goes round (issue: 100)")
    ap.add_argument("--work", help="keep the trees' logs in this (new) directory")
    ap.add_argument("--shards", type=int, default=0,
                    help="run the bridge on this many shards (one guild each, the rooms spread over them); 0: unsharded")
    ap.add_argument("--modes", type=modes, default=list(MODES), help="which of spare,resume,identify to run")
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    return asyncio.run(amain(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
