"""Metrics and traces: what they cost a turn, and what a scrape costs at 10,000 lanes (issue 27).

The real tree (``clankie run``: supervisor, service, bridge, both hosts) with
real discord.py against the loopback fake Discord and a fake model that
answers at once (:mod:`bench.scale_kit`), three times side by side in one run:

* **off**: no ``CLANKIE_METRICS_LISTEN``, no ``OTEL_EXPORTER_OTLP_ENDPOINT``;
* **metrics**: the supervisor's endpoint on, scraped every second while the
  turns run (as a Prometheus would);
* **metrics+traces**: the same, and the service's GenAI spans exported over
  OTLP/HTTP to a loopback collector stand-in that takes every batch.

Each tree answers ``--warm`` turns first (outside the measure), then
``--turns`` turns, ``--concurrency`` at a time, each in a room of its own.
Per tree: the CPU seconds the supervisor, the service and the bridge spent
per turn (from ``/proc``, as root), and the turn's latency (send to reply)
p50 and p95. Ratios are against **off**.

Then, on the metrics tree: ``--lanes`` rooms (10,000) each get one turn, so
the service holds that many lanes, and ``--scrapes`` scrapes are timed: the
exposition's size, the scrape's time (client side, p50/p95) and the
supervisor's CPU per scrape (its CPU over the scrapes, less its CPU over an
equal stretch without any, divided by the scrapes). The same is measured
right after boot (no lane) for the ratio: the exposition must not grow with
lanes (no lane label).

Run: ``.venv/bin/python bench/metrics.py`` (a few minutes; ``--lanes 2000`` for a quick look).
Last line: ``bench metrics: turns=… cpu_ms_off=… cpu_ms_metrics=… cpu_ms_traces=… metrics_vs_off=… traces_vs_off=…
p50_ms_off=… p50_vs_off_metrics=… p50_vs_off_traces=… lanes=… exposition_bytes=… exposition_vs_empty=… scrape_ms_p50=…
scrape_ms_p95=… supervisor_cpu_ms_per_scrape=… spans=…``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import Bench  # noqa: E402
from bench.scale_kit import pct  # noqa: E402
from tests.integration.test_metrics_scrape import free_port  # noqa: E402

MODES = ("off", "metrics", "metrics+traces")


class Collector:
    """A stand-in OTLP/HTTP collector: takes every ``/v1/traces`` batch, counts them and their bytes; takes the
    GenAI metrics (``/v1/metrics``) too, uncounted."""

    def __init__(self) -> None:
        self.batches = 0
        self.bytes = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _traces(self, request: web.Request) -> web.Response:
        self.bytes += len(await request.read())
        self.batches += 1
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def fetch(url: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as reply:
        size = len(reply.read())
    return size, time.perf_counter() - t0


async def scraper(url: str, stop: asyncio.Event) -> int:
    """Scrape once a second until ``stop``, as a Prometheus with a 1 s interval would; the count."""
    done = 0
    while not stop.is_set():
        await asyncio.to_thread(fetch, url)
        done += 1
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass
    return done


async def turns(bench: Bench, rooms: list[str], concurrency: int, timeout: float) -> list[float]:
    """One turn in each room, ``concurrency`` at a time; each turn's latency in ms (an unanswered one fails the bench)."""
    gate = asyncio.Semaphore(concurrency)
    took: list[float] = []

    async def one(room: str) -> None:
        async with gate:
            t0 = time.monotonic()
            mid, _ = await bench.say(room)
            assert await bench.replies.wait(mid, timeout), f"no reply in room {room}"
            took.append((time.monotonic() - t0) * 1000)

    await asyncio.gather(*(one(room) for room in rooms))
    return took


async def scrape_cost(url: str, sup: int, scrapes: int) -> dict[str, float]:
    """Exposition size, scrape time p50/p95 and the supervisor's CPU per scrape over an idle baseline."""
    await asyncio.sleep(3)  # the children's heartbeats after the last turn are in
    size, took = 0, []
    c0, t0 = cpu_seconds([sup]), time.monotonic()
    for _ in range(scrapes):
        size, seconds = await asyncio.to_thread(fetch, url)
        took.append(seconds * 1000)
    busy, span = cpu_seconds([sup]) - c0, time.monotonic() - t0
    c1 = cpu_seconds([sup])
    await asyncio.sleep(span)  # the same stretch without a scrape: heartbeats, ticks, the watchdog
    idle = cpu_seconds([sup]) - c1
    return {"bytes": size, "p50_ms": pct(took, 0.5), "p95_ms": pct(took, 0.95), "cpu_ms": max(0.0, busy - idle) * 1000 / scrapes}


