"""One msgpack-RPC connection, as an asyncio protocol.

Either end may call the other, many calls may be in flight, and a caller
that is cancelled tells the peer with a ``cancel`` notification so the
handler stops too. Bytes are decoded in ``data_received`` itself (no reader
task, no extra trip through the event loop), checked at one boundary
(:meth:`Connection._dispatch`), and handed to the handler in a task of their
own. Garbage is answered with ``invalid_request`` where a msgid can be read;
otherwise the connection is dropped and nobody else notices.

The byte stream under it (framing, its limits, closing) is
:class:`clankie.channel.Channel`; socket set-up (listening, dialling, peer
checks) lives in :mod:`clankie.ipc`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, overload

from clankie import framing, protocol
from clankie.channel import DEFAULT_MAX_OUTPUT, DEFAULT_PARTIAL_FRAME_TIMEOUT, Channel
from clankie.errors import (
    ChannelBroken,
    ChannelClosed,
    LocalProtocolError,
    RemoteError,
    RemoteProtocolError,
    RequestTimeout,
)
from clankie.limits import DEFAULT_MAX_INFLIGHT
from clankie.protocol import Code, Hello, Record
from clankie.tasks import TaskSet

log = logging.getLogger(__name__)

REFUSE_LINGER = 5.0
"""Seconds a refused peer is given to read why before its connection is dropped."""

R = TypeVar("R", bound=Record)

Handler = Callable[["Connection", str, Record], Awaitable[Record | None]]

HELLO_TIMEOUT = 5.0

# DEFAULT_MAX_INFLIGHT (clankie.limits): handlers (requests and notifications) one connection runs
# at once. Past it a request is answered ``too_many_requests`` and a notification is dropped;
# both are counted (``over_cap``) and logged.

_LOG_EVERY = 5.0  # seconds between two "over the in-flight cap" warnings


async def _no_handler(conn: Connection, method: str, params: Record) -> Record | None:
    raise RemoteError(Code.METHOD_NOT_FOUND, f"{conn.role} serves no methods")


class Connection(Channel):
    """One msgpack-RPC connection; both ends may call and be called."""

    def __init__(
        self,
        *,
        role: str,
        handler: Handler | None = None,
        max_frame: int = framing.DEFAULT_MAX_FRAME,
        max_output: int = DEFAULT_MAX_OUTPUT,
        partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT,
        attachment_root: str | None = None,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
    ) -> None:
        super().__init__(max_frame=max_frame, max_output=max_output, partial_frame_timeout=partial_frame_timeout)
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.role = role
        self.max_inflight = max_inflight
        self.over_cap = 0  # requests refused and notifications dropped at max_inflight
        self._unlogged = 0
        self._logged_at = -_LOG_EVERY
        self.attachment_root = attachment_root
        self.peer: Hello | None = None
        self.caller: tuple[int, int] | None = None  # (pid, uid) a server read from SO_PEERCRED at accept, for audits
        self._handler = handler or _no_handler
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._handling: dict[int, asyncio.Task[None]] = {}
        self._tasks = TaskSet(f"{role} handlers", max_inflight)
        self._hello_seen: asyncio.Future[None] = self._loop.create_future()

    # ------------------------------------------------------------ public API

    @property
    def busy(self) -> bool:
        """A call is in flight in either direction (an idle timeout must not cut it)."""
        return bool(self._handling or self._pending)

    @property
    def peer_role(self) -> str | None:
        return self.peer.role if self.peer else None

    @overload
    async def request(self, method: str, params: Record, *, expect: type[R], timeout: float | None = None) -> R: ...
    @overload
    async def request(self, method: str, params: Record, *, expect: None = None, timeout: float | None = None) -> Record: ...

    async def request(self, method: str, params: Record, *, expect: type[Record] | None = None,
                      timeout: float | None = None) -> Record:
        """Call ``method`` on the peer and return its validated result record.

        With ``expect`` the reply comes back typed as that record; an ``expect``
        that is not the method table's reply type is a ``TypeError`` before anything is sent.
        Raises :class:`RemoteError` for an error reply, :class:`ChannelBroken`
        or :class:`ChannelClosed` if the connection goes away first, and
        :class:`RequestTimeout` if ``timeout`` runs out.
        """
        spec = self._spec(method)
        if spec.result is None:
            raise ValueError(f"{method} is a notification; use notify()")
        if expect is not None and expect is not spec.result:
            raise TypeError(f"{method} replies {spec.result.__name__}, not {expect.__name__}")
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

    def refuse(self, code: str, message: str) -> None:
        """Answer the hello the peer is about to send with ``code`` and close (a server refusing the peer)."""
        self._reply_error(0, code, message)
        self._shutdown(ChannelClosed(f"refused: {code}"), linger=REFUSE_LINGER)

    def abort(self, why: str) -> None:
        """Drop the connection now (the server's idle timeout or eviction); pending calls fail as broken."""
        self._shutdown(ChannelBroken(why), abort=True)

    async def client_hello(self, timeout: float = HELLO_TIMEOUT) -> Hello:
        hello = self._my_hello()
        await self._call("hello", hello.to_wire(), timeout)
        assert self.peer is not None  # set by _dispatch when the reply arrived
        return self.peer

    async def server_hello(self, timeout: float = HELLO_TIMEOUT) -> Hello:
        """Wait for the peer's hello; a silent peer is ChannelBroken, a cancelled caller stays cancelled."""
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._hello_seen)
        except TimeoutError:
            if self._closed is None:
                self._shutdown(ChannelBroken("peer sent no hello"))
                raise ChannelBroken("peer sent no hello") from None
            raise self._closed_error() from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                self._shutdown(ChannelClosed("hello wait cancelled"))
                raise
            raise self._closed_error() from None  # _shutdown cancelled _hello_seen: the connection closed
        assert self.peer is not None
        return self.peer

    def _my_hello(self) -> Hello:
        return Hello(
            role=self.role, pid=os.getpid(), protocol=protocol.PROTOCOL_VERSION, attachment_root=self.attachment_root
        )

    # ------------------------------------------------------------ internals

    def _spec(self, method: str) -> protocol.Method:
        spec = protocol.METHODS.get(self.peer_role or "", {}).get(method)
        if spec is None:
            raise ValueError(f"{self.peer_role} does not serve {method!r}")
        return spec

    async def _call(self, method: str, params: Any, timeout: float | None) -> Any:
        if self._closed is not None:
            raise self._closed_error()
        msgid = 0 if method == "hello" else next(self._ids)
        fut: asyncio.Future[Any] = self._loop.create_future()
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

    def _dispatch(self, raw: Any) -> None:
        try:
            env = protocol.parse_envelope(raw)
        except protocol.BadEnvelope as exc:
            if exc.msgid is None:
                raise
            self._reply_error(exc.msgid, Code.INVALID_REQUEST, str(exc))
            return
        if isinstance(env, protocol.Response):
            self._on_response(env)
            return
        if self.peer is None and not (isinstance(env, protocol.Request) and env.method == "hello"):
            raise RemoteProtocolError("first message must be hello")
        if isinstance(env, protocol.Request):
            self._on_request(env)
        else:
            self._on_notification(env)

    def _on_response(self, env: protocol.Response) -> None:
        fut = self._pending.get(env.msgid)
        if fut is None and env.msgid == 0 and env.error is not None and self.peer is None:
            # the server refused us before our hello was on its way: the hello fails with its code
            self._shutdown(RemoteError(env.error["code"], env.error.get("message", "")))
            return
        if fut is None or fut.done():
            return  # a reply to a call we gave up on
        if env.error is not None:
            fut.set_exception(RemoteError(env.error["code"], env.error.get("message", "")))
            return
        if env.msgid == 0 and self.peer is None:
            peer = protocol.validate(Hello, env.result)  # a bad hello reply is a violation
            self.peer = peer
            if not self._hello_seen.done():
                self._hello_seen.set_result(None)
        fut.set_result(env.result)

    def _on_request(self, req: protocol.Request) -> None:
        if req.method == "hello":
            self._on_hello(req)
            return
        if req.msgid in self._handling:
            self._reply_error(req.msgid, Code.INVALID_REQUEST, "msgid already in flight")
            return
        spec = protocol.METHODS.get(self.role, {}).get(req.method)
        if spec is None or spec.result is None:
            self._reply_error(req.msgid, Code.METHOD_NOT_FOUND, f"unknown method {req.method[:64]!r}")
            return
        try:
            params = protocol.validate(spec.params, req.params)
        except RemoteProtocolError as exc:
            self._reply_error(req.msgid, Code.INVALID_REQUEST, str(exc))
            return
        if self._at_cap(req.method):
            self._reply_error(req.msgid, Code.TOO_MANY_REQUESTS,
                              f"{self.role} already runs {self.max_inflight} calls on this connection")
            return
        task = self._spawn(self._handle(req.msgid, req.method, params))
        if not task.done():  # an eagerly started handler that already answered has popped itself
            self._handling[req.msgid] = task

    def _on_hello(self, req: protocol.Request) -> None:
        try:
            hello = protocol.validate(Hello, req.params)
        except RemoteProtocolError as exc:
            self._reply_error(req.msgid, Code.INVALID_REQUEST, str(exc))
            raise
        if hello.protocol != protocol.PROTOCOL_VERSION:
            self._reply_error(
                req.msgid,
                Code.PROTOCOL_MISMATCH,
                f"peer speaks protocol {hello.protocol}, we speak {protocol.PROTOCOL_VERSION}",
            )
            raise RemoteProtocolError("protocol version mismatch", code=Code.PROTOCOL_MISMATCH)
        if self.peer is not None:
            self._reply_error(req.msgid, Code.INVALID_REQUEST, "hello already received")
            return
        self.peer = hello
        self._send(protocol.response(req.msgid, None, self._my_hello().to_wire()))
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
            return  # the peer is about to close on us
        spec = protocol.METHODS.get(self.role, {}).get(note.method)
        if spec is None:
            log.warning("ignoring unknown notification %r from %s", note.method[:64], self.peer_role)
            return
        try:
            params = protocol.validate(spec.params, note.params)
        except RemoteProtocolError as exc:
            log.warning("ignoring malformed %s notification: %s", note.method, exc)
            return
        if self._at_cap(note.method):
            return  # dropped: counted in over_cap and logged by _at_cap
        self._spawn(self._notify_handler(note.method, params))

    def _at_cap(self, method: str) -> bool:
        """Whether ``max_inflight`` handlers already run; if so, count it and warn (at most once per few seconds)."""
        if not self._tasks.full:
            return False
        self.over_cap += 1
        now = self._loop.time()
        if now - self._logged_at < _LOG_EVERY:
            self._unlogged += 1
            return True
        more = f" (and {self._unlogged} more since the last such line)" if self._unlogged else ""
        log.warning("%s refused %s from %s: %d calls already in flight on this connection%s",
                    self.role, method[:64], self.peer_role, self.max_inflight, more)
        self._logged_at, self._unlogged = now, 0
        return True

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Give a handler its own task; on Python 3.12+ it starts eagerly, inside this call,
        so an answer that needs no waiting costs no extra trip through the event loop."""
        return self._tasks.spawn(coro, eager=True)  # one that finished eagerly is not held: not in max_inflight

    async def _notify_handler(self, method: str, params: Record) -> None:
        try:
            await self._handler(self, method, params)
        except (ChannelBroken, ChannelClosed, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("notification handler for %s failed", method)

    async def _handle(self, msgid: int, method: str, params: Record) -> None:
        try:
            result = await self._handler(self, method, params)
        except RemoteError as exc:
            self._reply_error(msgid, exc.code, exc.message)
        except asyncio.CancelledError:
            self._reply_error(msgid, Code.CANCELLED, f"{method} was cancelled")
        except (ChannelBroken, ChannelClosed):
            pass
        except Exception:
            log.exception("handler for %s failed", method)
            self._reply_error(msgid, Code.INTERNAL_ERROR, f"{method} failed inside {self.role}")
        else:
            try:
                self._send(protocol.response(msgid, None, result.to_wire() if result is not None else {}))
            except (ChannelBroken, ChannelClosed):
                pass
            except LocalProtocolError as exc:
                log.warning("reply to %s not sent: %s", method, exc)
                code = exc.code if exc.code == Code.MESSAGE_TOO_LARGE else Code.INTERNAL_ERROR
                self._reply_error(msgid, code, f"the reply to {method} could not be sent: {exc}")
        finally:
            self._handling.pop(msgid, None)
            self.last_activity = self._loop.time()

    def _reply_error(self, msgid: int, code: str, message: str) -> None:
        with contextlib.suppress(ChannelBroken, ChannelClosed):
            self._send(protocol.response(msgid, protocol.error_map(code, message), None))

    def _on_close(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._closed_error())
        self._tasks.cancel()
        if not self._hello_seen.done():
            self._hello_seen.cancel()
