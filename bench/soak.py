"""Soak: the real tree under a steady crowd for an hour; what each process's memory does per message (issue 25).

The real tree (``clankie run``: supervisor, service, bridge, browser and
tldraw hosts, with their warm spares) under ``RLIMIT_NOFILE`` 1,024, real
discord.py against the loopback fake Discord, and the fake model
(:mod:`bench.scale_kit`: it answers at once, echoing, and answers a
compaction's summary call with a fixed 1 kB summary), all in this process
(:class:`bench.scale.Bench`). Chromium's idle close is the production
default (300 s), so with a screenshot a minute it stays up, as it would.

1. **Load**: ``--rate`` (5) messages a second in total, addressed to the
   bot, round-robin over ``--rooms`` (50) rooms, on a fixed schedule, for
   ``--minutes`` (60). Every ``--shot-seconds`` (60) one of them is a
   screenshot turn: the model calls ``browser_screenshot`` on a local page,
   then answers; the reply carries the picture. ``--people`` (300) authors
   take turns speaking (person ``i % people`` sends message ``i``), so
   whatever the tree keeps per person fills as a crowd's would; the
   per-person and per-room turn pacing is off (as in every bench's tree).
   The tree serves its metrics (``CLANKIE_METRICS_LISTEN`` on a free
   loopback port), so every heartbeat carries a metrics report, and the
   bench scrapes ``/metrics`` at every sample (``--no-metrics``: neither).
   After the last message the bench waits for every
   outcome (up to ``--drain-seconds``). Each message ends *answered*
   (``settled`` or ``absorbed`` receipt), *dropped* (a ``dropped``
   receipt), *failed* (``failed``, ``expired`` or ``silent``) or
   *unanswered* (no outcome by the end of the drain).
2. **Memory**: every ``--sample-seconds`` (10) the RSS of each process from
   ``/proc/PID/statm``: supervisor, service, bridge, browser host, its
   Chromium (every descendant of the browser host, summed), tldraw host,
   and the warm spares (every other descendant of the supervisor, Chromium
   of the browser spare included, summed). After the warm-up (the first
   quarter, or ``--warmup-minutes``), the least-squares slope of RSS against
   messages answered, per process, in kB per message; and the same over the
   last half and over the last quarter of the run, to tell a plateau from a
   creep. A child restarted
   during the run is reported (its slope then spans two lives). Goal
   (issue 39): ≤ 0.05 kB per message over the last half once the bounded
   caches are full, the supervisor ≤ 0.01 at any window. The
   tree's context window is ``--window`` (20,000 tokens, as in
   ``bench/scale.py``) so each room's lane fills and compacts within the
   hour, as a lane that lives for months does; with the 200,000-token
   default a room's lane would still be growing at the end. For the same
   reason the caches kept by age are sized to fill within the warm-up:
   ``--retention-seconds`` (600) is the bridge's retention (its journal's
   closed entries and its dedupe ids), the recovery horizon and the
   service's delivery records' retention; at the 7-hour defaults they fill
   for 7 hours and then hold still, and an hour would only see them fill.
   And during the warm-up a screenshot comes every ``--warm-shot-seconds``
   (5): Chromium's own caches fill over its first hundred or so pages (at a
   shot a minute, hours), and the hour measures it after that.
3. **Dedupe**: in this process, no tree: ``--dedupe-ids`` (200,000) distinct
   Discord-shaped ids (``(ms since 2015 << 22) | counter``) through the
   bridge's admission (:class:`bridge.admission.Ingress` built by
   :func:`bridge.app.policy` from the default settings), one message each,
   spread over the same rooms and 1,000 authors so the default turn pacing
   (6 a person, 30 a room a minute) never applies, their clock advancing
   ``--dedupe-rate`` (10) messages a simulated second, so all 200,000 fall
   within the 7-hour retention. Counted: admitted, refused for backpressure
   (``delivery_backpressure``: a message the bot would never answer), other
   drops; then the last 1,000 are delivered again (Discord redelivers):
   how many are recognised as duplicates. Bytes held by the admission
   afterwards (``tracemalloc``, after ``gc.collect()``), in total and per
   retained id, and admissions per second (timed in a second pass without
   tracemalloc).

Run: ``.venv/bin/python bench/soak.py`` (an hour and a minute or two);
a short check: ``--minutes 3``; only the dedupe part: ``--minutes 0``.

Last line: ``bench soak: minutes=… rate=… rooms=… people=… window=… messages=… answered=… dropped=… failed=… unanswered=…
screenshots=… supervisor_kb_per_msg=… service_kb_per_msg=… bridge_kb_per_msg=… browser_kb_per_msg=…
chromium_kb_per_msg=… tldraw_kb_per_msg=… spares_kb_per_msg=… supervisor_half=… … spares_half=… supervisor_quarter=…
… spares_quarter=… dedupe_ids=… dedupe_refused=… dedupe_redelivered_recognised=… dedupe_kb_held=… dedupe_bytes_per_id=…``
(``NAME_kb_per_msg`` after the warm-up, ``NAME_half`` over the last half, ``NAME_quarter`` over the last quarter).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import re
import socket
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import Bench  # noqa: E402
from bench.scale_kit import Anthropic, pct, slope  # noqa: E402
from bridge.admission import BACKPRESSURE, Drop, Duplicate, Ingress  # noqa: E402
from bridge.app import policy  # noqa: E402
from bridge.inbound import Inbound  # noqa: E402
from clankie.errors import ChannelBroken, RemoteError  # noqa: E402
from clankie.settings import load  # noqa: E402
from clankie.testing import fake_anthropic as fa  # noqa: E402
from clankie.testing.fake_discord_records import DISCORD_EPOCH_MS  # noqa: E402
from tests.integration.tree import GUILD, Site  # noqa: E402

SERIES = ("supervisor", "service", "bridge", "browser", "chromium", "tldraw", "spares")
CHILDREN = ("service", "bridge", "browser", "tldraw")
ANSWERED = frozenset({"settled", "absorbed"})
FAILED = frozenset({"failed", "expired", "silent"})
SHOT = re.compile(r"soak-shot-(\d+)")
PAGE = os.sysconf("SC_PAGE_SIZE")
GOAL_KB_PER_MSG = 0.05
GOAL_SUPERVISOR_KB_PER_MSG = 0.01
REDELIVER = 1_000


class Model(Anthropic):
    """The scale bench's fake model, plus the screenshot turn: a message naming a new ``soak-shot-N`` gets a
    ``browser_screenshot`` call, the request carrying its result gets a short answer; everything else the echo."""

    def __init__(self, site: Site) -> None:
        super().__init__()
        self.site = site
        self.shots_served: set[int] = set()
        self.respond_with(self._choose)

    def _choose(self, body: dict[str, Any]) -> fa.Scenario | None:
        summary = self._summary(body)
        if summary is not None:
            return summary
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if any(b.get("type") == "tool_result" for b in blocks):
            return fa.text("Here is the page.")
        said = content if isinstance(content, str) else " ".join(str(b.get("text", "")) for b in blocks)
        fresh = [n for n in (int(x) for x in SHOT.findall(said)) if n not in self.shots_served]
        if not fresh:
            return None  # the echo
        self.shots_served.add(max(fresh))
        return fa.tool_use(("browser_screenshot", {"url": self.site.url()}))


class ReceiptTail:
    """The bridge's receipts, read as they are written: an open descriptor follows the file through a rotation
    (a rename), and the new live file is opened once the old one is read to its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: IO[str] | None = None
        self.partial = ""
        self.outcome: dict[str, tuple[str, float]] = {}  # delivery id -> (first outcome, its wall time)
        self.reason: dict[str, str] = {}  # delivery id -> the reason of an outcome that is not an answer

    def poll(self) -> None:
        while True:
            if self.handle is None:
                try:
                    self.handle = self.path.open(encoding="utf-8")
                except FileNotFoundError:
                    return
            self._read()
            try:
                rotated = os.stat(self.path).st_ino != os.fstat(self.handle.fileno()).st_ino
            except FileNotFoundError:
                rotated = False
            if not rotated:
                return
            self._read()  # the rest of the segment, then the new live file
            self.handle.close()
            self.handle, self.partial = None, ""

    def _read(self) -> None:
        assert self.handle is not None
        chunk = self.partial + self.handle.read()
        *lines, self.partial = chunk.split("\n")
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            outcome, mid = record.get("outcome"), record.get("delivery_id")
            if mid is None or mid in self.outcome:
                continue
            if outcome == "dropped" or outcome in ANSWERED or outcome in FAILED:
                self.outcome[str(mid)] = (str(outcome), float(record.get("at", 0.0)))
                if outcome not in ANSWERED:
                    self.reason[str(mid)] = f"{outcome}:{record.get('reason') or record.get('code') or '?'}"

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


