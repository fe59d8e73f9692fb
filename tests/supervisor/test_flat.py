"""The supervisor keeps nothing per message: its memory over thousands of lines, heartbeats and control calls is flat (issue 39)."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import json
import os
import socket
import sys
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from clankie import ipc
from clankie import settings as settings_mod
from clankie.clock import SystemClock
from clankie.protocol import Empty, LanesReply, LogsRequest, StatusReply
from supervisor.control import Control
from supervisor.forward import StderrQueue
from supervisor.spec import ChildSpec
from supervisor.tree import Tree
from tests.polling import until, until_probe
from tests.supervisor.harness import FIXTURE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROUNDS = 4
BEATS = 500  # heartbeats (each with a metrics report) per round, all children together
LINES = 500  # forwarded lines per round
CALLS = 75  # control calls per round: status, lanes (proxied to the service), logs; and a scrape of /metrics each
LANES = 20
TREES = 300  # session trees the captain starts per round (a 6,000-token window starts one every few turns)
LONG = 5_000  # entries a round adds to one long room's live tree (a lane that has not compacted yet)
LIVE_BOUND = 256 * 1024
"""Bytes the supervisor's live allocations may differ by between the first round and any later one, whatever the count."""
PEAK_BOUND = 1024 * 1024
"""Bytes a later round's peak may exceed the first round's by (more room: what is in flight at once varies with the
machine's load; re-reading the whole history made it grow by megabytes a round)."""


@dataclass
class Round:
    live: int  # traced bytes after a collection, at the round's end
    peak: int  # the most traced at once during the round, above the live bytes at its start


@pytest.fixture
def devnull() -> Iterator[int]:
    fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    yield fd
    os.close(fd)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(day: str, k: int) -> dict[str, object]:
    return {"type": "message", "id": f"m{k}", "timestamp": f"{day}T12:00:00.000+00:00",
            "message": {"role": "assistant", "content": []}, "usage": {"input": 3, "cache_read": 40, "output": 9}}


