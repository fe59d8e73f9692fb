"""The fake Discord's REST side: the routes discord.py calls, answered from the fake's state.

A mixin of :class:`clankie.testing.fake_discord.FakeDiscord` (which owns the
state declared below): every call is recorded, scripted faults and holds are
honoured (:meth:`FakeDiscord.fail`, :meth:`FakeDiscord.hold`), and the token
is checked, before a handler answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any

from aiohttp import BodyPartReader, web

from clankie.testing.fake_discord_records import (
    NONCE_WINDOW_S,
    TIER_LIMITS,
    Call,
    Fault,
    Post,
    channel_payload,
    fault_response,
    guild_payload,
    now_iso,
    respond,
)


class RestHandlers:
    """The REST routes; the state they read and write is :class:`FakeDiscord`'s."""

    token: str
    bot: dict[str, Any]
    owner: dict[str, Any]
    guilds: dict[str, list[str]]
    premium_tier: int
    shards: int
    session_starts_total: int
    session_starts_remaining: int
    max_concurrency: int
    calls: list[Call]
    posts: list[Post]
    typing: list[tuple[str, float]]
    edits: list[tuple[str, str]]
    deleted: list[str]
    reactions: dict[str, list[str]]
    unreacted: list[str]
    messages: dict[str, list[dict[str, Any]]]
    post_answers: asyncio.Event
    _faults: dict[str, deque[Fault]]
    _holds: dict[str, asyncio.Event]
    _nonces: dict[tuple[str, str], tuple[float, dict[str, Any]]]

    @property
    def gateway_url(self) -> str:
        raise NotImplementedError

    def snowflake(self) -> str:
        raise NotImplementedError

    async def _notify(self) -> None:
        raise NotImplementedError

    def _message_payload(
        self, mid: str, channel_id: str, guild_id: str | None, author: dict[str, Any], content: str
    ) -> dict[str, Any]:
        raise NotImplementedError

    async def _store_and_dispatch(self, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    def _routes(self, r: web.UrlDispatcher) -> None:
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
        r.add_delete("/api/v10/channels/{cid}/messages/{mid}/reactions/{emoji}/@me", self._remove_reaction)
        r.add_get("/api/v10/channels/{cid}", self._channel)
        r.add_get("/api/v10/guilds/{gid}", self._guild_rest)

    async def _record(self, request: web.Request, route: str, body: Any = None) -> web.Response | None:
        """Record the call; answer with a scripted fault if one is queued for this route."""
        call = Call(request.method, route, request.path, json=body, at=time.monotonic(), query=request.query_string)
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
            return fault_response(fault)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            call.status = 401
            await self._notify()
            return respond({"message": "401: Unauthorized", "code": 0}, 401)
        return None

    # ------------------------------------------------------------ REST handlers

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        limit = {"total": self.session_starts_total, "remaining": self.session_starts_remaining, "reset_after": 0,
                 "max_concurrency": self.max_concurrency}
        return respond({"url": self.gateway_url, "shards": self.shards, "session_start_limit": limit})

    async def _me(self, request: web.Request) -> web.Response:
        fault = await self._record(request, "GET /users/@me")
        return fault or respond({**self.bot, "verified": True, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: web.Request) -> web.Response:
        fault = await self._record(request, "GET /oauth2/applications/@me")
        app = {"id": self.bot["id"], "name": self.bot["username"], "description": "", "icon": None,
               "bot_public": False, "bot_require_code_grant": False, "owner": self.owner,
               "verify_key": "0" * 64, "flags": 0, "team": None}
        return fault or respond(app)

    def _guild_of(self, channel_id: str) -> str | None:
        return next((g for g, chans in self.guilds.items() if channel_id in chans), None)

    async def _create_message(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        files: list[tuple[str, bytes]] = []
        if request.content_type.startswith("multipart/"):
            payload: dict[str, Any] = {}
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader):
                    continue  # a nested multipart: discord.py never sends one
                if part.name == "payload_json":
                    payload = json.loads(await part.text())
                else:
                    files.append((part.filename or "", bytes(await part.read())))
        else:
            payload = await request.json()
        recorded = {**payload, "files": [(n, len(b)) for n, b in files]}
        fault = await self._record(request, "POST /channels/{id}/messages", recorded)
        if fault:
            return fault
        content = payload.get("content") or ""
        if len(content) > 2000:
            errors = {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}
            return respond({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)
        if not content.strip() and not files:
            return respond({"message": "Cannot send an empty message", "code": 50006}, 400)
        limit = TIER_LIMITS[self.premium_tier]
        if sum(len(b) for _, b in files) > limit:
            return respond({"message": "Request entity too large", "code": 40005}, 413)
        nonce = payload.get("nonce")
        key = (cid, str(nonce))
        now = time.monotonic()
        if nonce is not None and payload.get("enforce_nonce") and key in self._nonces:
            at, existing = self._nonces[key]
            if now - at < NONCE_WINDOW_S:
                return respond(existing)
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
        return respond(msg)

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
            return respond(list(reversed(later[:limit])) if limit else [])
        found = [m for m in stored if before is None or int(m["id"]) < int(before)]
        return respond(list(reversed(found[-limit:])) if limit else [])

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
            return respond({"message": "Unknown Message", "code": 10008}, 404)
        if stored["author"]["id"] != self.bot["id"]:
            return respond({"message": "Cannot edit a message authored by another user", "code": 50005}, 403)
        stored["content"] = payload.get("content") or ""
        stored["edited_timestamp"] = now_iso()
        self.edits.append((mid, stored["content"]))  # posts keep what was created; edits say what changed
        await self._notify()
        return respond(stored)

    async def _delete_message(self, request: web.Request) -> web.Response:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        fault = await self._record(request, "DELETE /channels/{id}/messages/{id}")
        if fault:
            return fault
        stored = self._find(cid, mid)
        if stored is None or mid in self.deleted:
            return respond({"message": "Unknown Message", "code": 10008}, 404)
        self.deleted.append(mid)
        await self._notify()
        return web.Response(status=204)

    async def _add_reaction(self, request: web.Request) -> web.Response:
        cid, mid, emoji = request.match_info["cid"], request.match_info["mid"], request.match_info["emoji"]
        fault = await self._record(request, "PUT /channels/{id}/messages/{id}/reactions/{emoji}/@me")
        if fault:
            return fault
        if self._find(cid, mid) is None:
            return respond({"message": "Unknown Message", "code": 10008}, 404)
        mine = self.reactions.setdefault(mid, [])
        if emoji not in mine:  # Discord's PUT is idempotent: the same emoji twice is one reaction
            mine.append(emoji)
        await self._notify()
        return web.Response(status=204)

    async def _remove_reaction(self, request: web.Request) -> web.Response:
        cid, mid, emoji = request.match_info["cid"], request.match_info["mid"], request.match_info["emoji"]
        fault = await self._record(request, "DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me")
        if fault:
            return fault
        if self._find(cid, mid) is None:
            return respond({"message": "Unknown Message", "code": 10008}, 404)
        mine = self.reactions.get(mid, [])
        if emoji in mine:  # Discord's DELETE of a reaction that is not there is no error either
            mine.remove(emoji)
        self.unreacted.append(mid)
        await self._notify()
        return web.Response(status=204)

    async def _channel(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        fault = await self._record(request, "GET /channels/{id}")
        if fault:
            return fault
        gid = self._guild_of(cid)
        if gid is None:
            return respond({"id": cid, "type": 1, "recipients": [self.owner], "last_message_id": None})
        return respond(self._channel_payload(gid, cid, 0))

    async def _guild_rest(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        fault = await self._record(request, "GET /guilds/{id}")
        if fault:
            return fault
        if gid not in self.guilds:
            return respond({"message": "Unknown Guild", "code": 10004}, 404)
        return respond(self._guild_payload(gid))

    def _channel_payload(self, gid: str, cid: str, position: int) -> dict[str, Any]:
        stored = self.messages.get(cid)
        return channel_payload(gid, cid, position, stored[-1]["id"] if stored else None)

    def _guild_payload(self, gid: str) -> dict[str, Any]:
        channels = [self._channel_payload(gid, c, i) for i, c in enumerate(self.guilds[gid])]
        return guild_payload(gid, channels, self.owner["id"], self.premium_tier)
