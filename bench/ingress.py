"""Ingress latency: fake gateway MESSAGE_CREATE → first byte of the model request at the fake Anthropic.

Everything real except Discord and Anthropic: ``python -m bridge`` and
``python -m service`` run as processes; the fake Discord (gateway + REST) and
the fake Anthropic server run in this process, so every timestamp is read on
one clock. Lanes are warmed with one turn per room first (a cold lane also
fetches history), then 500 messages go out across 50 rooms, one at a time,
each waiting for its reply, so each is a fresh turn on an idle warm lane.

Side by side in the same run, with the same bridge process: the bridge alone
against a scripted service double (gateway → ``turn.submit`` arrival, and
the bridge's delivery overhead: result sent → reply POST at Discord).

Run: ``.venv/bin/python bench/ingress.py``
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from clankie import ipc, paths
from clankie.protocol import Record, TurnResult, TurnSubmit
from clankie.testing.fake_anthropic import FakeAnthropic
from clankie.testing.fake_discord import FakeDiscord

ROOMS = 50
PER_ROOM = 10
GUILD = "100"
PERSON = "500000000000000001"


class StampedAnthropic(FakeAnthropic):
    """The fake Anthropic, stamping when each request's handler starts (headers in, body not yet read)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.monotonic())
        return await super()._messages(request)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, ms: list[float]) -> str:
    return (f"{name:<44} n={len(ms):4d}  p50={pct(ms, 0.5):7.2f} ms  p99={pct(ms, 0.99):7.2f} ms  "
            f"mean={statistics.fmean(ms):7.2f} ms")


