"""A loopback fake Discord (REST + gateway websocket) for tests and local demos.

Real discord.py connects to it when ``Route.BASE`` points at :attr:`FakeDiscord.api_base`
and the gateway is taken from ``GET /gateway/bot``. It serves what the bridge
uses: login (``/users/@me``, ``/oauth2/applications/@me``), gateway
discovery (``shards``: the recommended shard count), channel messages (JSON
and multipart with files, Discord's 2,000 character limit as 50035, nonce
de-duplication with ``enforce_nonce``), typing, history, channel lookup; and a
gateway (:mod:`clankie.testing.fake_discord_gateway`, shards included) that
dispatches MESSAGE_CREATE for messages a test injects with
:meth:`FakeDiscord.message`. Faults are scripted per route
(:meth:`FakeDiscord.fail`): 429 with ``retry_after`` (and ``Via: 1.1 google``),
503, 500; a route can also be held until the test releases it
(:meth:`FakeDiscord.hold`). Every accepted RESUME's session id is in :attr:`FakeDiscord.resumed`.
Every REST call is recorded in :attr:`FakeDiscord.calls`, every
posted message in :attr:`FakeDiscord.posts` (content, reference, allowed
mentions, nonce, file bytes); :meth:`FakeDiscord.delivered_to` says which shards a
message was sent to. Responses say exactly ``Content-Type: application/json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from clankie.testing.fake_discord_gateway import FakeGateway, Shard
from clankie.testing.fake_discord_records import (
    DISCORD_EPOCH_MS,
    Call,
    Fault,
    Post,
    message_payload,
    user,
)
from clankie.testing.fake_discord_rest import RestHandlers

__all__ = ["Call", "FakeDiscord", "Post"]


class FakeDiscord(RestHandlers):
    """Start with ``await fake.start()``; stop with ``await fake.close()``."""

    def __init__(
        self,
        *,
        token: str = "fake-token",
        guilds: dict[str, list[str]] | None = None,
        bot_id: str = "900000000000000001",
        bot_name: str = "clankie",
        owner_id: str = "900000000000000002",
        premium_tier: int = 0,
        shards: int = 1,
    ) -> None:
        self.token = token
        self.bot = user(bot_id, bot_name, bot=True)
        self.owner = user(owner_id, "owner")
        self.shards = shards  # what GET /gateway/bot recommends; clients pick their own count in IDENTIFY
        self.guilds = guilds if guilds is not None else {"100": ["101", "102"]}
        self.premium_tier = premium_tier
        self.calls: list[Call] = []
        self.posts: list[Post] = []
        self.typing: list[tuple[str, float]] = []
        self.edits: list[tuple[str, str]] = []  # (message id, new content) for each accepted edit, in order
        self.deleted: list[str] = []  # ids of messages deleted, in order
        self.reactions: dict[str, list[str]] = {}  # message id -> the bot's reactions (a PUT twice adds one)
        self.unreacted: list[str] = []  # message ids the bot took a reaction off (DELETE, in order)
        self.identifies = 0
        self.readies = 0  # sessions that got READY and every GUILD_CREATE
        self.resumes = 0
        self.resumed: deque[str] = deque(maxlen=256)  # the session id of each accepted RESUME, the latest last
        self.session_starts_total = 1000  # GET /gateway/bot's session_start_limit; each READY spends one
        self.session_starts_remaining = 999
        self.max_concurrency = 1  # GET /gateway/bot's: shards whose id % this differ may IDENTIFY at the same time
        self.identify_close_code: int | None = None
        self.gateway_open = asyncio.Event()  # cleared: new gateway connections wait before HELLO (an outage)
        self.gateway_open.set()
        self.closing = False
        self.post_answers = asyncio.Event()  # cleared: a created message is stored, but its POST is not answered
        self.post_answers.set()
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self._holds: dict[str, asyncio.Event] = {}
        self._nonces: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self.gateway = FakeGateway(self)
        self._ids = itertools.count()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.closing = False  # a fake can be started again after a close (a bridge's next life)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        r = app.router
        self._routes(r)
        r.add_get("/gateway", self.gateway.handle)
        # a fake's handlers are released at close (below): a cleanup that still waits is a bug, not a minute's grace
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        self.closing = True  # a gateway handler released below closes its socket instead of saying HELLO
        self.gateway_open.set()  # release held handlers, or the server's cleanup would wait on them
        self.post_answers.set()
        for gate in self._holds.values():
            gate.set()
        for ws in list(self.gateway.sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def connected(self) -> int:
        return len(self.gateway.sockets)

    def shards_connected(self) -> list[Shard | None]:
        """The shard ``(id, count)`` of every identified gateway session (``None``: not sharded)."""
        return self.gateway.shards()

    def delivered_to(self, message_id: str) -> list[Shard | None]:
        """The shards whose gateway sessions were sent MESSAGE_CREATE for ``message_id`` (replays included)."""
        return [shard for shard, event, mid in self.gateway.received if event == "MESSAGE_CREATE" and mid == message_id]

    # ------------------------------------------------------------ test API

    def snowflake(self) -> str:
        ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return str((ms << 22) | (next(self._ids) & 0x3FFFFF))

    def fail(self, route: str, *statuses: int, retry_after: float = 0.05, via: bool = True) -> None:
        """Answer the next calls to ``route`` (e.g. ``"POST /channels/{id}/messages"``) with these statuses."""
        queue = self._faults.setdefault(route, deque())
        for status in statuses:
            queue.append(Fault(status, retry_after, via))

    def forget_nonces(self) -> None:
        """Forget every nonce, as Discord does a few minutes after a post."""
        self._nonces.clear()

    def hold(self, route: str) -> asyncio.Event:
        """Hold every call to ``route`` (recorded at once, answered later) until the returned event is set.

        Holding the history route keeps a cold lane's run accepted but not
        streaming. Calling it again arms a new hold; closing the fake releases all.
        """
        gate = asyncio.Event()
        self._holds[route] = gate
        return gate

    def dm_channel(self, user_id: str) -> str:
        return f"7{user_id[-17:]}"

    async def message(
        self,
        channel_id: str,
        content: str,
        *,
        author_id: str = "500000000000000001",
        author_name: str = "someone",
        bot: bool = False,
        guild_id: str | None = None,
        mention_bot: bool = False,
        attachments: list[dict[str, Any]] | None = None,
        message_id: str | None = None,
        reply_to: str | None = None,
    ) -> dict[str, Any]:
        """Store a message from a person and dispatch it as MESSAGE_CREATE; returns the payload.

        ``reply_to`` makes it a reply to that stored message (with ``referenced_message``, as Discord sends).
        """
        if guild_id is None:
            guild_id = next((g for g, chans in self.guilds.items() if channel_id in chans), None)
        mentions = [self.bot] if mention_bot else []
        if mention_bot and f"<@{self.bot['id']}>" not in content:
            content = f"<@{self.bot['id']}> {content}"
        payload = self._message_payload(
            message_id or self.snowflake(), channel_id, guild_id, user(author_id, author_name, bot=bot), content
        )
        payload["mentions"] = mentions
        payload["attachments"] = attachments or []
        if reply_to is not None:
            payload["type"] = 19
            payload["message_reference"] = {"message_id": reply_to, "channel_id": channel_id, "guild_id": guild_id}
            payload["referenced_message"] = self._find(channel_id, reply_to)
        await self._store_and_dispatch(payload)
        return payload

    async def redeliver(self, payload: dict[str, Any]) -> None:
        """Dispatch a stored message again, as Discord sometimes does."""
        await self.gateway.dispatch("MESSAGE_CREATE", payload)

    async def invalidate_sessions(self) -> None:
        """Send INVALID_SESSION (not resumable) on every gateway session: clients must IDENTIFY anew."""
        await self.gateway.invalidate()

    async def close_gateway(self, code: int = 4000) -> None:
        """Close every gateway session with ``code`` (4000 lets discord.py resume)."""
        await self.gateway.close_all(code)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds after some call or message, or raise TimeoutError."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(predicate)

    def posts_in(self, channel_id: str) -> list[Post]:
        return [p for p in self.posts if p.channel_id == channel_id]

    def live_posts(self, channel_id: str) -> list[Post]:
        """The bot's posts in a channel that have not been deleted."""
        return [p for p in self.posts_in(channel_id) if p.id not in self.deleted]

    def typing_in(self, channel_id: str) -> int:
        return sum(1 for c, _ in self.typing if c == channel_id)

    # ------------------------------------------------------------ internals

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _message_payload(
        self, mid: str, channel_id: str, guild_id: str | None, author: dict[str, Any], content: str
    ) -> dict[str, Any]:
        return message_payload(mid, channel_id, guild_id, author, content)

    async def _store_and_dispatch(self, payload: dict[str, Any]) -> None:
        self.messages.setdefault(payload["channel_id"], []).append(payload)
        await self.gateway.dispatch("MESSAGE_CREATE", payload)
        await self._notify()


