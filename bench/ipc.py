"""bench ipc: msgpack-RPC over a Unix socket vs a raw Unix echo (the floor) vs JSON over HTTP.

Each transport carries the same request (a realistic ``turn.submit``) and the
same reply, one round trip at a time, on one event loop. The raw echo sends
the same bytes back without decoding anything: no protocol can beat it. The
HTTP leg is aiohttp server + client on loopback with JSON bodies, which is
what the original TypeScript system used between its processes.

Run: ``python bench/ipc.py [--n 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from clankie import framing, ipc, protocol
from clankie.protocol import TurnResult, TurnSubmit

REQUEST = TurnSubmit.model_validate(
    {
        "delivery_id": "1234567890123456789",
        "room": {"guild_id": "111111111111111111", "channel_id": "222222222222222222", "name": "general"},
        "trigger": {"message_id": "333333333333333333", "author": {"id": "444444444444444444", "name": "someone"}, "text": "what time is the lobby tonight? " * 3},
    }
)
REPLY = TurnResult(outcome="settled", turn_id="t-1", text="Eight, same lobby as last week. " * 3)


async def measure(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(min(200, n // 10)):
        await call()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await call()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


async def bench_rpc(path: Path, n: int) -> list[float]:
    async def handler(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record:
        return REPLY

    async with ipc.Server(path, "service", handler):
        conn = await ipc.connect(path, "bridge")
        try:
            return await measure(n, lambda: conn.request("turn.submit", REQUEST))
        finally:
            await conn.aclose()


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _Collector(asyncio.Protocol):
    """Client side of the echo: completes a future once a whole frame is back."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.got = 0
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= self.size and self.waiter is not None:
            self.got -= self.size
            self.waiter.set_result(None)


async def bench_raw(path: Path, n: int) -> list[float]:
    """The floor: the same frame bytes echoed back by a bare asyncio protocol, nothing decoded."""
    frame = framing.encode(protocol.request(1, "turn.submit", REQUEST.to_wire()))
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(_Echo, os.fspath(path))
    transport, collector = await loop.create_unix_connection(lambda: _Collector(len(frame)), os.fspath(path))

    async def call() -> None:
        collector.waiter = loop.create_future()
        transport.write(frame)
        await collector.waiter

    try:
        return await measure(n, call)
    finally:
        transport.close()
        server.close()
        await server.wait_closed()
        path.unlink(missing_ok=True)


async def bench_http(n: int) -> list[float]:
    async def submit(request: web.Request) -> web.Response:
        TurnSubmit.model_validate(await request.json())
        return web.json_response(REPLY.to_wire())

    app = web.Application()
    app.router.add_post("/turn", submit)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    body = json.dumps(REQUEST.to_wire())
    async with aiohttp.ClientSession() as session:

        async def call() -> object:
            async with session.post(f"http://127.0.0.1:{port}/turn", data=body, headers={"Content-Type": "application/json"}) as resp:
                return TurnResult.model_validate(await resp.json())

        try:
            return await measure(n, call)
        finally:
            await runner.cleanup()


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ckb-") as d:
        rpc = await bench_rpc(Path(d) / "rpc.sock", n)
        raw = await bench_raw(Path(d) / "raw.sock", n)
    http = await bench_http(max(500, n // 3))
    rows = [("msgpack-rpc (unix)", rpc), ("raw echo (unix)", raw), ("json/http (loopback)", http)]
    print(f"{'transport':24} {'rt/s':>9} {'p50 µs':>9} {'p99 µs':>9}")
    for name, s in rows:
        print(f"{name:24} {1e6 / statistics.mean(s):9.0f} {pct(s, .5):9.1f} {pct(s, .99):9.1f}")
    ratio_raw = pct(rpc, 0.5) / pct(raw, 0.5)
    speedup = pct(http, 0.5) / pct(rpc, 0.5)
    print(f"msgpack-rpc p50 is {ratio_raw:.2f}x the raw echo floor and {speedup:.1f}x faster than JSON/HTTP")
    print(
        f"bench ipc: rtt_p50_us={pct(rpc, .5):.1f} rtt_p99_us={pct(rpc, .99):.1f} "
        f"ratio_vs_raw={ratio_raw:.2f} speedup_vs_http={speedup:.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="round trips per transport")
    asyncio.run(main(parser.parse_args().n))
