"""bench ipc: msgpack-RPC over a Unix socket vs a raw Unix echo (the floor) vs JSON over HTTP.

Each transport carries the same request (a realistic ``turn.submit``) and the
same reply, one round trip at a time. The raw echo sends the same frame bytes
back from a bare asyncio protocol without decoding anything: no protocol can
beat it. The HTTP leg is an aiohttp server and client on loopback with JSON
bodies validated into the same records, which is what the original
TypeScript system used between its processes.

Two shapes, printed side by side:

* **cross-process** (the deployment shape: bridge and service are separate
  processes): each server runs in a child process, the client here. This is
  the shape the summary line reports.
* **in-process**: server and client share one event loop, so every byte of
  Python work on both sides is on one core and in the round trip.

Run: ``python bench/ipc.py [--n 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web

from clankie import framing, ipc, protocol
from clankie.protocol import TurnResult, TurnSubmit

REQUEST = TurnSubmit.model_validate(
    {
        "delivery_id": "1234567890123456789",
        "room": {"guild_id": "111111111111111111", "channel_id": "222222222222222222", "name": "general"},
        "trigger": {
            "message_id": "333333333333333333",
            "author": {"id": "444444444444444444", "name": "someone"},
            "text": "what time is the lobby tonight? " * 3,
        },
    }
)
REPLY = TurnResult.settled("Eight, same lobby as last week. " * 3, turn_id="t-1")
FRAME = framing.encode(protocol.request(1, "turn.submit", REQUEST.to_wire()))
KINDS = ("rpc", "raw", "http")
Call = Callable[[], Awaitable[object]]


# ----------------------------------------------------------------- servers


async def _rpc_handler(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record:
    return REPLY


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def _http_submit(request: web.Request) -> web.Response:
    TurnSubmit.model_validate(await request.json())
    return web.json_response(REPLY.to_wire())


@asynccontextmanager
async def serve(kind: str, where: Path) -> AsyncIterator[str]:
    """Run one server; yields its address (a socket path, or a loopback URL)."""
    if kind == "rpc":
        async with ipc.Server(where, "service", _rpc_handler):
            yield os.fspath(where)
    elif kind == "raw":
        server = await asyncio.get_running_loop().create_unix_server(_Echo, os.fspath(where))
        try:
            yield os.fspath(where)
        finally:
            server.close()
            where.unlink(missing_ok=True)
    else:
        app = web.Application()
        app.router.add_post("/turn", _http_submit)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}/turn"
        finally:
            await runner.cleanup()


# ----------------------------------------------------------------- clients


class _Collector(asyncio.Protocol):
    """Client side of the echo: completes a future once a whole frame is back."""

    def __init__(self) -> None:
        self.got = 0
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= len(FRAME) and self.waiter is not None:
            self.got -= len(FRAME)
            self.waiter.set_result(None)


@asynccontextmanager
async def client(kind: str, address: str) -> AsyncIterator[Call]:
    loop = asyncio.get_running_loop()
    if kind == "rpc":
        conn = await ipc.connect(Path(address), "bridge")
        try:
            yield lambda: conn.request("turn.submit", REQUEST)
        finally:
            await conn.aclose()
    elif kind == "raw":
        transport, collector = await loop.create_unix_connection(_Collector, address)

        async def echo() -> None:
            collector.waiter = loop.create_future()
            transport.write(FRAME)
            await collector.waiter

        try:
            yield echo
        finally:
            transport.close()
    else:
        body = json.dumps(REQUEST.to_wire())
        async with aiohttp.ClientSession() as session:

            async def post() -> object:
                async with session.post(address, data=body, headers={"Content-Type": "application/json"}) as resp:
                    return TurnResult.model_validate(await resp.json())

            yield post


async def measure(n: int, call: Call) -> list[float]:
    for _ in range(min(200, n // 10)):
        await call()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await call()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


async def in_process(kind: str, where: Path, n: int) -> list[float]:
    async with serve(kind, where) as address, client(kind, address) as call:
        return await measure(n, call)


async def cross_process(kind: str, where: Path, n: int) -> list[float]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--where", os.fspath(where)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        address = (await asyncio.to_thread(child.stdout.readline)).strip()
        async with client(kind, address) as call:
            return await measure(n, call)
    finally:
        child.terminate()
        child.wait(10)


async def serve_forever(kind: str, where: Path) -> None:
    async with serve(kind, where) as address:
        print(address, flush=True)
        await asyncio.Event().wait()


# ----------------------------------------------------------------- report


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(n: int) -> None:
    counts = {"rpc": n, "raw": n, "http": max(500, n // 3)}
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ckb-") as d:
        for shape, run in (("cross-process", cross_process), ("in-process", in_process)):
            for kind in KINDS:
                results[shape, kind] = await run(kind, Path(d) / f"{kind}.sock", counts[kind])
    names = {"rpc": "msgpack-rpc (unix)", "raw": "raw echo (unix)", "http": "json/http (loopback)"}
    print(f"{'shape':14} {'transport':22} {'rt/s':>8} {'p50 µs':>8} {'p99 µs':>8}")
    for (shape, kind), s in results.items():
        print(f"{shape:14} {names[kind]:22} {1e6 / statistics.mean(s):8.0f} {pct(s, .5):8.1f} {pct(s, .99):8.1f}")
    summary = {}
    for shape in ("cross-process", "in-process"):
        rpc, raw, http = (results[shape, k] for k in KINDS)
        summary[shape] = (pct(rpc, .5), pct(rpc, .99), pct(rpc, .5) / pct(raw, .5), pct(http, .5) / pct(rpc, .5))
        print(f"{shape}: msgpack-rpc p50 is {summary[shape][2]:.2f}x the raw echo floor "
              f"and {summary[shape][3]:.1f}x faster than JSON/HTTP")
    p50, p99, ratio, speedup = summary["cross-process"]
    print(f"bench ipc: rtt_p50_us={p50:.1f} rtt_p99_us={p99:.1f} ratio_vs_raw={ratio:.2f} speedup_vs_http={speedup:.1f} "
          f"inprocess_ratio_vs_raw={summary['in-process'][2]:.2f} inprocess_speedup_vs_http={summary['in-process'][3]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="round trips per transport and shape")
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--where", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve_forever(args.serve, args.where))
    else:
        asyncio.run(main(args.n))