@dataclass
class Sample:
    t: float
    answered: int
    rss: dict[str, int]


@dataclass
class Watch:
    """What the sampler saw: samples, every process met (for the leftover check), and child restarts."""

    samples: list[Sample] = field(default_factory=list)
    procs: dict[int, psutil.Process] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHILDREN, 0))


def rss(pid: int) -> int:
    """Resident bytes of ``pid`` from ``/proc/PID/statm`` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


async def sample(bench: Bench, watch: Watch, answered: int) -> Sample:
    assert bench.proc is not None
    sup = bench.proc.pid
    status = await bench.status()
    live = {name: status[name].pid for name in CHILDREN}
    for name, pid in live.items():
        if pid is not None and watch.pids.get(name) not in (None, pid):
            watch.restarts[name] += 1
        if pid is not None:
            watch.pids[name] = pid
    out = {name: rss(pid) if pid is not None else 0 for name, pid in live.items()}
    out["supervisor"] = rss(sup)
    everyone = descendants(sup)
    browser = live["browser"]
    chromium = descendants(browser) if browser is not None else []
    out["chromium"] = sum(rss(p.pid) for p in chromium)
    taken = {pid for pid in live.values() if pid is not None} | {p.pid for p in chromium}
    out["spares"] = sum(rss(p.pid) for p in everyone if p.pid not in taken)
    for p in [*everyone, *chromium]:
        watch.procs.setdefault(p.pid, p)
    return Sample(time.monotonic(), answered, out)


def answered_count(tail: ReceiptTail, sent: dict[str, float]) -> int:
    tail.poll()
    return sum(1 for mid in sent if tail.outcome.get(mid, ("", 0.0))[0] in ANSWERED)


def mb(n: float) -> str:
    return f"{n / 2**20:6.1f}"


def slopes(samples: list[Sample]) -> dict[str, float]:
    """kB per message answered, per process, least squares over ``samples`` (NaN with fewer than two)."""
    return {name: slope([(s.answered, s.rss[name]) for s in samples]) / 1024 for name in SERIES}


def free_port() -> int:
    """A loopback port the kernel says is free now (for the tree's metrics endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def scrape(http: aiohttp.ClientSession | None, url: str) -> None:
    """One ``GET /metrics``, as Prometheus would (a failed scrape is only counted by the tree's absence of it)."""
    if http is None:
        return
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
            await r.read()


def warmup_seconds(args: argparse.Namespace) -> float:
    """The part of the run left out of the slopes: ``--warmup-minutes``, else the first quarter."""
    return float(args.warmup_minutes * 60 if args.warmup_minutes is not None else args.minutes * 60 / 4)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    """The tree under the steady load; returns counts, slopes and what it saw."""
    watch = Watch()
    sent: dict[str, float] = {}  # message id -> wall time sent
    shots: list[str] = []
    lag = [0.0]
    with tempfile.TemporaryDirectory(prefix="ck-soak-", dir="/tmp") as d:
        ns = argparse.Namespace(rooms=[args.rooms], window=args.window, nofile=args.nofile)
        extra = {"CLANKIE_BROWSER_IDLE_SECONDS": "300"}
        metrics_url = ""
        if args.metrics:  # every heartbeat carries a metrics report, and the bench scrapes at every sample
            port = free_port()
            extra["CLANKIE_METRICS_LISTEN"] = f"127.0.0.1:{port}"
            metrics_url = f"http://127.0.0.1:{port}/metrics"
        people = [str(500_000_000_000_001_000 + p) for p in range(max(1, args.people))]
        if args.retention_seconds:  # the caches kept by age fill within the warm-up (see the module's docstring)
            keep = f"{args.retention_seconds:g}"
            extra |= {"CLANKIE_BRIDGE_RETENTION_SECONDS": keep, "CLANKIE_RECOVERY_HORIZON_SECONDS": keep,
                      "CLANKIE_DELIVERY_RECORD_RETENTION_SECONDS": keep}
        bench = Bench(ns, Path(d), extra)
        model = Model(bench.site)
        bench.anthropic = model
        tail = ReceiptTail(Path(d) / "state" / "receipts" / "bridge.jsonl")
        http = aiohttp.ClientSession() if metrics_url else None
        try:
            await bench.boot()
            rooms = bench.room_ids[: args.rooms]
            boot = await sample(bench, watch, 0)
            print(f"soak bench: {args.minutes:g} min, {args.rate:g} messages/s from {len(people)} people over {args.rooms} rooms, "
                  f"a screenshot every {args.shot_seconds:g} s; the real tree under RLIMIT_NOFILE {args.nofile}, window {args.window} "
                  f"tokens, metrics {'served and scraped' if metrics_url else 'off'}", flush=True)
            print("  at boot: " + "  ".join(f"{n} {mb(boot.rss[n]).strip()} MB" for n in SERIES), flush=True)
            t0 = time.monotonic()
            end = t0 + args.minutes * 60
            warm_end = t0 + warmup_seconds(args)

            async def send() -> None:
                i, next_shot = 0, t0 + min(5.0, args.shot_seconds)
                while (due := t0 + i / args.rate) < end:
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    else:
                        lag[0] = max(lag[0], -delay)
                    shot = time.monotonic() >= next_shot
                    if shot:  # during the warm-up, as often as --warm-shot-seconds says
                        period = args.warm_shot_seconds if args.warm_shot_seconds and next_shot < warm_end else args.shot_seconds
                        next_shot += period
                        text = f"clankie, a screenshot of my page please soak-shot-{len(shots)}"
                    else:
                        text = f"hello soak-{i}"
                    m = await bench.discord.message(rooms[i % len(rooms)], text, mention_bot=True, author_id=people[i % len(people)])
                    sent[str(m["id"])] = time.time()
                    if shot:
                        shots.append(str(m["id"]))
                    i += 1

            sender = asyncio.create_task(send())
            next_print = t0 + 60
            while not sender.done():
                await asyncio.wait({sender}, timeout=args.sample_seconds)
                await scrape(http, metrics_url)
                try:
                    s = await sample(bench, watch, answered_count(tail, sent))
                except (OSError, ChannelBroken, RemoteError) as e:  # the control socket mid-restart: the next one
                    print(f"  no sample: {e!r}", flush=True)
                    continue
                if not sender.done():
                    watch.samples.append(s)
                if time.monotonic() >= next_print or sender.done():
                    next_print += 60
                    print(f"  {(s.t - t0) / 60:5.1f} min: sent {len(sent):>6} answered {s.answered:>6}  "
                          + "  ".join(f"{n} {mb(s.rss[n])}" for n in SERIES) + " MB", flush=True)
            await sender
            sending_s = time.monotonic() - t0
            drain0 = time.monotonic()
            while time.monotonic() - drain0 < args.drain_seconds:
                tail.poll()
                if all(mid in tail.outcome for mid in sent):
                    break
                await asyncio.sleep(0.5)
            drain_s = time.monotonic() - drain0
            final = await sample(bench, watch, answered_count(tail, sent))
            compactions, request_kb = model.summaries, model.last_size / 1024
        finally:
            tail.close()
            if http is not None:
                await http.close()
            await bench.stop()
        _, leftover = psutil.wait_procs(list(watch.procs.values()), timeout=10)  # the tree's stop should take them all
        for p in leftover:  # processes this run started and the stop left behind
            with contextlib.suppress(psutil.Error):
                print(f"  leftover after stop: pid {p.pid} {p.name()}; killing it", flush=True)
                p.kill()
    outcomes = [tail.outcome.get(mid, ("", 0.0)) for mid in sent]
    latency = [(at - sent[mid]) * 1000 for mid, (o, at) in zip(sent, outcomes, strict=True) if o in ANSWERED]
    why: dict[str, int] = {}
    for mid in sent:
        if mid in tail.reason:
            why[tail.reason[mid]] = why.get(tail.reason[mid], 0) + 1
    shot_set = set(shots)
    with_image = {str((p.message_reference or {}).get("message_id")) for p in bench.discord.posts if p.files} & shot_set
    warm = warmup_seconds(args)
    after = [s for s in watch.samples if s.t - t0 >= warm]
    late = watch.samples[len(watch.samples) // 2:]
    quarter = watch.samples[len(watch.samples) * 3 // 4:]
    return {
        "messages": len(sent), "answered": sum(1 for o, _ in outcomes if o in ANSWERED),
        "dropped": sum(1 for o, _ in outcomes if o == "dropped"), "failed": sum(1 for o, _ in outcomes if o in FAILED),
        "unanswered": sum(1 for o, _ in outcomes if not o), "screenshots": len(shots), "with_image": len(with_image),
        "p50_ms": pct(latency, 0.5), "p99_ms": pct(latency, 0.99), "sending_s": sending_s, "drain_s": drain_s,
        "lag_s": lag[0], "compactions": compactions, "request_kb": request_kb, "boot": boot, "final": final, "warm_s": warm,
        "after": after, "slope": slopes(after), "late": slopes(late), "quarter": slopes(quarter),
        "restarts": watch.restarts, "leftover": len(leftover),
        "why": why,
    }


def dedupe(args: argparse.Namespace) -> dict[str, float]:
    """``--dedupe-ids`` distinct snowflakes through the bridge's admission with the default settings (no tree)."""
    with tempfile.TemporaryDirectory(prefix="ck-soak-dedupe-", dir="/tmp") as d:
        settings = load({"CLANKIE_STATE": f"{d}/state", "CLANKIE_RUNTIME_DIR": f"{d}/run", "CLANKIE_DISCORD_GUILD_IDS": GUILD})
    pol = policy(settings)
    n, rate = args.dedupe_ids, args.dedupe_rate
    rooms = [str(200_000 + i) for i in range(args.rooms)]
    authors = [str(600_000_000_000_000_000 + i) for i in range(1_000)]
    start_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS

    def message(i: int) -> tuple[Inbound, float]:
        ms = start_ms + int(i * 1000 / rate)
        mid = str((ms << 22) | (i & 0x3FFFFF))
        msg = Inbound(message_id=mid, channel_id=rooms[i % len(rooms)], guild_id=GUILD, author_id=authors[i % len(authors)],
                      text=f"hello dedupe-{i}", mentions_bot=True)
        return msg, (ms + DISCORD_EPOCH_MS) / 1000

    codes: dict[str, int] = {}

    def run(ingress: Ingress) -> dict[str, int]:
        counts = {"admitted": 0, "refused": 0, "other": 0, "duplicate": 0}
        codes.clear()
        for i in range(n):
            msg, now = message(i)
            decision = ingress.admit(msg, now)
            if isinstance(decision, Drop):
                counts["refused" if decision.code in BACKPRESSURE else "other"] += 1
                codes[decision.code] = codes.get(decision.code, 0) + 1
            elif isinstance(decision, Duplicate):
                counts["duplicate"] += 1
            else:
                counts["admitted"] += 1
        return counts

    t = time.perf_counter()
    run(Ingress(pol))  # timing pass, no tracemalloc
    per_s = n / (time.perf_counter() - t)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        ingress = Ingress(pol)
        counts = run(ingress)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    recognised, later = 0, message(n - 1)[1] + 1.0  # a second after the last: Discord redelivering the tail
    for i in range(max(0, n - REDELIVER), n):
        recognised += isinstance(ingress.admit(message(i)[0], later), Duplicate)
    print(f"dedupe drops by code: {codes or 'none'}", flush=True)
    retained = ingress.retained
    return {"ids": n, **counts, "retained": retained, "recognised": recognised, "redelivered": min(n, REDELIVER),
            "held": held, "per_id": held / retained if retained else float("nan"), "per_s": per_s,
            "max_retained": pol.max_retained, "retention_h": pol.retention_s / 3600, "span_h": n / rate / 3600}


def report(r: dict[str, Any]) -> None:
    boot, final = r["boot"], r["final"]
    print(f"messages {r['messages']}: answered {r['answered']}, dropped {r['dropped']}, failed {r['failed']}, "
          f"unanswered {r['unanswered']}; sent in {r['sending_s']:.0f} s (sender at most {r['lag_s']:.2f} s behind "
          f"schedule), drained in {r['drain_s']:.1f} s; outcome p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms")
    print(f"screenshots {r['screenshots']}, {r['with_image']} replies with the picture; {r['compactions']} compactions, last model "
          f"request {r['request_kb']:.0f} kB; child restarts {r['restarts']}; processes left after stop {r['leftover']}")
    if r["why"]:
        print(f"not answered, by outcome:reason: {r['why']}")
    after = r["after"]
    span = f"{len(after)} samples, {after[0].answered}-{after[-1].answered} answered" if after else "no samples"
    print(f"RSS after the {r['warm_s'] / 60:.1f}-min warm-up ({span}); goal over the last half <= {GOAL_KB_PER_MSG} kB/msg, "
          f"the supervisor <= {GOAL_SUPERVISOR_KB_PER_MSG}:")
    print(f"  {'process':<10} {'boot MB':>8} {'warm MB':>8} {'end MB':>8} {'kB/msg':>8} {'last half':>10} {'last quarter':>13}")
    for name in SERIES:
        warm_mb = mb(after[0].rss[name]) if after else "-"
        print(f"  {name:<10} {mb(boot.rss[name]):>8} {warm_mb:>8} {mb(final.rss[name]):>8} "
              f"{r['slope'][name]:8.3f} {r['late'][name]:10.3f} {r['quarter'][name]:13.3f}")


def report_dedupe(d: dict[str, float]) -> None:
    print(f"dedupe: {d['ids']:.0f} ids over {d['span_h']:.1f} simulated hours (retention {d['retention_h']:.0f} h, "
          f"max retained {d['max_retained']:.0f}): admitted {d['admitted']:.0f}, refused {d['refused']:.0f}, other drops "
          f"{d['other']:.0f}; retained {d['retained']:.0f}; last {d['redelivered']:.0f} redelivered: {d['recognised']:.0f} "
          f"recognised; held {d['held'] / 1024:.0f} kB ({d['per_id']:.0f} B per retained id); {d['per_s']:,.0f} admissions/s")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the load runs (0: only the dedupe part)")
    parser.add_argument("--rate", type=float, default=5.0, help="messages a second, all rooms together")
    parser.add_argument("--rooms", type=int, default=50)
    parser.add_argument("--people", type=int, default=300, help="authors taking turns (the crowd's size)")
    parser.add_argument("--no-metrics", dest="metrics", action="store_false",
                        help="serve no metrics (heartbeats then carry no report) and scrape none")
    parser.add_argument("--shot-seconds", type=float, default=60.0, help="one screenshot turn this often")
    parser.add_argument("--warm-shot-seconds", type=float, default=5.0,
                        help="one screenshot turn this often during the warm-up (0: as --shot-seconds)")
    parser.add_argument("--retention-seconds", type=float, default=600.0,
                        help="the bridge's and the service's retention and the recovery horizon (0: the defaults, 7 h)")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="RSS sampling interval")
    parser.add_argument("--warmup-minutes", type=float, default=None, help="left out of the slope (default: a quarter of the run)")
    parser.add_argument("--drain-seconds", type=float, default=120.0, help="how long to wait for outcomes after the last message")
    parser.add_argument("--window", type=int, default=20_000, help="CLANKIE_MODEL_CONTEXT_WINDOW (reserve and keep a fifth each)")
    parser.add_argument("--nofile", type=int, default=1024, help="RLIMIT_NOFILE (soft and hard) for the supervisor")
    parser.add_argument("--dedupe-ids", type=int, default=200_000, help="distinct ids through the admission (0: skip)")
    parser.add_argument("--dedupe-rate", type=float, default=10.0, help="simulated messages a second of the dedupe part")
    args = parser.parse_args()
    tail = f"minutes={args.minutes:g} rate={args.rate:g} rooms={args.rooms} people={args.people} window={args.window}"
    if args.minutes > 0:
        r = await soak(args)
        report(r)
        tail += (f" messages={r['messages']} answered={r['answered']} dropped={r['dropped']} failed={r['failed']} "
                 f"unanswered={r['unanswered']} screenshots={r['screenshots']} "
                 + " ".join(f"{name}_kb_per_msg={r['slope'][name]:.3f}" for name in SERIES) + " "
                 + " ".join(f"{name}_half={r['late'][name]:.3f}" for name in SERIES) + " "
                 + " ".join(f"{name}_quarter={r['quarter'][name]:.3f}" for name in SERIES))
    if args.dedupe_ids > 0:
        d = dedupe(args)
        report_dedupe(d)
        tail += (f" dedupe_ids={d['ids']:.0f} dedupe_refused={d['refused']:.0f} "
                 f"dedupe_redelivered_recognised={d['recognised']:.0f}/{d['redelivered']:.0f} "
                 f"dedupe_kb_held={d['held'] / 1024:.0f} dedupe_bytes_per_id={d['per_id']:.0f}")
    print(f"bench soak: {tail}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
