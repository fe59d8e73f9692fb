"""Sans-IO frame codec: a 4-byte big-endian length, then one msgpack object.

No sockets live here. Feed bytes in with :meth:`FrameDecoder.feed` (``b""``
means end of stream), take messages out with :meth:`FrameDecoder.next_message`,
and turn objects into bytes with :func:`encode`. The size limit is checked on
the length prefix, before a single byte of the body is buffered, so a peer
that announces 4 GiB costs us four bytes.

Decoding is strict: strings must be UTF-8 (``raw=False``), map keys must be
strings or bytes, ext types are refused, and the container sizes msgpack
reads are bounded by the frame itself, so an ``array32`` header that claims
100 million elements fails without allocating them.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

import msgpack

from clankie.errors import LocalProtocolError, RemoteProtocolError
from clankie.protocol import Code

DEFAULT_MAX_FRAME = 1024 * 1024
HEADER = struct.Struct(">I")


class Sentinel(enum.Enum):
    """Markers returned by :meth:`FrameDecoder.next_message` instead of a message."""

    NEED_DATA = "need_data"
    EOF = "eof"


NEED_DATA = Sentinel.NEED_DATA
EOF = Sentinel.EOF


def _refuse_ext(code: int, data: bytes) -> Any:
    raise RemoteProtocolError(f"msgpack ext type {code} is not allowed")


def encode(obj: Any, *, max_frame_size: int = DEFAULT_MAX_FRAME) -> bytes:
    """Serialise one object as a frame; refuse anything the peer would refuse."""
    return FrameEncoder(max_frame_size).encode(obj)


class FrameEncoder:
    """Turns messages into frames, reusing one msgpack packer (one encoder per connection)."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame_size = max_frame_size
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=True)

    def encode(self, obj: Any) -> bytes:
        """Serialise one object as a frame; refuse anything the peer would refuse."""
        try:
            body = self._packer.pack(obj)
        except (TypeError, ValueError, OverflowError) as exc:
            self._packer.reset()
            raise LocalProtocolError(f"cannot encode message: {exc}") from exc
        return _frame(body, self.max_frame_size)


def _frame(body: bytes, max_frame_size: int) -> bytes:
    if len(body) > max_frame_size:
        raise LocalProtocolError(
            f"message of {len(body)} bytes exceeds the {max_frame_size}-byte frame limit",
            code=Code.MESSAGE_TOO_LARGE,
        )
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> Any:
    """Decode one frame body strictly; every failure is the peer's fault."""
    n = len(body)
    try:
        return msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            ext_hook=_refuse_ext,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=n,
            max_map_len=n // 2,
            max_ext_len=0,
        )
    except RemoteProtocolError:
        raise
    except Exception as exc:  # msgpack raises a zoo of types for bad input
        raise RemoteProtocolError(f"malformed msgpack body: {type(exc).__name__}") from exc


class FrameDecoder:
    """Turns a byte stream into messages, one frame at a time."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._eof = False
        self._need: int | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet turned into a message."""
        return len(self._buf)

    @property
    def mid_frame(self) -> bool:
        """True while part of a frame has arrived and the rest has not."""
        return bool(self._buf) or self._need is not None

    def feed(self, data: bytes) -> None:
        """Add received bytes; ``b""`` marks the end of the stream."""
        if self._eof:
            if data:
                raise LocalProtocolError("data fed after EOF")
            return
        if not data:
            self._eof = True
            return
        self._buf += data

    def next_message(self) -> Any:
        """Return the next whole message, :data:`NEED_DATA`, or :data:`EOF`.

        Raises :class:`RemoteProtocolError` for an oversized length prefix or
        a body that is not strict msgpack; the stream cannot be trusted after
        an oversized prefix, so callers close the connection then.
        """
        buf = self._buf
        need = self._need
        if need is None:
            if len(buf) < 4:
                return self._end_or_wait()
            need = int.from_bytes(buf[:4], "big")
            if need > self.max_frame_size:
                raise RemoteProtocolError(
                    f"frame of {need} bytes exceeds the {self.max_frame_size}-byte limit",
                    code=Code.MESSAGE_TOO_LARGE,
                )
            del buf[:4]
            self._need = need
        if len(buf) < need:
            return self._end_or_wait()
        body = bytes(buf[:need])
        del buf[:need]
        self._need = None
        return decode_body(body)

    def _end_or_wait(self) -> Sentinel:
        if not self._eof:
            return NEED_DATA
        if self._buf or self._need is not None:
            raise RemoteProtocolError("stream ended in the middle of a frame")
        return EOF