async def tree(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ck-metrics-", dir="/tmp") as d:
        tmp = Path(d)
        collector = Collector()
        extra = {"CLANKIE_BROWSER_IDLE_SECONDS": "300"}
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        if mode != "off":
            extra["CLANKIE_METRICS_LISTEN"] = f"127.0.0.1:{port}"
        if mode == "metrics+traces":
            await collector.start()
            extra["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
            extra["OTEL_BSP_SCHEDULE_DELAY"] = "1000"
        lanes = args.lanes if mode == "metrics" else 0
        if lanes:
            extra["CLANKIE_LANES_MAX_LIVE"] = str(lanes + args.warm + args.turns)  # every lane stays live (default 256)
        total = args.warm + args.turns + lanes
        ns = argparse.Namespace(rooms=[total], window=200_000, nofile=args.nofile)
        bench = Bench(ns, tmp, extra)
        out: dict[str, Any] = {"mode": mode}
        try:
            await bench.boot()
            status = await bench.status()
            assert bench.proc is not None
            sup = bench.proc.pid
            pids = [sup, status["service"].pid, status["bridge"].pid]
            if mode == "metrics":
                out["empty"] = await scrape_cost(url, sup, args.scrapes)
            rooms = bench.room_ids
            await turns(bench, rooms[: args.warm], args.concurrency, args.reply_timeout)
            stop = asyncio.Event()
            scraping = asyncio.create_task(scraper(url, stop)) if mode != "off" else None
            c0 = cpu_seconds(pids)
            took = await turns(bench, rooms[args.warm: args.warm + args.turns], args.concurrency, args.reply_timeout)
            out["cpu_ms"] = (cpu_seconds(pids) - c0) * 1000 / args.turns
            stop.set()
            if scraping is not None:
                out["scrapes_during"] = await scraping
            out["p50_ms"], out["p95_ms"] = pct(took, 0.5), pct(took, 0.95)
            if mode == "metrics":
                t0 = time.monotonic()
                await turns(bench, rooms[args.warm + args.turns:], args.lanes_concurrency, args.reply_timeout * 4)
                out["lanes_s"] = time.monotonic() - t0
                out["full"] = await scrape_cost(url, sup, args.scrapes)
                text = (await asyncio.to_thread(urllib.request.urlopen, url)).read().decode()
                live = [line for line in text.splitlines() if line.startswith("clankie_lanes_live ")]
                out["lanes_live"] = float(live[0].split()[1]) if live else float("nan")
            if mode == "metrics+traces":
                await asyncio.sleep(2.5)  # the last batch leaves within OTEL_BSP_SCHEDULE_DELAY
                out["batches"], out["span_bytes"] = collector.batches, collector.bytes
        finally:
            await bench.stop()
            await collector.close()
    line = f"  {mode:>15}: {out['cpu_ms']:.2f} CPU ms a turn (supervisor+service+bridge), latency p50 {out['p50_ms']:.0f} ms " \
           f"p95 {out['p95_ms']:.0f} ms"
    if "scrapes_during" in out:
        line += f", {out['scrapes_during']} scrapes meanwhile"
    if "batches" in out:
        line += f", {out['batches']} span batches ({out['span_bytes'] / 1024:.0f} kB)"
    print(line, flush=True)
    return out


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=300)
    p.add_argument("--warm", type=int, default=30)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--lanes", type=int, default=10_000)
    p.add_argument("--lanes-concurrency", type=int, default=200)
    p.add_argument("--scrapes", type=int, default=200)
    p.add_argument("--reply-timeout", type=float, default=60.0)
    p.add_argument("--nofile", type=int, default=4096)
    args = p.parse_args()
    print(f"bench metrics: {args.turns} turns per tree, {args.concurrency} at a time; then {args.lanes} lanes", flush=True)
    got = {mode: await tree(args, mode) for mode in MODES}
    off, met, tra = got["off"], got["metrics"], got["metrics+traces"]
    empty, full = met["empty"], met["full"]
    print(f"  per turn, CPU: metrics {met['cpu_ms'] / off['cpu_ms']:.2f}x off, metrics+traces {tra['cpu_ms'] / off['cpu_ms']:.2f}x off; "
          f"latency p50: {met['p50_ms'] / off['p50_ms']:.2f}x and {tra['p50_ms'] / off['p50_ms']:.2f}x")
    print(f"  scrape with no lane: {empty['bytes']} B, p50 {empty['p50_ms']:.2f} ms, p95 {empty['p95_ms']:.2f} ms, "
          f"supervisor {empty['cpu_ms']:.2f} CPU ms")
    print(f"  scrape at {met['lanes_live']:.0f} live lanes ({met['lanes_s']:.0f} s to make them): {full['bytes']} B "
          f"({full['bytes'] / empty['bytes']:.2f}x), p50 {full['p50_ms']:.2f} ms, p95 {full['p95_ms']:.2f} ms, "
          f"supervisor {full['cpu_ms']:.2f} CPU ms")
    print(f"bench metrics: turns={args.turns} cpu_ms_off={off['cpu_ms']:.2f} cpu_ms_metrics={met['cpu_ms']:.2f} "
          f"cpu_ms_traces={tra['cpu_ms']:.2f} metrics_vs_off={met['cpu_ms'] / off['cpu_ms']:.2f} "
          f"traces_vs_off={tra['cpu_ms'] / off['cpu_ms']:.2f} p50_ms_off={off['p50_ms']:.0f} "
          f"p50_vs_off_metrics={met['p50_ms'] / off['p50_ms']:.2f} p50_vs_off_traces={tra['p50_ms'] / off['p50_ms']:.2f} "
          f"lanes={met['lanes_live']:.0f} exposition_bytes={full['bytes']} exposition_vs_empty={full['bytes'] / empty['bytes']:.2f} "
          f"scrape_ms_p50={full['p50_ms']:.2f} scrape_ms_p95={full['p95_ms']:.2f} "
          f"supervisor_cpu_ms_per_scrape={full['cpu_ms']:.2f} spans={tra['batches']}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
