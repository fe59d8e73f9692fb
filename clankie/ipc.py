"""The only asyncio socket code: msgpack-RPC connections over Unix sockets.

A :class:`Connection` carries requests in both directions at once: either
side may call the other, many calls may be in flight, and a caller that is
cancelled tells the peer with a ``cancel`` notification so the handler stops
too. Every connection opens with a ``hello`` exchange that refuses a protocol
version mismatch. Everything received is checked at one boundary
(:meth:`Connection._dispatch`): envelopes by :func:`clankie.protocol.parse_envelope`,
params by the record the method table names. Garbage is answered with
``invalid_request`` where a msgid can be read and otherwise drops the
connection; other connections never notice.

:func:`serve` binds a listening socket (0600, in a 0700 directory, with a
stale file from a dead server removed and a live server refused) and checks
each peer's uid with ``SO_PEERCRED``. :func:`connect` dials one.
:func:`from_socket` wraps an already-connected socket, as the supervisor
link uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from clankie import framing, protocol
from clankie.errors import (
    ChannelBroken,
    ChannelClosed,
    ConfigError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from clankie.protocol import Hello, Record

log = logging.getLogger(__name__)

Handler = Callable[["Connection", str, Record], Awaitable[Record | None]]
OnConnect = Callable[["Connection"], Awaitable[None] | None]

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024
DEFAULT_PARTIAL_FRAME_TIMEOUT = 10.0
HELLO_TIMEOUT = 5.0
READ_CHUNK = 256 * 1024
_PEERCRED = struct.Struct("3i")


async def _no_handler(conn: Connection, method: str, params: Record) -> Record | None:
    raise RemoteError("method_not_found", f"{conn.role} serves no methods")


class Connection:
    """One msgpack-RPC connection; both ends may call and be called."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        role: str,
        handler: Handler | None = None,
        max_frame: int = framing.DEFAULT_MAX_FRAME,
        max_output: int = DEFAULT_MAX_OUTPUT,
        partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT,
    ) -> None:
        self.role = role
        self.peer: Hello | None = None
        self._reader = reader
        self._writer = writer
        self._handler = handler or _no_handler
        self._max_frame = max_frame
        self._max_output = max_output
        self._partial_timeout = partial_frame_timeout
        self._decoder = framing.FrameDecoder(max_frame)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._handling: dict[int, asyncio.Task[None]] = {}
        self._closed: BaseException | None = None
        self._done = asyncio.Event()
        self._reader_task: asyncio.Task[None] | None = None
        self._hello_seen = asyncio.get_running_loop().create_future()

    # ------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def peer_role(self) -> str | None:
        return self.peer.role if self.peer else None

    async def request(self, method: str, params: Record, *, timeout: float | None = None) -> Record:
        """Call ``method`` on the peer and return its validated result record.

        Raises :class:`RemoteError` for an error reply, :class:`ChannelBroken`
        or :class:`ChannelClosed` if the connection goes away first, and
        :class:`RequestTimeout` if ``timeout`` runs out.
        """
        spec = self._spec(method)
        if spec.result is None:
            raise ValueError(f"{method} is a notification; use notify()")
        raw = await self._call(method, params.to_wire(), timeout)
        return protocol.validate(spec.result, raw)

    async def notify(self, method: str, params: Record) -> None:
        """Send a notification; no reply comes back."""
        self._spec(method)
        self._send(protocol.notification(method, params.to_wire()))

    async def aclose(self) -> None:
        """Close from our side; pending calls fail with :class:`ChannelClosed`."""
        self._shutdown(ChannelClosed("connection closed by us"))
        await self.wait_closed()

    async def wait_closed(self) -> None:
        await self._done.wait()
        if self._reader_task is not None and self._reader_task is not asyncio.current_task():
            with contextlib.suppress(BaseException):
                await self._reader_task

    @property
    def close_reason(self) -> BaseException | None:
        return self._closed

    # ------------------------------------------------------------ start-up

    def start(self) -> None:
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"ipc-read-{self.role}")

    async def client_hello(self, timeout: float = HELLO_TIMEOUT) -> Hello:
        hello = Hello(role=self.role, pid=os.getpid(), protocol=protocol.PROTOCOL_VERSION)
        await self._call("hello", hello.to_wire(), timeout)
        assert self.peer is not None  # set by _dispatch when the reply arrived
        return self.peer

    async def server_hello(self, timeout: float = HELLO_TIMEOUT) -> Hello:
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._hello_seen)
        except TimeoutError:
            self._shutdown(ChannelBroken("peer sent no hello"))
            raise ChannelBroken("peer sent no hello") from None
        assert self.peer is not None
        return self.peer

    # ------------------------------------------------------------ internals

    def _spec(self, method: str) -> protocol.Method:
        table = protocol.METHODS.get(self.peer_role or "", {})
        spec = table.get(method)
        if spec is None:
            raise ValueError(f"{self.peer_role} does not serve {method!r}")
        return spec

    async def _call(self, method: str, params: Any, timeout: float | None) -> Any:
        if self._closed is not None:
            raise self._closed_error()
        msgid = 0 if method == "hello" else next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msgid] = fut
        try:
            self._send(protocol.request(msgid, method, params))
            if timeout is None:
                return await fut
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            self._cancel_remote(msgid)
            raise RequestTimeout(f"{method} got no reply within {timeout:.1f}s") from None
        except asyncio.CancelledError:
            self._cancel_remote(msgid)
            raise
        finally:
            self._pending.pop(msgid, None)

    def _cancel_remote(self, msgid: int) -> None:
        if self._closed is None and msgid != 0:
            with contextlib.suppress(ChannelBroken, ChannelClosed):
                self._send(protocol.notification("cancel", {"msgid": msgid}))

    def _closed_error(self) -> BaseException:
        reason = self._closed
        if isinstance(reason, ChannelClosed):
            return ChannelClosed(str(reason))
        err = ChannelBroken(str(reason))
        err.__cause__ = reason
        return err

    def _send(self, message: list[Any]) -> None:
        if self._closed is not None:
            raise self._closed_error()
        data = framing.encode(message, max_frame_size=self._max_frame)
        self._writer.write(data)
        transport = self._writer.transport
        if transport.get_write_buffer_size() > self._max_output:
            log.warning("peer %s is not reading; dropping the connection", self.peer_role or "?")
            self._shutdown(ChannelBroken("peer stopped reading; output queue is full"), abort=True)
            raise self._closed_error()

    async def _read_loop(self) -> None:
        try:
            while True:
                msg = self._decoder.next_message()
                if msg is framing.NEED_DATA:
                    await self._receive_more()
                    continue
                if msg is framing.EOF:
                    self._shutdown(ChannelBroken("peer closed the connection"))
                    return
                self._dispatch(msg)
        except RemoteProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer_role or "unknown peer", exc)
            with contextlib.suppress(Exception):
                if exc.code == "message_too_large":
                    self._send(protocol.notification("error", protocol.error_map(exc.code, str(exc))))
            self._shutdown(ChannelBroken(f"protocol violation: {exc}"))
        except (ConnectionError, OSError) as exc:
            self._shutdown(ChannelBroken(f"connection lost: {exc}"))
        except asyncio.CancelledError:
            self._shutdown(ChannelClosed("reader cancelled"))
            raise

    async def _receive_more(self) -> None:
        if self._decoder.mid_frame:
            try:
                async with asyncio.timeout(self._partial_timeout):
                    data = await self._reader.read(READ_CHUNK)
            except TimeoutError:
                raise RemoteProtocolError("peer stalled in the middle of a frame") from None
        else:
            data = await self._reader.read(READ_CHUNK)
        self._decoder.feed(data)

    def _dispatch(self, raw: Any) -> None:
        try:
            env = protocol.parse_envelope(raw)
        except protocol.BadEnvelope as exc:
            if exc.msgid is None:
                raise
            self._reply_error(exc.msgid, "invalid_request", str(exc))
            return
        if isinstance(env, protocol.Response):
            fut = self._pending.get(env.msgid)
            if fut is None or fut.done():
                return  # a reply to a call we gave up on
            if env.error is None and env.msgid == 0 and self.peer is None:
                self._accept_server_hello(env.result, fut)
            elif env.error is not None:
                fut.set_exception(RemoteError(env.error["code"], env.error.get("message", "")))
            else:
                fut.set_result(env.result)
            return
        if self.peer is None and not (isinstance(env, protocol.Request) and env.method == "hello"):
            raise RemoteProtocolError("first message must be hello")
        if isinstance(env, protocol.Request):
            self._on_request(env)
        else:
            self._on_notification(env)

    def _accept_server_hello(self, raw: Any, fut: asyncio.Future[Any]) -> None:
        peer = protocol.validate(Hello, raw)  # a bad hello reply is a protocol violation
        assert isinstance(peer, Hello)
        self.peer = peer
        if not self._hello_seen.done():
            self._hello_seen.set_result(None)
        fut.set_result(raw)

    def _on_request(self, req: protocol.Request) -> None:
        if req.method == "hello":
            self._on_hello(req)
            return
        if req.msgid in self._handling:
            self._reply_error(req.msgid, "invalid_request", "msgid already in flight")
            return
        spec = protocol.METHODS.get(self.role, {}).get(req.method)
        if spec is None or spec.result is None:
            self._reply_error(req.msgid, "method_not_found", f"unknown method {req.method[:64]!r}")
            return
        try:
            params = protocol.validate(spec.params, req.params)
        except RemoteProtocolError as exc:
            self._reply_error(req.msgid, "invalid_request", str(exc))
            return
        task = asyncio.get_running_loop().create_task(self._handle(req.msgid, req.method, params))
        self._handling[req.msgid] = task

    def _on_hello(self, req: protocol.Request) -> None:
        try:
            hello = protocol.validate(Hello, req.params)
        except RemoteProtocolError as exc:
            self._reply_error(req.msgid, "invalid_request", str(exc))
            raise
        assert isinstance(hello, Hello)
        if hello.protocol != protocol.PROTOCOL_VERSION:
            self._reply_error(
                req.msgid,
                "protocol_mismatch",
                f"peer speaks protocol {hello.protocol}, we speak {protocol.PROTOCOL_VERSION}",
            )
            raise RemoteProtocolError("protocol version mismatch", code="protocol_mismatch")
        if self.peer is not None:
            self._reply_error(req.msgid, "invalid_request", "hello already received")
            return
        self.peer = hello
        mine = Hello(role=self.role, pid=os.getpid(), protocol=protocol.PROTOCOL_VERSION)
        self._send(protocol.response(req.msgid, None, mine.to_wire()))
        if not self._hello_seen.done():
            self._hello_seen.set_result(None)

    def _on_notification(self, note: protocol.Notification) -> None:
        if note.method == "cancel":
            msgid = note.params.get("msgid") if isinstance(note.params, dict) else None
            task = self._handling.get(msgid) if isinstance(msgid, int) else None
            if task is not None:
                task.cancel()
            return
        if note.method == "error":
            return  # the peer is about to close on us; the reader sees EOF next
        spec = protocol.METHODS.get(self.role, {}).get(note.method)
        if spec is None:
            log.warning("ignoring unknown notification %r from %s", note.method[:64], self.peer_role)
            return
        try:
            params = protocol.validate(spec.params, note.params)
        except RemoteProtocolError as exc:
            log.warning("ignoring malformed %s notification: %s", note.method, exc)
            return
        asyncio.get_running_loop().create_task(self._notify_handler(note.method, params))

    async def _notify_handler(self, method: str, params: Record) -> None:
        try:
            await self._handler(self, method, params)
        except Exception:
            log.exception("notification handler for %s failed", method)

    async def _handle(self, msgid: int, method: str, params: Record) -> None:
        try:
            result = await self._handler(self, method, params)
        except RemoteError as exc:
            self._reply_error(msgid, exc.code, exc.message)
        except asyncio.CancelledError:
            self._reply_error(msgid, "cancelled", f"{method} was cancelled")
        except (ChannelBroken, ChannelClosed):
            pass
        except Exception:
            log.exception("handler for %s failed", method)
            self._reply_error(msgid, "internal_error", f"{method} failed inside {self.role}")
        else:
            with contextlib.suppress(ChannelBroken, ChannelClosed):
                wire = result.to_wire() if result is not None else {}
                self._send(protocol.response(msgid, None, wire))
        finally:
            self._handling.pop(msgid, None)

    def _reply_error(self, msgid: int, code: str, message: str) -> None:
        with contextlib.suppress(ChannelBroken, ChannelClosed):
            self._send(protocol.response(msgid, protocol.error_map(code, message), None))

    def _shutdown(self, reason: BaseException, *, abort: bool = False) -> None:
        if self._closed is not None:
            return
        self._closed = reason
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._closed_error())
        for task in self._handling.values():
            task.cancel()
        if not self._hello_seen.done():
            self._hello_seen.cancel()
        with contextlib.suppress(Exception):
            if abort:
                self._writer.transport.abort()
            else:
                self._writer.close()
        if self._reader_task is not None and self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()
        self._done.set()


