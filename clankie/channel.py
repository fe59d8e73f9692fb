"""The byte side of a connection: framing over an asyncio transport, and how it closes.

:class:`Channel` is an ``asyncio.Protocol`` that turns bytes into decoded
msgpack messages (in ``data_received`` itself, no reader task) and messages
into frames. It owns the limits of the byte stream: a frame over
``max_frame`` or a peer stalled mid-frame for ``partial_frame_timeout``
seconds is a protocol violation; a peer whose unread output passes
``max_output`` is dropped. It knows nothing of requests: each decoded message
goes to :meth:`Channel._dispatch`, and the RPC bookkeeping on top
(:class:`clankie.connection.Connection`) fills in :meth:`Channel._dispatch`
and :meth:`Channel._on_close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from clankie import framing, protocol
from clankie.errors import ChannelBroken, ChannelClosed, RemoteProtocolError
from clankie.protocol import Code

log = logging.getLogger("clankie.connection")  # one logger for a connection, whichever layer speaks

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024
DEFAULT_PARTIAL_FRAME_TIMEOUT = 10.0


class Channel(asyncio.Protocol):
    """Frames in, frames out, and one close reason; the message layer overrides the two hooks."""

    def __init__(
        self,
        *,
        max_frame: int = framing.DEFAULT_MAX_FRAME,
        max_output: int = DEFAULT_MAX_OUTPUT,
        partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT,
    ) -> None:
        self._max_frame = max_frame
        self._max_output = max_output
        self._partial_timeout = partial_frame_timeout
        self._decoder = framing.FrameDecoder(max_frame)
        self._encoder = framing.FrameEncoder(max_frame)
        self._transport: asyncio.Transport | None = None
        self._closed: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        self._stall_timer: asyncio.TimerHandle | None = None
        self.last_activity = self._loop.time()  # loop time of the last byte received or reply sent

    # ------------------------------------------------------------ state

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def close_reason(self) -> BaseException | None:
        return self._closed

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._transport

    @property
    def peer_role(self) -> str | None:
        """Who is at the other end, for log lines (the message layer knows after hello)."""
        return None

    async def wait_closed(self) -> None:
        await self._done.wait()

    # ------------------------------------------------------------ hooks

    def _dispatch(self, raw: Any) -> None:
        """One decoded message; raise :class:`RemoteProtocolError` to drop the peer."""
        raise NotImplementedError

    def _on_close(self) -> None:
        """The channel just closed (``_closed`` is set, the transport not yet closed)."""

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._closed is not None:
            return
        self.last_activity = self._loop.time()
        self._decoder.feed(data)
        try:
            while (msg := self._decoder.next_message()) is not framing.NEED_DATA:
                self._dispatch(msg)
                if self.closed:  # the dispatch may have closed us (a property: mypy must not narrow it)
                    return
        except RemoteProtocolError as exc:
            self._violation(exc)
            return
        self._arm_stall_timer()

    def eof_received(self) -> bool | None:
        self._shutdown(ChannelBroken("peer closed the connection"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        reason = ChannelBroken(f"connection lost: {exc}" if exc else "peer closed the connection")
        reason.__cause__ = exc
        self._shutdown(reason)

    # ------------------------------------------------------------ internals

    def _arm_stall_timer(self) -> None:
        if self._decoder.mid_frame:
            if self._stall_timer is None:
                self._stall_timer = self._loop.call_later(self._partial_timeout, self._stalled_mid_frame)
        elif self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled_mid_frame(self) -> None:
        self._stall_timer = None
        self._violation(RemoteProtocolError("peer stalled in the middle of a frame"))

    def _violation(self, exc: RemoteProtocolError) -> None:
        log.warning("closing connection from %s: %s", self.peer_role or "unknown peer", exc)
        if exc.code == Code.MESSAGE_TOO_LARGE:
            with contextlib.suppress(ChannelBroken, ChannelClosed):
                self._send(protocol.notification("error", protocol.error_map(exc.code, str(exc))))
        self._shutdown(ChannelBroken(f"protocol violation: {exc}"))

    def _closed_error(self) -> BaseException:
        reason = self._closed
        if isinstance(reason, ChannelClosed):
            return ChannelClosed(str(reason))
        err = ChannelBroken(str(reason))
        err.__cause__ = reason
        return err

    def _send(self, message: list[Any]) -> None:
        if self._closed is not None or self._transport is None:
            raise self._closed_error()
        self._transport.write(self._encoder.encode(message))
        if self._transport.get_write_buffer_size() > self._max_output:
            log.warning("peer %s is not reading; dropping the connection", self.peer_role or "?")
            self._shutdown(ChannelBroken("peer stopped reading; output queue is full"), abort=True)
            raise self._closed_error()

    def _shutdown(self, reason: BaseException, *, abort: bool = False, linger: float | None = None) -> None:
        """Close for ``reason``; ``linger``: shut our side only, so the peer reads what we said last even while it is
        still writing (a full close could reset the connection under its unread bytes), and drop it after that long."""
        if self._closed is not None:
            return
        self._closed = reason
        if self._stall_timer is not None:
            self._stall_timer.cancel()
        self._on_close()
        if self._transport is not None:
            if abort:
                self._transport.abort()
            elif linger is not None and isinstance(self._transport, asyncio.WriteTransport):
                self._transport.write_eof()  # what it sends meanwhile is dropped (data_received: closed)
                self._loop.call_later(linger, self._transport.abort)
            else:
                self._transport.close()
        self._done.set()
