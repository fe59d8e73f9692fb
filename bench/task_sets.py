"""bench task_sets: issue 28's shared helpers against the hand-rolled code they replaced, on the paths they sit on.

Two legs, each side by side with the alternative in one run:

* **handlers** (cross-process, the deployment shape): a real ``clankie.ipc``
  server in a child process answers ``turn.submit``; each request's handler
  runs in a task held by the connection's :class:`clankie.tasks.TaskSet`, or,
  in a second server process, in the hand-rolled set it replaced (create,
  add, ``add_done_callback(discard)``). The client measures round trips one
  at a time (p50, p99) and throughput with 64 requests in flight, rounds of
  the two servers interleaved so drift on a shared machine hits both alike.
* **child log** (in-process): lines of a chatty child written to its log
  file through :meth:`clankie.appender.Appender.write` (a lock, a counter, the
  appender's cut-back on failure) against the held descriptor and
  ``append_all`` the supervisor used before; and one unheld line
  (:func:`clankie.appender.append_once`) against the inline open, append,
  close the lane logs and the ledger used.

Run: ``python bench/task_sets.py [--n 3000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from clankie import ipc, protocol
from clankie.appender import Appender, append_once
from clankie.connection import Connection
from clankie.jsonl import append_all, encode_line
from clankie.protocol import TurnResult, TurnSubmit

KINDS = ("taskset", "handrolled")
WINDOW = 64
REQUEST = TurnSubmit.model_validate(
    {
        "delivery_id": "1234567890123456789",
        "room": {"guild_id": "111111111111111111", "channel_id": "222222222222222222", "name": "general"},
        "trigger": {
            "message_id": "333333333333333333",
            "author": {"id": "444444444444444444", "name": "someone"},
            "text": "what time is the lobby tonight?",
        },
    }
)
REPLY = TurnResult.model_validate({"outcome": "settled", "turn_id": "t-1", "text": "Eight, same lobby as last week."})
LINE = b"2026-12-05T06:00:00.000Z chatty child line with some ordinary words in it, 96 bytes long....\n"


# ----------------------------------------------------------------- the two servers


async def _handler(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record:
    await asyncio.sleep(0)  # a real handler awaits something: its task is held while it runs
    return REPLY


def _hand_rolled_spawn(self: Connection, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """The connection's spawn before issue 28: a plain set, a discard callback, nothing logged."""
    held: set[asyncio.Task[None]] = self.__dict__.setdefault("_plain", set())
    task: asyncio.Task[None] = asyncio.Task(coro, loop=self._loop)
    if not task.done():
        held.add(task)
        task.add_done_callback(held.discard)
    return task


def _hand_rolled_at_cap(self: Connection, method: str) -> bool:
    return len(self.__dict__.get("_plain", ())) >= self.max_inflight


async def serve_forever(kind: str, where: Path) -> None:
    if kind == "handrolled":
        Connection._spawn = _hand_rolled_spawn  # type: ignore[method-assign]  # the alternative, in its own process
        Connection._at_cap = _hand_rolled_at_cap  # type: ignore[method-assign]  # as above
    async with ipc.Server(where, "service", _handler):
        print(os.fspath(where), flush=True)
        await asyncio.Event().wait()


# ----------------------------------------------------------------- handlers leg


