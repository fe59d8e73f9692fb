"""A loopback fake Discord (REST + gateway websocket) for tests and local demos.

Real discord.py connects to it when ``Route.BASE`` points at :attr:`FakeDiscord.api_base`
and the gateway is taken from ``GET /gateway/bot``. It serves what the bridge
uses: login (``/users/@me``, ``/oauth2/applications/@me``), gateway
discovery, channel messages (JSON and multipart with files, Discord's 2,000
character limit as 50035, nonce de-duplication with ``enforce_nonce``),
typing, history, channel lookup; and a gateway that says HELLO, answers
IDENTIFY with READY and one GUILD_CREATE per guild, ACKs heartbeats, RESUMEs
(replaying missed dispatches) and dispatches MESSAGE_CREATE for messages a
test injects with :meth:`FakeDiscord.message`. Faults are scripted per route
(:meth:`FakeDiscord.fail`): 429 with ``retry_after`` (and ``Via: 1.1 google``),
503, 500; a route can also be held until the test releases it
(:meth:`FakeDiscord.hold`). Every REST call is recorded in :attr:`FakeDiscord.calls`, every
posted message in :attr:`FakeDiscord.posts` (content, reference, allowed
mentions, nonce, file bytes). Responses say exactly ``Content-Type: application/json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

DISCORD_EPOCH_MS = 1_420_070_400_000
JSON = "application/json"
NONCE_WINDOW_S = 300.0
TIER_LIMITS = {0: 10 * 1024 * 1024, 1: 10 * 1024 * 1024, 2: 50 * 1024 * 1024, 3: 100 * 1024 * 1024}


@dataclass
class Call:
    """One REST request as the fake saw it."""

    method: str
    route: str  # template, e.g. "POST /channels/{id}/messages"
    path: str
    status: int = 200
    json: Any = None
    at: float = 0.0


@dataclass
class Post:
    """A message the bot created."""

    id: str
    channel_id: str
    content: str
    message_reference: dict[str, Any] | None
    allowed_mentions: dict[str, Any] | None
    nonce: str | None
    files: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class Fault:
    status: int
    retry_after: float = 0.0
    via: bool = True


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _user(uid: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {"id": uid, "username": name, "discriminator": "0", "global_name": None, "avatar": None, "bot": bot}


class FakeDiscord:
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
    ) -> None:
        self.token = token
        self.bot = _user(bot_id, bot_name, bot=True)
        self.owner = _user(owner_id, "owner")
        self.guilds = guilds if guilds is not None else {"100": ["101", "102"]}
        self.premium_tier = premium_tier
        self.calls: list[Call] = []
        self.posts: list[Post] = []
        self.typing: list[tuple[str, float]] = []
        self.edits: list[tuple[str, str]] = []  # (message id, new content) for each accepted edit, in order
        self.deleted: list[str] = []  # ids of messages deleted, in order
        self.reactions: dict[str, list[str]] = {}  # message id -> the bot's reactions (a PUT twice adds one)
        self.identifies = 0
        self.readies = 0  # sessions that got READY and every GUILD_CREATE
        self.resumes = 0
        self.identify_close_code: int | None = None
        self.gateway_open = asyncio.Event()  # cleared: new gateway connections wait before HELLO (an outage)
        self.gateway_open.set()
        self.post_answers = asyncio.Event()  # cleared: a created message is stored, but its POST is not answered
        self.post_answers.set()
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self._holds: dict[str, asyncio.Event] = {}
        self._nonces: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._sockets: set[web.WebSocketResponse] = set()
        self._dispatched: list[dict[str, Any]] = []
        self._seq = itertools.count(1)
        self._ids = itertools.count()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        r = app.router
        r.add_get("/api/v10/gateway/bot", self._gateway_bot)
        r.add_get("/api/v10/gateway", self._gateway_bot)
        r.add_get("/api/v10/users/@me", self._me)
        r.add_get("/api/v10/oauth2/applications/@me", self._application)
        r.add_post("/api/v10/channels/{cid}/messages", self._create_message)
        r.add_get("/api/v10/channels/{cid}/messages", self._history)
        r.add_post("/api/v10/channels/{cid}/typing", self._typing)
        r.add_patch("/api/v10/channels/{cid}/messages/{mid}", self._edit_message)
        r.add_delete("/api/v10/channels/{cid}/messages/{mid}", self._delete_message)
        r.add_put("/api/v10/channels/{cid}/messages/{mid}/reactions/{emoji}/@me", self._add_reaction)
        r.add_get("/api/v10/channels/{cid}", self._channel)
        r.add_get("/api/v10/guilds/{gid}", self._guild_rest)
        r.add_get("/gateway", self._gateway)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        self.gateway_open.set()  # release held handlers, or the server's cleanup would wait on them
        self.post_answers.set()
        for gate in self._holds.values():
            gate.set()
        for ws in list(self._sockets):
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
        return len(self._sockets)

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
            message_id or self.snowflake(), channel_id, guild_id, _user(author_id, author_name, bot=bot), content
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
        await self._dispatch("MESSAGE_CREATE", payload)

    async def invalidate_sessions(self) -> None:
        """Send INVALID_SESSION (not resumable) on every gateway session: clients must IDENTIFY anew."""
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.send_str(json.dumps({"op": 9, "d": False, "s": None, "t": None}))

    async def close_gateway(self, code: int = 4000) -> None:
        """Close every gateway session with ``code`` (4000 lets discord.py resume)."""
        for ws in list(self._sockets):
            await ws.close(code=code)

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
        data: dict[str, Any] = {
            "id": mid,
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        if guild_id is not None:
            data["guild_id"] = guild_id
        return data

    async def _store_and_dispatch(self, payload: dict[str, Any]) -> None:
        self.messages.setdefault(payload["channel_id"], []).append(payload)
        await self._dispatch("MESSAGE_CREATE", payload)
        await self._notify()

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        frame = {"op": 0, "t": event, "s": next(self._seq), "d": data}
        self._dispatched.append(frame)
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.send_str(json.dumps(frame))

    def _json(self, data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
        body = json.dumps(data).encode()
        return web.Response(body=body, status=status, headers={"Content-Type": JSON, **(headers or {})})

    async def _record(self, request: web.Request, route: str, body: Any = None) -> web.Response | None:
        """Record the call; answer with a scripted fault if one is queued for this route."""
        call = Call(request.method, route, request.path, json=body, at=time.monotonic())
        self.calls.append(call)
        gate = self._holds.get(route)
        if gate is not None and not gate.is_set():
            await self._notify()
            await gate.wait()
        queue = self._faults.get(route)
        if queue:
            fault = queue.popleft()
            call.status = fault.status
            await self._notify()
            if fault.status == 429:
                headers = {"Via": "1.1 google"} if fault.via else {}
                headers["Retry-After"] = str(fault.retry_after)
                data = {"message": "You are being rate limited.", "retry_after": fault.retry_after, "global": False}
                return self._json(data, 429, headers)
            return self._json({"message": "Service Unavailable", "code": 0}, fault.status)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            call.status = 401
            await self._notify()
            return self._json({"message": "401: Unauthorized", "code": 0}, 401)
        return None

    # ------------------------------------------------------------ REST handlers

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return self._json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _me(self, request: web.Request) -> web.Response:
        fault = await self._record(request, "GET /users/@me")
        return fault or self._json({**self.bot, "verified": True, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: web.Request) -> web.Response:
        fault = await self._record(request, "GET /oauth2/applications/@me")
        app = {"id": self.bot["id"], "name": self.bot["username"], "description": "", "icon": None,
               "bot_public": False, "bot_require_code_grant": False, "owner": self.owner,
               "verify_key": "0" * 64, "flags": 0, "team": None}
        return fault or self._json(app)

    def _guild_of(self, channel_id: str) -> str | None:
        return next((g for g, chans in self.guilds.items() if channel_id in chans), None)

    async def _create_message(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        files: list[tuple[str, bytes]] = []
        if request.content_type.startswith("multipart/"):
            payload: dict[str, Any] = {}
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":
                    payload = json.loads(await part.text())  # type: ignore[union-attr]
                else:
                    files.append((part.filename or "", bytes(await part.read())))  # type: ignore[union-attr]
        else:
            payload = await request.json()
        recorded = {**payload, "files": [(n, len(b)) for n, b in files]}
        fault = await self._record(request, "POST /channels/{id}/messages", recorded)
        if fault:
            return fault
        content = payload.get("content") or ""
        if len(content) > 2000:
            errors = {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}
            return self._json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)
        if not content.strip() and not files:
            return self._json({"message": "Cannot send an empty message", "code": 50006}, 400)
        limit = TIER_LIMITS[self.premium_tier]
        if sum(len(b) for _, b in files) > limit:
            return self._json({"message": "Request entity too large", "code": 40005}, 413)
        nonce = payload.get("nonce")
        key = (cid, str(nonce))
        now = time.monotonic()
        if nonce is not None and payload.get("enforce_nonce") and key in self._nonces:
            at, existing = self._nonces[key]
            if now - at < NONCE_WINDOW_S:
                return self._json(existing)
        guild_id = self._guild_of(cid)
        msg = self._message_payload(self.snowflake(), cid, guild_id, self.bot, content)
        msg["attachments"] = [
            {"id": str(i), "filename": n, "size": len(b), "url": f"https://cdn.invalid/{n}", "proxy_url": ""}
            for i, (n, b) in enumerate(files)
        ]
        if payload.get("message_reference"):
            msg["message_reference"] = payload["message_reference"]
        if nonce is not None:
            msg["nonce"] = nonce
            self._nonces[key] = (now, msg)
        self.posts.append(
            Post(msg["id"], cid, content, payload.get("message_reference"), payload.get("allowed_mentions"), nonce, files)
        )
        await self._store_and_dispatch(msg)  # Discord echoes the bot's own posts
        await self.post_answers.wait()
        return self._json(msg)

    async def _history(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        fault = await self._record(request, "GET /channels/{id}/messages")
        if fault:
            return fault
        limit = int(request.query.get("limit", "50"))
        before, after = request.query.get("before"), request.query.get("after")
        stored = self.messages.get(cid, [])
        if after is not None:  # the `limit` messages right after `after`, newest first, as Discord answers
            later = [m for m in stored if int(m["id"]) > int(after)]
            return self._json(list(reversed(later[:limit])) if limit else [])
        found = [m for m in stored if before is None or int(m["id"]) < int(before)]
        return self._json(list(reversed(found[-limit:])) if limit else [])

    async def _typing(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        fault = await self._record(request, "POST /channels/{id}/typing")
        if fault:
            return fault
        self.typing.append((cid, time.monotonic()))
        await self._notify()
        return web.Response(status=204)

    def _find(self, channel_id: str, message_id: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel_id, []) if m["id"] == message_id), None)

    async def _edit_message(self, request: web.Request) -> web.Response:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        payload = await request.json()
        fault = await self._record(request, "PATCH /channels/{id}/messages/{id}", payload)
        if fault:
            return fault
        stored = self._find(cid, mid)
        if stored is None or mid in self.deleted:
            return self._json({"message": "Unknown Message", "code": 10008}, 404)
        if stored["author"]["id"] != self.bot["id"]:
            return self._json({"message": "Cannot edit a message authored by another user", "code": 50005}, 403)
        stored["content"] = payload.get("content") or ""
        stored["edited_timestamp"] = _now_iso()
        self.edits.append((mid, stored["content"]))  # posts keep what was created; edits say what changed
        await self._notify()
        return self._json(stored)

    async def _delete_message(self, request: web.Request) -> web.Response:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        fault = await self._record(request, "DELETE /channels/{id}/messages/{id}")
        if fault:
            return fault
        stored = self._find(cid, mid)
        if stored is None or mid in self.deleted:
            return self._json({"message": "Unknown Message", "code": 10008}, 404)
        self.deleted.append(mid)
        await self._notify()
        return web.Response(status=204)

    async def _add_reaction(self, request: web.Request) -> web.Response:
        cid, mid, emoji = request.match_info["cid"], request.match_info["mid"], request.match_info["emoji"]
        fault = await self._record(request, "PUT /channels/{id}/messages/{id}/reactions/{emoji}/@me")
        if fault:
            return fault
        if self._find(cid, mid) is None:
            return self._json({"message": "Unknown Message", "code": 10008}, 404)
        mine = self.reactions.setdefault(mid, [])
        if emoji not in mine:  # Discord's PUT is idempotent: the same emoji twice is one reaction
            mine.append(emoji)
        await self._notify()
        return web.Response(status=204)

    async def _channel(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        fault = await self._record(request, "GET /channels/{id}")
        if fault:
            return fault
        gid = self._guild_of(cid)
        if gid is None:
            return self._json({"id": cid, "type": 1, "recipients": [self.owner], "last_message_id": None})
        return self._json(self._channel_payload(gid, cid, 0))

    async def _guild_rest(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        fault = await self._record(request, "GET /guilds/{id}")
        if fault:
            return fault
        if gid not in self.guilds:
            return self._json({"message": "Unknown Guild", "code": 10004}, 404)
        return self._json(self._guild_payload(gid))

    def _channel_payload(self, gid: str, cid: str, position: int) -> dict[str, Any]:
        stored = self.messages.get(cid)
        return {"id": cid, "type": 0, "name": f"chan-{cid}", "position": position, "guild_id": gid,
                "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None,
                "last_message_id": stored[-1]["id"] if stored else None}

    def _guild_payload(self, gid: str) -> dict[str, Any]:
        everyone = {"id": gid, "name": "@everyone", "permissions": "1024", "position": 0, "color": 0,
                    "hoist": False, "managed": False, "mentionable": False}
        return {
            "id": gid, "name": f"guild-{gid}", "icon": None, "owner_id": self.owner["id"],
            "premium_tier": self.premium_tier, "roles": [everyone], "emojis": [], "stickers": [],
            "features": [], "member_count": 2, "large": False, "unavailable": False,
            "joined_at": _now_iso(), "mfa_level": 0, "verification_level": 0, "explicit_content_filter": 0,
            "default_message_notifications": 0, "system_channel_id": None, "afk_channel_id": None,
            "afk_timeout": 300, "preferred_locale": "en-US", "nsfw_level": 0,
            "channels": [self._channel_payload(gid, c, i) for i, c in enumerate(self.guilds[gid])],
            "members": [], "threads": [], "voice_states": [], "presences": [], "stage_instances": [],
            "guild_scheduled_events": [], "soundboard_sounds": [],
        }

    # ------------------------------------------------------------ gateway

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        if not self.gateway_open.is_set():  # an outage: no HELLO until it ends, or until the client gives up
            opened = asyncio.ensure_future(self.gateway_open.wait())
            incoming = asyncio.ensure_future(ws.receive())  # a client says nothing before HELLO but its close
            await asyncio.wait({opened, incoming}, return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            if incoming.done():
                await ws.close()
                return ws
            incoming.cancel()
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}))
        self._sockets.add(ws)
        await self._notify()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                await self._on_frame(ws, frame)
        finally:
            self._sockets.discard(ws)
            await self._notify()
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == 1:
            await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
        elif op == 2:
            self.identifies += 1
            if data.get("token") != self.token:
                await ws.close(code=4004, message=b"Authentication failed.")
                return
            if self.identify_close_code is not None:
                await ws.close(code=self.identify_close_code, message=b"Disallowed intent(s).")
                return
            await self._send_ready(ws)
        elif op == 6:
            self.resumes += 1
            seq = data.get("seq") or 0
            for old in self._dispatched:
                if old["s"] > seq:
                    await ws.send_str(json.dumps(old))
            await self._send(ws, "RESUMED", {})
        await self._notify()

    async def _send(self, ws: web.WebSocketResponse, event: str, data: dict[str, Any]) -> None:
        frame = {"op": 0, "t": event, "s": next(self._seq), "d": data}
        await ws.send_str(json.dumps(frame))

    async def _send_ready(self, ws: web.WebSocketResponse) -> None:
        ready = {"v": 10, "user": {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0},
                 "guilds": [{"id": g, "unavailable": True} for g in self.guilds],
                 "session_id": f"session-{self.identifies}", "resume_gateway_url": self.gateway_url,
                 "application": {"id": self.bot["id"], "flags": 0}, "private_channels": [], "relationships": []}
        await self._send(ws, "READY", ready)
        for gid in self.guilds:
            await self._send(ws, "GUILD_CREATE", self._guild_payload(gid))
        self.readies += 1


def main() -> None:
    """``python -m clankie.testing.fake_discord``: a demo server; type ``<channel> <text>`` on stdin."""
    import sys

    async def serve() -> None:
        fake = FakeDiscord()
        await fake.start()
        print(f"CLANKIE_DISCORD_API_BASE={fake.api_base} DISCORD_TOKEN={fake.token} CLANKIE_DISCORD_GUILD_IDS=100")
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            channel, _, text = line.strip().partition(" ")
            if text:
                await fake.message(channel, text)
        await fake.close()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
