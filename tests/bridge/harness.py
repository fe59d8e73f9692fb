"""End-to-end harness: fake Discord ⇄ real discord.py bridge ⇄ a scripted service double."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.app import BridgeApp
from bridge.delivery import RetryPolicy
from clankie import ipc, paths
from clankie.clock import Clock
from clankie.jsonl import read_lines
from clankie.protocol import Record, TurnResult, TurnSubmit
from clankie.settings import load
from clankie.testing.fake_discord import FakeDiscord
from tests.polling import until

GUILD, CHAN, CHAN2 = "100", "101", "102"
OTHER_GUILD, OTHER_CHAN = "200", "201"
OWNER = "900000000000000002"
PERSON = "500000000000000001"

Script = Callable[[ipc.Connection, TurnSubmit], Awaitable[TurnResult]]


async def settled_echo(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
    return TurnResult.settled(f"heard you ({len(sub.trigger.text)})", turn_id=f"turn-{sub.delivery_id}")


class FakeService:
    """A real ``ipc.serve`` server on service.sock whose turn results are scripted by the test."""

    def __init__(self, path: Path, script: Script = settled_echo) -> None:
        self.path = path
        self.script = script
        self.submits: list[TurnSubmit] = []
        self.connections: list[ipc.Connection] = []
        self._changed = asyncio.Condition()
        self.server: ipc.Server | None = None

    async def start(self) -> None:
        self.server = await ipc.serve(self.path, "service", self._handle, on_connect=self._on_connect)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def _on_connect(self, conn: ipc.Connection) -> None:
        self.connections.append(conn)
        await self._poke()

    async def _poke(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        assert isinstance(params, TurnSubmit)
        self.submits.append(params)
        await self._poke()
        return await self.script(conn, params)

    async def wait_submits(self, n: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.submits) >= n)


@dataclass
class Harness:
    fake: FakeDiscord
    service: FakeService
    app: BridgeApp
    state_dir: Path
    task: asyncio.Task[None] | None = None  # the running BridgeApp.run()

    def receipts(self) -> list[dict[str, Any]]:
        return read_lines(self.state_dir / "receipts" / "bridge.jsonl")

    def outcomes(self, delivery_id: str) -> list[str]:
        return [r["outcome"] for r in self.receipts() if r["delivery_id"] == delivery_id]

    async def until(self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        """Wait for a condition on the fake, the service or the bridge: looked at again on every change the fake
        Discord sees, and every 20 ms for the service's and the bridge's own state (:func:`tests.polling.until`)."""

        async def change(step: float) -> None:
            await self.fake.wait_for(predicate, timeout=step)

        await until(predicate, timeout, what, step=0.02, nap=change)


@contextlib.asynccontextmanager
async def running(
    env: dict[str, str],
    *,
    overrides: dict[str, str] | None = None,
    script: Script = settled_echo,
    clock: Clock | None = None,
    fake: FakeDiscord | None = None,
    wait_connected: bool = True,
) -> AsyncIterator[Harness]:
    fake = fake or FakeDiscord(guilds={GUILD: [CHAN, CHAN2], OTHER_GUILD: [OTHER_CHAN]})
    await fake.start()
    full = {
        **env,
        "DISCORD_TOKEN": fake.token,
        "CLANKIE_DISCORD_API_BASE": fake.api_base,
        "CLANKIE_DISCORD_GUILD_IDS": GUILD,
        # one person speaks many times a minute here: pacing is off unless a test is about it (test_fairness)
        "CLANKIE_USER_TURNS_PER_MINUTE": "0",
        "CLANKIE_ROOM_TURNS_PER_MINUTE": "0",
        **(overrides or {}),
    }
    settings = load(full)
    paths.ensure_private_dir(settings.runtime_dir)
    service = FakeService(paths.socket_path(settings.runtime_dir, "service"), script)
    await service.start()
    app = BridgeApp(settings, clock=clock, retry=RetryPolicy(attempts=5, base=0.01, cap=0.05), guild_ready_timeout=0.05)
    task = asyncio.create_task(app.run())
    h = Harness(fake, service, app, settings.state_dir, task)
    try:
        if wait_connected:
            await h.until(lambda: (app.discord_status == "connected" and app.bridge.link.status == "connected") or task.done())
            if task.done():
                task.result()
        yield h
    finally:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=15)
        if not done:  # a bridge that ignores its cancellation: say where everything is stuck, then fail
            for stuck in asyncio.all_tasks():
                stuck.print_stack(limit=8)
            raise AssertionError("the bridge app did not stop within 15 s of its cancellation")
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await service.close()
        await fake.close()