async def _round(address: str, n: int) -> tuple[list[float], float]:
    conn = await ipc.connect(Path(address), "bridge")
    try:
        for _ in range(min(200, n // 10)):
            await conn.request("turn.submit", REQUEST)
        rtts = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await conn.request("turn.submit", REQUEST)
            rtts.append((time.perf_counter_ns() - t0) / 1000)
        batches = max(1, n // WINDOW)
        start = time.perf_counter()
        for _ in range(batches):
            await asyncio.gather(*(conn.request("turn.submit", REQUEST) for _ in range(WINDOW)))
        return rtts, batches * WINDOW / (time.perf_counter() - start)
    finally:
        await conn.aclose()


async def handlers(n: int, rounds: int, d: Path) -> dict[str, tuple[float, float, float]]:
    children = {}
    addresses = {}
    try:
        for kind in KINDS:
            children[kind] = subprocess.Popen(
                [sys.executable, __file__, "--serve", kind, "--where", os.fspath(d / f"{kind}.sock")],
                stdout=subprocess.PIPE, text=True,
            )
            stdout = children[kind].stdout
            assert stdout is not None
            addresses[kind] = (await asyncio.to_thread(stdout.readline)).strip()
        rtts: dict[str, list[float]] = {k: [] for k in KINDS}
        rates: dict[str, list[float]] = {k: [] for k in KINDS}
        for r in range(rounds):
            for kind in KINDS if r % 2 == 0 else reversed(KINDS):
                samples, rate = await _round(addresses[kind], n)
                rtts[kind].extend(samples)
                rates[kind].append(rate)
    finally:
        for child in children.values():
            child.terminate()
            child.wait(10)
    return {k: (pct(rtts[k], .5), pct(rtts[k], .99), statistics.median(rates[k])) for k in KINDS}


# ----------------------------------------------------------------- child log leg


def _held_appender(path: Path, lines: int) -> float:
    log = Appender(path, mend=False)
    t0 = time.perf_counter()
    for _ in range(lines):
        log.write(LINE)
    elapsed = time.perf_counter() - t0
    log.close()
    return lines / elapsed


def _held_raw(path: Path, lines: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    t0 = time.perf_counter()
    for _ in range(lines):
        append_all(fd, LINE)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    return lines / elapsed


def _unheld_once(path: Path, lines: int) -> float:
    data = encode_line({"at": 1.0, "kind": "heard", "text": "what time is the lobby tonight?", "targetId": "c"})
    t0 = time.perf_counter()
    for _ in range(lines):
        append_once(path, data)
    return lines / (time.perf_counter() - t0)


def _unheld_inline(path: Path, lines: int) -> float:
    data = encode_line({"at": 1.0, "kind": "heard", "text": "what time is the lobby tonight?", "targetId": "c"})
    t0 = time.perf_counter()
    for _ in range(lines):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            append_all(fd, data)
        finally:
            os.close(fd)
    return lines / (time.perf_counter() - t0)


def writers(lines: int, rounds: int, d: Path) -> dict[str, float]:
    legs = {"appender.write": _held_appender, "held fd": _held_raw, "append_once": _unheld_once, "inline": _unheld_inline}
    rates: dict[str, list[float]] = {k: [] for k in legs}
    for r in range(rounds):
        for name, leg in legs.items() if r % 2 == 0 else reversed(legs.items()):
            path = d / f"{name.replace(' ', '_')}-{r}.log"
            rates[name].append(leg(path, lines))
            path.unlink()
    return {k: statistics.median(v) for k, v in rates.items()}


# ----------------------------------------------------------------- report


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(n: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ckts-") as tmp:
        d = Path(tmp)
        h = await handlers(n, rounds, d)
        w = writers(20 * n, rounds, d)
    print(f"{'handlers (cross-process)':26} {'p50 µs':>8} {'p99 µs':>8} {f'req/s @{WINDOW}':>12}")
    for kind in KINDS:
        p50, p99, rate = h[kind]
        print(f"{kind:26} {p50:8.1f} {p99:8.1f} {rate:12.0f}")
    print(f"{'writer (in-process)':26} {'lines/s':>12}")
    for name, rate in w.items():
        print(f"{name:26} {rate:12.0f}")
    rtt_ratio = h["taskset"][0] / h["handrolled"][0]
    p99_ratio = h["taskset"][1] / h["handrolled"][1]
    rate_ratio = h["taskset"][2] / h["handrolled"][2]
    log_ratio = w["appender.write"] / w["held fd"]
    once_ratio = w["append_once"] / w["inline"]
    print(f"TaskSet vs hand-rolled: p50 {rtt_ratio:.3f}x, p99 {p99_ratio:.3f}x, throughput {rate_ratio:.3f}x; "
          f"child log through the Appender {log_ratio:.3f}x the raw held fd's lines/s; append_once {once_ratio:.3f}x inline")
    print(f"bench task_sets: p50_ratio={rtt_ratio:.3f} p99_ratio={p99_ratio:.3f} throughput_ratio={rate_ratio:.3f} "
          f"taskset_p50_us={h['taskset'][0]:.1f} handrolled_p50_us={h['handrolled'][0]:.1f} "
          f"childlog_ratio={log_ratio:.3f} append_once_ratio={once_ratio:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="round trips per server per round (writers: 20x lines)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each side")
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--where", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve_forever(args.serve, args.where))
    else:
        asyncio.run(main(args.n, args.rounds))
