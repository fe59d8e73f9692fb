"""Serving and dialling the tree's sockets, and checking who is on the other end.

Each socket carries msgpack-RPC through a :class:`clankie.connection.Connection`
(re-exported here), which opens with a ``hello`` exchange that refuses a
protocol version mismatch.

:func:`serve` binds a listening socket through :mod:`clankie.sockfile` (0600,
in a 0700 directory, with a stale file from a dead server removed and a live
server refused) and checks
each peer's uid with ``SO_PEERCRED``; given an already-bound listening
socket (one the supervisor made with :func:`clankie.sockfile.bind_listener` and handed down),
it serves that instead and leaves the file alone when it closes.
:func:`connect` dials one.
:func:`from_socket` wraps an already-connected socket, as the supervisor
link uses.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from clankie import framing
from clankie.channel import DEFAULT_MAX_OUTPUT, DEFAULT_PARTIAL_FRAME_TIMEOUT
from clankie.connection import HELLO_TIMEOUT, Connection, Handler
from clankie.errors import ChannelBroken, ChannelClosed
from clankie.limits import DEFAULT_MAX_INFLIGHT, Held, Limits, Refuse, decide
from clankie.limits import Admit as Admitted
from clankie.peers import Refusal
from clankie.protocol import Code
from clankie.sockfile import bind_listener
from clankie.tasks import TaskSet
from clankie.waits import within

__all__ = [
    "Connection", "Handler", "Limits", "Server", "connect", "from_socket", "peer_allowed", "peer_credentials",
    "peer_uid", "serve",
]

log = logging.getLogger(__name__)

OnConnect = Callable[[Connection], Awaitable[None] | None]
Admit = Callable[[int, int], Refusal | None]
"""Beyond the uid rule: ``(pid, uid)`` of a new peer -> None to let it in, or why not (:mod:`clankie.peers`)."""
AdmitSocket = Callable[[socket.socket, int, int], Refusal | None]
"""Like :data:`Admit`, for a check that needs the connected socket itself (``control.sock`` reads the peer's pidfd)."""
_LOG_EVERY = 5.0  # seconds between two "refused" warnings
_PEERCRED = struct.Struct("3i")


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return pid, uid, gid


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    return peer_credentials(sock)[1]


def peer_allowed(uid: int) -> bool:
    return uid == os.getuid() or uid == 0


class Server:
    """A listening Unix socket; each accepted peer gets its own :class:`Connection`.

    Admission follows :mod:`clankie.limits` (hello deadline, optional idle
    timeout, per-pid and per-uid caps with slots reserved for root, optional
    eviction of the idlest connection). ``max_connections`` alone is the old
    spelling of ``limits=Limits(max_connections=...)``. ``uid_rule`` replaces
    :func:`peer_allowed` (ours or root) as the first gate. ``admit`` checks a
    peer that passed the uid rule (the pids the supervisor named, say); one it
    refuses gets its hello answered with the refusal's code (``admit_socket``
    the same, handed the connected socket too), and
    :attr:`refusals` counts every refusal by code.
    """

    def __init__(
        self,
        path: Path,
        role: str,
        handler: Handler,
        *,
        on_connect: OnConnect | None = None,
        max_frame: int = framing.DEFAULT_MAX_FRAME,
        max_output: int = DEFAULT_MAX_OUTPUT,
        partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT,
        max_connections: int | None = None,
        limits: Limits | None = None,
        sock: socket.socket | None = None,
        admit: Admit | None = None,
        admit_socket: AdmitSocket | None = None,
        uid_rule: Callable[[int], bool] = peer_allowed,
    ) -> None:
        self.path = path
        self._sock = sock  # inherited: bound and owned by someone else (the supervisor)
        self.role = role
        if limits is None:
            limits = Limits() if max_connections is None else Limits.capped(max_connections)
        self.limits = limits
        self.max_connections = limits.max_connections
        self._handler = handler
        self._on_connect = on_connect
        self._max_frame = max_frame
        self._max_output = max_output
        self._partial_timeout = partial_frame_timeout
        self._server: asyncio.base_events.Server | None = None
        # one watcher per connection, and an evicted connection's for the moment it takes to end
        self._watchers = TaskSet(f"{role} connection watchers", 2 * limits.max_connections)
        self.connections: set[Connection] = set()
        self._peers: dict[Connection, tuple[int, int]] = {}
        self._per_pid: collections.Counter[int] = collections.Counter()  # connections held per pid and per uid,
        self._per_uid: collections.Counter[int] = collections.Counter()  # kept with _peers: admission in O(1)
        self.refused = 0
        self.refusals: collections.Counter[str] = collections.Counter()
        self._admit = admit
        self._admit_socket = admit_socket
        self._uid_rule = uid_rule  # the browser host run apart: every uid, then its own rule by uid in ``admit``
        self.evicted = 0
        self.idle_closed = 0
        self._unlogged = 0
        self._logged_at = -_LOG_EVERY

    async def start(self) -> None:
        sock = self._sock if self._sock is not None else await bind_listener(self.path)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._make_connection, sock=sock)

    def _make_connection(self) -> asyncio.Protocol:
        return _Accepted(self)

    def _accepted(self, conn: Connection, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        pid, uid, _gid = peer_credentials(sock)
        conn.caller = (pid, uid)
        if not self._uid_rule(uid):
            self.refusals[Code.PEER_UID_REFUSED] += 1
            self._refuse(transport, "pid %d runs as uid %d", pid, uid)
            return
        refusal = self._admit(pid, uid) if self._admit is not None else None
        if refusal is None and self._admit_socket is not None:
            refusal = self._admit_socket(sock, pid, uid)
        if refusal is not None:
            self.refusals[refusal.code] += 1
            conn.refuse(refusal.code, refusal.reason)  # a same-uid peer: it hears why, then the connection closes
            self._refuse(None, "%s (%s)", refusal.reason, refusal.code)
            return
        verdict = self._decide(pid, uid)
        if isinstance(verdict, Refuse):
            self.refusals["too_many_connections"] += 1
            self._refuse(transport, "%s (pid %d, uid %d)", verdict.reason, pid, uid)
            return
        if verdict.evict is not None:
            victim = next(c for c in self._peers if id(c) == verdict.evict)
            self.evicted += 1
            log.info("closing the %s connection idle longest to admit pid %d", self.role, pid)
            self._forget(victim)
            victim.abort("evicted: the idlest connection made room for a new one")
        if self._watchers.full:  # a flood of evictions: the evicted connections are still ending
            self.refusals["too_many_connections"] += 1
            self._refuse(transport, "%d connections still closing (pid %d, uid %d)", len(self._watchers), pid, uid)
            return
        self.connections.add(conn)
        self._peers[conn] = (pid, uid)
        self._per_pid[pid] += 1
        self._per_uid[uid] += 1
        self._watchers.spawn(self._watch(conn), name=f"{self.role}-connection")

    def _refuse(self, transport: asyncio.BaseTransport | None, fmt: str, *args: object) -> None:
        """Close before reading a byte; log at most once per few seconds (a flood must not flood the journal)."""
        self.refused += 1
        if transport is None:  # the connection closes itself, after a word to the peer
            pass
        elif isinstance(transport, asyncio.Transport):  # a stream socket's transport always is
            transport.abort()
        else:
            transport.close()
        now = asyncio.get_running_loop().time()
        if now - self._logged_at < _LOG_EVERY:
            self._unlogged += 1
            return
        more = f" (and {self._unlogged} more refused since the last such line)" if self._unlogged else ""
        log.warning("refused a %s client: " + fmt + "%s", self.role, *args, more)
        self._logged_at, self._unlogged = now, 0

    def _decide(self, pid: int, uid: int) -> Admitted | Refuse:
        """:func:`~clankie.limits.decide` on the held connections, which are listed only when a bound is reached: under
        every bound (the counts kept with :attr:`_peers` say so in O(1)) its verdict is :class:`~clankie.limits.Admit` without one."""
        limits = self.limits
        if (
            (pid == 0 or self._per_pid[pid] < limits.per_pid)
            and (uid == 0 or self._per_uid[uid] < limits.per_uid)
            and len(self._peers) < limits.max_connections
        ):
            return Admitted()
        held = [
            Held(key=id(c), pid=p, uid=u, busy=c.busy, idle_since=c.last_activity) for c, (p, u) in self._peers.items()
        ]
        return decide(limits, pid, uid, held)

    def _forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        peer = self._peers.pop(conn, None)
        if peer is not None:
            for counts, key in ((self._per_pid, peer[0]), (self._per_uid, peer[1])):
                counts[key] -= 1
                if not counts[key]:
                    del counts[key]

    async def _watch(self, conn: Connection) -> None:
        try:
            await conn.server_hello(self.limits.hello_timeout)
            if self._on_connect is not None:
                result = self._on_connect(conn)
                if result is not None:
                    await result
            await self._until_closed_or_idle(conn)
        except (ChannelBroken, ChannelClosed, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("%s connection hook failed", self.role)
        finally:
            self._forget(conn)
            if not conn.closed:
                await conn.aclose()

    async def _until_closed_or_idle(self, conn: Connection) -> None:
        idle = self.limits.idle_timeout
        if idle is None:
            await conn.wait_closed()
            return
        loop = asyncio.get_running_loop()
        while not conn.closed:
            left = idle if conn.busy else conn.last_activity + idle - loop.time()
            if left <= 0:
                self.idle_closed += 1
                log.info("closing a %s connection idle for %.0fs", self.role, idle)
                conn.abort(f"idle for {idle:g}s")
                return
            with contextlib.suppress(TimeoutError):
                await within(conn.wait_closed(), left)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.aclose()
        self._watchers.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self._sock is None:  # an inherited socket's file belongs to whoever bound it
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Accepted(Connection):
    """A server-side connection that checks its peer before anything is read."""

    def __init__(self, server: Server) -> None:
        super().__init__(
            role=server.role,
            handler=server._handler,
            max_frame=server._max_frame,
            max_output=server._max_output,
            partial_frame_timeout=server._partial_timeout,
            max_inflight=server.limits.max_inflight,
        )
        self._server_ref = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._server_ref._accepted(self, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._server_ref._forget(self)  # its slot is free at once, not when its watcher gets round to it


async def serve(path: Path, role: str, handler: Handler, **kwargs: Any) -> Server:
    """Bind and start a :class:`Server`; close it with ``await server.close()``."""
    server = Server(path, role, handler, **kwargs)
    await server.start()
    return server


async def connect(
    path: Path,
    role: str,
    handler: Handler | None = None,
    *,
    timeout: float = HELLO_TIMEOUT,
    max_frame: int = framing.DEFAULT_MAX_FRAME,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_inflight: int = DEFAULT_MAX_INFLIGHT,
) -> Connection:
    """Dial a server, exchange hellos, and return the live connection."""
    loop = asyncio.get_running_loop()
    conn = Connection(role=role, handler=handler, max_frame=max_frame, max_output=max_output, max_inflight=max_inflight)
    try:
        await within(loop.create_unix_connection(lambda: conn, os.fspath(path)), timeout)
    except (OSError, TimeoutError) as exc:
        raise ChannelBroken(f"cannot connect to {path.name}: {exc}") from exc
    return await _hello(conn, timeout)


async def from_socket(
    sock: socket.socket,
    role: str,
    handler: Handler | None = None,
    *,
    initiate: bool,
    timeout: float = HELLO_TIMEOUT,
    max_frame: int = framing.DEFAULT_MAX_FRAME,
    attachment_root: str | None = None,
) -> Connection:
    """Wrap a connected socket (the supervisor link); ``initiate`` sends the hello."""
    conn = Connection(role=role, handler=handler, max_frame=max_frame, attachment_root=attachment_root)
    await asyncio.get_running_loop().create_unix_connection(lambda: conn, sock=sock)
    if initiate:
        return await _hello(conn, timeout)
    await conn.server_hello(timeout)
    return conn


async def _hello(conn: Connection, timeout: float) -> Connection:
    try:
        await conn.client_hello(timeout)
    except BaseException:
        await conn.aclose()
        raise
    return conn