async def spawn(module: str, env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    fh = open(log, "wb")
    return await asyncio.create_subprocess_exec(sys.executable, "-m", module, env=env, stdout=fh, stderr=fh)


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def drive(fake: FakeDiscord, rooms: list[str], per_room: int, arrived: Callable[[], int]) -> list[float]:
    """Send messages round-robin; for each, time until ``arrived()`` grows, then wait for its reply."""
    out: list[float] = []
    for j in range(per_room):
        for room in rooms:
            before_arrivals, before_posts = arrived(), len(fake.posts)
            t0 = time.monotonic()
            await fake.message(room, f"message {j} in {room}", author_id=PERSON)
            await fake.wait_for(lambda: arrived() > before_arrivals, timeout=30)  # noqa: B023 (awaited within the iteration)
            out.append(t0)
            await fake.wait_for(lambda: len(fake.posts) > before_posts, timeout=30)  # noqa: B023 (awaited within the iteration)
    return out


async def bridge_alone(base_env: dict[str, str], fake: FakeDiscord, rooms: list[str], tmp: Path) -> tuple[list[float], list[float]]:
    """Gateway → turn.submit arrival, and result sent → reply POST, against a scripted service double."""
    submits: list[float] = []
    results: list[float] = []

    async def handler(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        assert isinstance(params, TurnSubmit)
        submits.append(time.monotonic())
        results.append(time.monotonic())
        return TurnResult.settled("ok", turn_id="t")

    settings_rt = Path(base_env["CLANKIE_RUNTIME_DIR"])
    server = await ipc.serve(paths.socket_path(settings_rt, "service"), "service", handler)
    bridge = await spawn("bridge", base_env, tmp / "bridge-a.log")
    try:
        await fake.wait_for(lambda: fake.readies >= 1, timeout=30)
        await drive(fake, rooms, 1, lambda: len(submits))  # warm-up
        n0, p0 = len(submits), len(fake.posts)
        starts = await drive(fake, rooms, PER_ROOM, lambda: len(submits))
        ingress = [(s - t) * 1000 for t, s in zip(starts, submits[n0:], strict=True)]
        post_times = [c.at for c in fake.calls if c.route == "POST /channels/{id}/messages"][p0:]
        egress = [(p - r) * 1000 for r, p in zip(results[n0:], post_times, strict=True)]
        return ingress, egress
    finally:
        await stop(bridge)
        await server.close()


async def full_path(base_env: dict[str, str], fake: FakeDiscord, rooms: list[str], tmp: Path) -> list[float] | None:
    """Gateway → first byte of the model request, through the real bridge and the real service."""
    anthropic = StampedAnthropic()
    await anthropic.start()
    env = {**base_env, "ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": anthropic.base_url}
    service = await spawn("service", env, tmp / "service.log")
    bridge = await spawn("bridge", env, tmp / "bridge-b.log")
    try:
        await fake.wait_for(lambda: fake.readies >= 2, timeout=30)
        await drive(fake, rooms, 1, lambda: len(anthropic.arrivals))  # cold turns: lanes become warm
        n0 = len(anthropic.arrivals)
        starts = await drive(fake, rooms, PER_ROOM, lambda: len(anthropic.arrivals))
        firsts = []
        # every turn makes exactly one model request here (plain text answers), so they pair up in order
        for t, a in zip(starts, anthropic.arrivals[n0:], strict=True):
            firsts.append((a - t) * 1000)
        return firsts
    except (TimeoutError, ValueError) as exc:
        print(f"full path did not complete ({type(exc).__name__}); see {tmp}/service.log", file=sys.stderr)
        return None
    finally:
        await stop(bridge)
        await stop(service)
        await anthropic.close()


async def main() -> int:
    rooms = [str(1000 + i) for i in range(ROOMS)]
    fake = FakeDiscord(guilds={GUILD: rooms})
    await fake.start()
    with tempfile.TemporaryDirectory(prefix="ck-bench-", dir="/tmp") as d:
        tmp = Path(d)
        base_env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp),
            "CLANKIE_STATE": str(tmp / "state"),
            "CLANKIE_RUNTIME_DIR": str(tmp / "run"),
            "DISCORD_TOKEN": fake.token,
            "CLANKIE_DISCORD_API_BASE": fake.api_base,
            "CLANKIE_DISCORD_GUILD_IDS": GUILD,
            "CLANKIE_LOG_LEVEL": "WARNING",
            "CLANKIE_USER_TURNS_PER_MINUTE": "0", "CLANKIE_ROOM_TURNS_PER_MINUTE": "0",  # one author speaks for the crowd
            "CLANKIE_BUDGET_USER_DAY_USD": "0", "CLANKIE_BUDGET_ROOM_DAY_USD": "0",  # ... and pays for it: no day budgets
        }
        paths.ensure_private_dir(tmp / "run")
        try:
            ingress, egress = await bridge_alone(base_env, fake, rooms, tmp)
            full = await full_path(base_env, fake, rooms, tmp)
        finally:
            await fake.close()
    print(f"ingress bench: {ROOMS} rooms x {PER_ROOM} messages on warm lanes, bridge and service as real processes")
    print(summary("bridge alone: gateway -> turn.submit at service", ingress))
    print(summary("bridge alone: result sent -> reply POST at Discord", egress))
    if full is None:
        print("bench ingress: p50_ms=nan p99_ms=nan messages=0 (full path failed)")
        return 1
    print(summary("full path: gateway -> model request at Anthropic", full))
    share = pct(ingress, 0.5) / pct(full, 0.5)
    print(f"bridge share of the full ingress path (p50): {share:.2f}x "
          f"(service side adds {pct(full, 0.5) - pct(ingress, 0.5):.2f} ms at p50)")
    print(f"p99 target 10 ms: {'met' if pct(full, 0.99) < 10 else 'NOT met'}")
    print(f"bench ingress: p50_ms={pct(full, 0.5):.2f} p99_ms={pct(full, 0.99):.2f} messages={len(full)} "
          f"bridge_p50_ms={pct(ingress, 0.5):.2f} reply_overhead_p50_ms={pct(egress, 0.5):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
