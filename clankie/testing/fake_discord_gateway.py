"""The fake Discord's gateway websocket, with shards.

It says HELLO, answers IDENTIFY with READY and one GUILD_CREATE per guild,
ACKs heartbeats, RESUMEs (replaying missed dispatches) and dispatches events.

Sessions outlive their sockets as on Discord: a socket that dies without a
close frame (a SIGKILLed client), or closes with any code but 1000/1001,
leaves its session resumable for :attr:`FakeGateway.resume_window` seconds
(on the fake's clock); a RESUME within it, presenting the session id and a
sequence, is sent every dispatch of that session's shard after that sequence,
in order, then RESUMED. A RESUME is refused with op 9 ``d: false`` (IDENTIFY
anew) when the session is unknown, was closed with 1000/1001, expired, or its
sequence is older than the replay buffer (a dispatch after it has fallen out
of the last :data:`REPLAY_MAX`; sequences count across the fake's sessions,
so a quiet shard's old sequence is not by itself too old), or while :attr:`FakeGateway.refuse_resumes` is set (or the session's
shard id is in :attr:`FakeGateway.refuse_shards`: Discord dropped that shard's
session alone). A RESUME of a
session another live socket still holds is counted in
:attr:`FakeGateway.shared` (two processes on one session: a bug).
An IDENTIFY that carries ``shard: [id, count]`` makes that connection a shard,
as on Discord: its READY says so, it is told only of the guilds with
``(guild_id >> 22) % count == id``, it receives only their events, and direct
messages (no guild) go to shard 0 alone. An invalid shard is closed with 4010.
A connection that identifies without ``shard`` receives everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from clankie.shards import DM_SHARD, shard_of

if TYPE_CHECKING:
    from clankie.testing.fake_discord import FakeDiscord

Shard = tuple[int, int]  # (shard id, shard count), as in IDENTIFY's `shard`

REPLAY_MAX = 20_000  # dispatches kept for RESUME replays; a presented sequence older than these is refused
RESUME_WINDOW = 120.0  # seconds a dead socket's session stays resumable (Discord: "a few minutes")
INVALIDATING = frozenset({1000, 1001})  # a client's close with these ends its session for good


@dataclass
class Session:
    """One gateway connection: its session id and shard once identified or resumed."""

    session_id: str | None = None
    shard: Shard | None = None


@dataclass
class Resumable:
    """A session as the gateway keeps it between sockets."""

    shard: Shard | None
    socket: web.WebSocketResponse | None = None  # the live socket holding it, if any
    dead_at: float | None = None  # when its last socket died (fake clock); None while held or never held
    invalid: bool = False


def carries(shard: Shard | None, guild_id: str | None) -> bool:
    """Whether a connection on ``shard`` (``None``: not sharded) is sent events of ``guild_id`` (``None``: a DM)."""
    if shard is None:
        return True
    shard_id, count = shard
    return shard_id == (DM_SHARD if guild_id is None else shard_of(guild_id, count))


class FakeGateway:
    """The websocket side of :class:`clankie.testing.fake_discord.FakeDiscord`."""

    def __init__(self, fake: FakeDiscord, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.fake = fake
        self.clock = clock
        self.resume_window = RESUME_WINDOW
        self.refuse_resumes = False  # set: every RESUME is answered op 9 (as Discord does for a session it dropped)
        self.refuse_shards: set[int] = set()  # RESUMEs of these shard ids' sessions are answered op 9
        self.sockets: dict[web.WebSocketResponse, Session] = {}
        self.sessions: dict[str, Resumable] = {}  # session id -> what RESUME needs
        self.dispatched: deque[tuple[dict[str, Any], str | None]] = deque(maxlen=REPLAY_MAX)  # (frame, guild id)
        self.evicted_through = 0  # the newest sequence that fell out of the replay buffer
        self.refused = 0  # RESUMEs answered op 9
        self.refusals: deque[str] = deque(maxlen=64)  # why each of the latest was (a failing test says it)
        self.shared = 0  # RESUMEs of a session another live socket still held
        self.closed_codes: list[int | None] = []  # each socket's close code as the server saw it, in order
        self._server_closed: set[web.WebSocketResponse] = set()
        self.received: list[tuple[Shard | None, str, str]] = []  # (shard, event, data id) of every dispatch sent
        self._seq = itertools.count(1)

    def shards(self) -> list[Shard | None]:
        """The shard of every identified or resumed connection."""
        return [s.shard for s in self.sockets.values() if s.session_id is not None]

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send one event to every connection that carries its guild."""
        guild_id = data.get("guild_id")
        frame = {"op": 0, "t": event, "s": next(self._seq), "d": data}
        if len(self.dispatched) == self.dispatched.maxlen:
            self.evicted_through = self.dispatched[0][0]["s"]
        self.dispatched.append((frame, guild_id))
        for ws, session in list(self.sockets.items()):
            if session.session_id is not None and carries(session.shard, guild_id):
                with contextlib.suppress(Exception):
                    await ws.send_str(json.dumps(frame))
                    self.received.append((session.shard, event, str(data.get("id", ""))))

    async def invalidate(self) -> None:
        for ws, session in list(self.sockets.items()):
            self._drop_session(session.session_id)
            with contextlib.suppress(Exception):
                await ws.send_str(json.dumps({"op": 9, "d": False, "s": None, "t": None}))

    async def close_all(self, code: int) -> None:
        for ws in list(self.sockets):
            self._server_closed.add(ws)
            await ws.close(code=code)

    def resumable(self) -> list[str]:
        """Ids of the sessions a RESUME would be accepted for now (held or within the window)."""
        now = self.clock()
        return [sid for sid, r in self.sessions.items()
                if not r.invalid and (r.dead_at is None or now - r.dead_at <= self.resume_window)]

    def _drop_session(self, session_id: str | None) -> None:
        kept = self.sessions.get(session_id or "")
        if kept is not None:
            kept.invalid = True

    def _socket_gone(self, ws: web.WebSocketResponse, session: Session | None) -> None:
        """A socket ended: its session stays resumable unless the client closed it with 1000/1001."""
        code = ws.close_code
        self.closed_codes.append(code)
        by_server = ws in self._server_closed
        self._server_closed.discard(ws)
        kept = self.sessions.get(session.session_id or "") if session is not None else None
        if kept is None or kept.socket is not ws:
            return
        kept.socket = None
        kept.dead_at = self.clock()
        if not by_server and code in INVALIDATING:
            kept.invalid = True

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        fake = self.fake
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        if not fake.gateway_open.is_set():  # an outage: no HELLO until it ends, or until the client gives up
            opened = asyncio.ensure_future(fake.gateway_open.wait())
            incoming = asyncio.ensure_future(ws.receive())  # a client says nothing before HELLO but its close
            await asyncio.wait({opened, incoming}, return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            if incoming.done() or fake.closing:  # the client gave up, or the fake is closing: no session
                incoming.cancel()
                await ws.close(code=1001)
                return ws
            incoming.cancel()
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}))
        self.sockets[ws] = Session()
        await fake._notify()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                await self._on_frame(ws, frame)
        finally:
            self._socket_gone(ws, self.sockets.pop(ws, None))
            await fake._notify()
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        fake = self.fake
        op = frame.get("op")
        data: dict[str, Any] = frame.get("d") or {}
        if op == 1:
            await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
        elif op == 2:
            fake.identifies += 1
            if data.get("token") != fake.token:
                await ws.close(code=4004, message=b"Authentication failed.")
                return
            if fake.identify_close_code is not None:
                await ws.close(code=fake.identify_close_code, message=b"Disallowed intent(s).")
                return
            try:
                shard = _shard(data.get("shard"))
            except ValueError:
                await ws.close(code=4010, message=b"Invalid shard.")
                return
            await self._send_ready(ws, shard)
        elif op == 6:
            await self._resume(ws, data)
        await fake._notify()

    async def _resume(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        fake = self.fake
        session = self.sockets.get(ws)
        if session is None:
            return
        sid = str(data.get("session_id") or "")
        seq = data.get("seq") or 0
        kept = self.sessions.get(sid)
        why = ("token" if data.get("token") != fake.token else "unknown session" if kept is None
               else "refusing" if self.refuse_resumes or (kept.shard is not None and kept.shard[0] in self.refuse_shards)
               else "invalidated" if kept.invalid else "window passed" if sid not in self.resumable()
               else f"seq {seq!r}: later dispatches through {self.evicted_through} are gone"
               if not isinstance(seq, int) or seq < self.evicted_through
               else None)
        if why is not None:
            self.refused += 1
            self.refusals.append(why)
            self._drop_session(sid)
            await ws.send_str(json.dumps({"op": 9, "d": False, "s": None, "t": None}))
            return
        assert kept is not None  # an unknown session is refused above
        fake.resumes += 1
        fake.resumed.append(sid)
        if kept.socket is not None and kept.socket is not ws:
            self.shared += 1  # Discord would serve both for a moment: never two processes on one session
        kept.socket, kept.dead_at = ws, None
        session.session_id, session.shard = sid, kept.shard
        for old, guild_id in list(self.dispatched):
            if old["s"] > seq and carries(session.shard, guild_id):
                await ws.send_str(json.dumps(old))
                self.received.append((session.shard, old["t"], str(old["d"].get("id", ""))))
        await self._send(ws, "RESUMED", {})

    async def _send(self, ws: web.WebSocketResponse, event: str, data: dict[str, Any]) -> None:
        frame = {"op": 0, "t": event, "s": next(self._seq), "d": data}
        await ws.send_str(json.dumps(frame))

    async def _send_ready(self, ws: web.WebSocketResponse, shard: Shard | None) -> None:
        fake = self.fake
        session_id = f"session-{fake.identifies}"
        self.sessions[session_id] = Resumable(shard, socket=ws)
        fake.session_starts_remaining = max(0, fake.session_starts_remaining - 1)
        guilds = [g for g in fake.guilds if carries(shard, g)]
        ready: dict[str, Any] = {
            "v": 10, "user": {**fake.bot, "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": g, "unavailable": True} for g in guilds],
            "session_id": session_id, "resume_gateway_url": fake.gateway_url,
            "application": {"id": fake.bot["id"], "flags": 0}, "private_channels": [], "relationships": [],
        }
        if shard is not None:
            ready["shard"] = list(shard)
        session = self.sockets.get(ws)
        if session is not None:  # dispatches reach a connection from READY on
            session.session_id, session.shard = session_id, shard
        await self._send(ws, "READY", ready)
        for gid in guilds:
            await self._send(ws, "GUILD_CREATE", fake._guild_payload(gid))
        fake.readies += 1


def _shard(value: Any) -> Shard | None:
    """IDENTIFY's ``shard``: ``None`` if absent, ``(id, count)`` if valid; ``ValueError`` if Discord would refuse it."""
    if value is None:
        return None
    if (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and 0 <= value[0] < value[1]):
        return (value[0], value[1])
    raise ValueError(f"invalid shard {value!r}")
