"""Test helpers: the service in-process over real sockets, a client playing the bridge, the fake Anthropic."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from clankie import ipc
from clankie import settings as settings_mod
from clankie.clock import Clock
from clankie.errors import RemoteError
from clankie.paths import socket_path
from clankie.protocol import (
    Author,
    HistoryMessage,
    HistoryReply,
    HistoryRequest,
    ImageAttachment,
    Record,
    Room,
    TextUpdate,
    TextUpdateReply,
    ToolActivity,
    Trigger,
    TurnResult,
    TurnSubmit,
    TypingSignal,
)
from clankie.testing.fake_anthropic import FakeAnthropic
from service import observability
from service.app import ServiceApp
from tests.polling import until  # noqa: F401  (re-exported: the service tests import it from here)

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 45.0) -> T:
    """Run one async test body with a deadline."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


def service_env(env: dict[str, str], fake: FakeAnthropic | None, *, key: bool = True) -> dict[str, str]:
    out = dict(env)
    if fake is not None:
        out["ANTHROPIC_BASE_URL"] = fake.base_url
    if key:
        out["ANTHROPIC_API_KEY"] = "sk-test-fake"
    return out


@contextlib.asynccontextmanager
async def service(
    env: dict[str, str], fake: FakeAnthropic | None, *, key: bool = True, clock: Clock | None = None, **overrides: Any
) -> AsyncIterator[ServiceApp]:
    """The service app bound on its real socket, closed afterwards."""
    settings = settings_mod.load(service_env(env, fake, key=key), **overrides)
    observability.configure(settings)  # as the service's entry does: the records' rotations above all
    app = ServiceApp(settings, clock=clock)
    await app.start()
    try:
        yield app
    finally:
        await app.close()


def msg(
    message_id: str,
    text: str,
    *,
    guild: str | None = "1",
    channel: str = "2",
    author: str = "42",
    system: bool = False,
    unprompted: bool = False,
    images: int = 0,
) -> TurnSubmit:
    """One admitted message as the bridge would submit it (delivery id = message id)."""
    atts = tuple(ImageAttachment(url=f"https://cdn.example/{i}.png", filename=f"{i}.png") for i in range(images))
    return TurnSubmit(
        delivery_id=message_id,
        room=Room(guild_id=guild, channel_id=channel),
        trigger=Trigger(
            message_id=message_id,
            author=Author(id=author, name=f"user{author}", is_system_actor=system),
            text=text,
            unprompted=unprompted,
            attachments=atts,
            at=1_800_000_000.0,
        ),
    )


class FakeBridge:
    """A client playing the bridge: answers ``history``, records ``typing``, ``tool`` and ``text_update``."""

    def __init__(self, history: list[HistoryMessage] | None = None) -> None:
        self.history = history if history is not None else [
            HistoryMessage(id="h1", author_id="7", text="what did you think of the bracket", at=1_799_999_000.0)
        ]
        self.history_calls: list[HistoryRequest] = []
        self.typing: list[str] = []
        self.updates: list[TextUpdate] = []
        self.tools: list[ToolActivity] = []
        self.history_gate: asyncio.Event | None = None
        self.update_gate: asyncio.Event | None = None  # a text_update waits for it (set when one is asked)
        self.update_asked = asyncio.Event()
        self.refuse_updates: str | None = None
        self.history_failures = 0  # refuse this many history calls first
        self.conn: ipc.Connection | None = None
        self.typed = asyncio.Event()

    async def connect(self, app: ServiceApp | Path) -> ipc.Connection:
        path = app.socket_path if isinstance(app, ServiceApp) else app
        self.conn = await ipc.connect(path, "bridge", self.handle)
        return self.conn

    async def handle(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if method == "history":
            assert isinstance(params, HistoryRequest)
            self.history_calls.append(params)
            if self.history_failures > 0:
                self.history_failures -= 1
                raise RemoteError("discord_unavailable", "history refused")
            if self.history_gate is not None:
                await self.history_gate.wait()
            return HistoryReply(messages=tuple(self.history))
        if method == "typing":
            assert isinstance(params, TypingSignal)
            self.typing.append(params.delivery_id)
            self.typed.set()
            return None
        if method == "tool":
            assert isinstance(params, ToolActivity)
            self.tools.append(params)
            return None
        if method == "text_update":
            assert isinstance(params, TextUpdate)
            self.update_asked.set()
            if self.update_gate is not None:
                await self.update_gate.wait()
            if self.refuse_updates:
                raise RemoteError(self.refuse_updates, "refused")
            self.updates.append(params)
            return TextUpdateReply(message_id=f"u{len(self.updates)}")
        raise RemoteError("method_not_found", method)

    async def submit(self, submit: TurnSubmit) -> TurnResult:
        assert self.conn is not None
        result = await self.conn.request("turn.submit", submit)
        assert isinstance(result, TurnResult)
        return result

    def start(self, submit: TurnSubmit) -> asyncio.Task[TurnResult]:
        return asyncio.create_task(self.submit(submit))


async def gather_results(*tasks: Awaitable[TurnResult]) -> list[TurnResult]:
    return list(await asyncio.gather(*tasks))


def service_socket(runtime_dir: Path) -> Path:
    return socket_path(runtime_dir, "service")


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every text block of every user message in a recorded request body."""
    out = []
    for m in body.get("messages", []):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        else:
            out.extend(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return out