def _grow_history(captain: Path, day: str, round_no: int) -> None:
    """The service's history grows: lanes start new session trees, and one long room's live tree grows.

    Plain strings for paths: a Path interns each part of its name, and thousands of them would churn that table here.
    """
    stamp = day.replace("-", "")
    rooms = os.path.join(captain, "rooms")
    for n in range(TREES):
        lane = os.path.join(rooms, f"discord%3Aclankie%3Adiscord%3A1%3A{n % LANES}")
        os.makedirs(lane, exist_ok=True)
        head = {"type": "session", "id": f"s{n}", "timestamp": f"{day}T00:00:00.000+00:00"}
        with open(os.path.join(lane, f"{stamp}T{round_no:02d}{n:06d}Z_{n:08x}.jsonl"), "w", encoding="utf-8") as f:
            f.write(json.dumps(head) + "\n" + json.dumps(_entry(day, n)) + "\n")
    long_room = os.path.join(rooms, "discord%3Aclankie%3Adiscord%3A1%3Along")
    os.makedirs(long_room, exist_ok=True)
    with open(os.path.join(long_room, f"{stamp}T000000Z_long.jsonl"), "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(_entry(day, k)) + "\n" for k in range(LONG)))


def test_the_supervisors_memory_is_flat_over_thousands_of_lines_heartbeats_and_control_calls(
    env: dict[str, str], runtime_dir: Path, devnull: int
) -> None:
    """Four rounds of 500 forwarded lines, 500 heartbeats with metrics reports and 75 control calls (status, lanes,
    logs) and scrapes each, while the service's history grows by 300 session trees and 5,000 entries of one long
    room's tree a round: the live allocations after a collection stay within 256 kB of the first round's, and the most
    held at once within 1 MB."""
    port = _free_port()
    env = {**env, "CLANKIE_METRICS_LISTEN": f"127.0.0.1:{port}", "PYTHONPATH": str(FIXTURE.parents[3])}
    settings = settings_mod.load(env)
    argv = (sys.executable, str(FIXTURE), "--metrics", "--chatter", "0.01")
    specs = [ChildSpec(name="service", argv=argv, heartbeat_seconds=0.02, stop_timeout=1.0, proxy=True),
             ChildSpec(name="bridge", argv=argv, heartbeat_seconds=0.02, stop_timeout=1.0)]
    sock = runtime_dir / "control.sock"
    captain = settings.state_dir / "captain"
    clock = SystemClock()

    async def main() -> list[Round]:
        stderr = StderrQueue(devnull)  # the children's lines are forwarded as under a terminal, to /dev/null
        tree = Tree(settings, specs, clock=clock, env=env, subreaper=False, stderr=stderr)
        control = Control(tree)
        await control.start(sock)
        stop = asyncio.Event()
        running = asyncio.create_task(tree.run(stop))
        calls = 0

        def beats() -> int:
            return sum(c.last_heartbeat.seq for c in tree.children.values() if c.last_heartbeat is not None)

        def lines() -> int:
            return sum(c.log_path.stat().st_size for c in tree.children.values() if c.log_path.exists()) // 200

        async def call(http: aiohttp.ClientSession) -> None:
            nonlocal calls
            conn = await ipc.connect(sock, "test", timeout=30)
            try:
                method = ("status", "lanes", "logs")[calls % 3]
                reply = await conn.request(method, LogsRequest(name="bridge", lines=5) if method == "logs" else Empty(), timeout=30)
                assert isinstance(reply, StatusReply | LanesReply) or method == "logs"
            finally:
                await conn.aclose()
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 200
                await r.read()
            calls += 1

        async with aiohttp.ClientSession() as http:
            try:
                await until(lambda: beats() > 0 and all(c.link is not None for c in tree.children.values()), 60, "both children linked")
                day = dt.datetime.fromtimestamp(clock.wall(), dt.UTC).date().isoformat()  # the day status counts
                rounds: list[Round] = []
                for r in range(ROUNDS + 1):  # round 0 warms up (imports, the first scrape, pools); 1.. are measured
                    _grow_history(captain, day, r)
                    target = (beats() + BEATS, lines() + LINES, calls + CALLS)

                    async def one_call(target: tuple[int, int, int] = target) -> bool:
                        await call(http)
                        return calls >= target[2]

                    def beaten_and_written(target: tuple[int, int, int] = target) -> bool:
                        return beats() >= target[0] and lines() >= target[1]

                    def progress(r: int = r) -> str:
                        return f"round {r}: {beats()} beats, {lines()} lines, {calls} calls"

                    gc.collect()
                    start, _ = tracemalloc.get_traced_memory()
                    tracemalloc.reset_peak()
                    # the round's calls back to back, then the rest of its beats and lines (more calls while they
                    # came would be more work in some rounds than in others, and CPU spent on nothing measured)
                    await until_probe(one_call, 200, progress, step=0)
                    await until(beaten_and_written, 200, progress, step=0.01)
                    _, peak = tracemalloc.get_traced_memory()
                    gc.collect()
                    live, _ = tracemalloc.get_traced_memory()
                    if r:
                        rounds.append(Round(live=live, peak=peak - start))
                        _check(rounds)  # at once: a supervisor that re-reads its history only gets slower
                return rounds
            finally:
                stop.set()
                await running
                await control.close()
                stderr.close()

    tracemalloc.start()
    try:
        rounds = asyncio.run(main())
    finally:
        tracemalloc.stop()
    assert len(rounds) == ROUNDS


def _check(rounds: list[Round]) -> None:
    first = rounds[0]
    grown = [(r.live - first.live, r.peak - first.peak) for r in rounds[1:]]
    assert all(live < LIVE_BOUND for live, _ in grown), f"live allocations grew by {[g[0] for g in grown]} bytes after round 1"
    assert all(peak < PEAK_BOUND for _, peak in grown), f"a round's peak grew by {[g[1] for g in grown]} bytes over round 1's"