async def narrate(fake: FakeDiscord, out: Callable[[str], None]) -> None:
    """Tell ``out`` what the bot does, as it happens: each post (its files by name and size), edit and deletion."""
    posts = edits = deleted = 0
    while True:
        async with fake._changed:
            await fake._changed.wait()
        for post in fake.posts[posts:]:
            files = "".join(f" [file {name}, {len(data)} bytes]" for name, data in post.files)
            out(f"<- #{post.channel_id} message {post.id}: {post.content}{files}")
        for mid, content in fake.edits[edits:]:
            out(f"<- message {mid} edited: {content}")
        for mid in fake.deleted[deleted:]:
            out(f"<- message {mid} deleted")
        posts, edits, deleted = len(fake.posts), len(fake.edits), len(fake.deleted)


def main() -> None:
    """``python -m clankie.testing.fake_discord``: a demo server; type ``<channel> <text>`` on stdin, and see what
    the bot posts, edits and deletes (with ``./scripts/run --demo``: the text updates, the card and the pictures)."""
    import sys

    async def serve() -> None:
        fake = FakeDiscord()
        await fake.start()
        print(f"CLANKIE_DISCORD_API_BASE={fake.api_base} DISCORD_TOKEN={fake.token} CLANKIE_DISCORD_GUILD_IDS=100",
              flush=True)
        watch = asyncio.ensure_future(narrate(fake, lambda line: print(line, flush=True)))
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            channel, _, text = line.strip().partition(" ")
            if text:
                await fake.message(channel, text)
        watch.cancel()
        await fake.close()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