# ---------------------------------------------------------------- peer checks


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid


def peer_allowed(uid: int) -> bool:
    return uid == os.getuid() or uid == 0


# ---------------------------------------------------------------- server


class Server:
    """A listening Unix socket; each accepted peer gets its own :class:`Connection`."""

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
    ) -> None:
        self.path = path
        self.role = role
        self._handler = handler
        self._on_connect = on_connect
        self._opts = {"max_frame": max_frame, "max_output": max_output, "partial_frame_timeout": partial_frame_timeout}
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[Connection] = set()
        self.refused = 0

    async def start(self) -> None:
        await _clear_stale_socket(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(os.fspath(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(128)
        sock.setblocking(False)
        self._server = await asyncio.start_unix_server(self._accept, sock=sock, limit=READ_CHUNK)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = peer_uid(sock)
        if not peer_allowed(uid):
            self.refused += 1
            log.warning("refused a %s client running as uid %d", self.role, uid)
            writer.transport.abort()
            return
        conn = Connection(reader, writer, role=self.role, handler=self._handler, **self._opts)  # type: ignore[arg-type]
        self.connections.add(conn)
        conn.start()
        try:
            await conn.server_hello()
            if self._on_connect is not None:
                result = self._on_connect(conn)
                if result is not None:
                    await result
            await conn.wait_closed()
        except (ChannelBroken, ChannelClosed, asyncio.CancelledError):
            pass
        finally:
            self.connections.discard(conn)
            if not conn.closed:
                await conn.aclose()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.aclose()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _clear_stale_socket(path: Path) -> None:
    """Unlink a socket file nobody answers on; refuse to start over a live one."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"{path} exists and is not a socket; refusing to replace it")
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(os.fspath(path)), 1.0)
    except (ConnectionRefusedError, FileNotFoundError, TimeoutError, OSError):
        log.info("removing stale socket %s", path)
        path.unlink(missing_ok=True)
        return
    writer.close()
    raise ConfigError(f"another server is already listening on {path}")


async def serve(path: Path, role: str, handler: Handler, **kwargs: Any) -> Server:
    """Bind and start a :class:`Server`; close it with ``await server.close()``."""
    server = Server(path, role, handler, **kwargs)
    await server.start()
    return server


# ---------------------------------------------------------------- clients


async def connect(
    path: Path,
    role: str,
    handler: Handler | None = None,
    *,
    timeout: float = HELLO_TIMEOUT,
    max_frame: int = framing.DEFAULT_MAX_FRAME,
    max_output: int = DEFAULT_MAX_OUTPUT,
) -> Connection:
    """Dial a server, exchange hellos, and return the live connection."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(os.fspath(path), limit=READ_CHUNK), timeout
        )
    except (OSError, TimeoutError) as exc:
        raise ChannelBroken(f"cannot connect to {path.name}: {exc}") from exc
    return await _start_client(reader, writer, role, handler, timeout, max_frame, max_output)


async def from_socket(
    sock: socket.socket,
    role: str,
    handler: Handler | None = None,
    *,
    initiate: bool,
    timeout: float = HELLO_TIMEOUT,
    max_frame: int = framing.DEFAULT_MAX_FRAME,
) -> Connection:
    """Wrap a connected socket (the supervisor link); ``initiate`` sends the hello."""
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=READ_CHUNK)
    if initiate:
        return await _start_client(reader, writer, role, handler, timeout, max_frame, DEFAULT_MAX_OUTPUT)
    conn = Connection(reader, writer, role=role, handler=handler, max_frame=max_frame)
    conn.start()
    await conn.server_hello(timeout)
    return conn


async def _start_client(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    role: str,
    handler: Handler | None,
    timeout: float,
    max_frame: int,
    max_output: int,
) -> Connection:
    conn = Connection(reader, writer, role=role, handler=handler, max_frame=max_frame, max_output=max_output)
    conn.start()
    try:
        await conn.client_hello(timeout)
    except BaseException:
        await conn.aclose()
        raise
    return conn
