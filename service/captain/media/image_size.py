"""An image's pixel size from its file header (pure, no image library).

The model API rejects an image over 8000 px on a side, which would fail the
whole turn, so inbound images are measured before they are shown. Only the
header is read: PNG's IHDR, GIF's logical screen descriptor, JPEG's first
SOFn marker, WebP's VP8 / VP8L / VP8X chunk. Every read is bounds-checked and
the JPEG marker walk only moves forward, so a hostile or truncated file
yields ``None`` (not measurable), never an exception, a loop or an over-read.
"""

from __future__ import annotations

import struct

MAX_SIDE = 8000
"""The model API's limit on an image's width and height, in pixels."""

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# SOF0..SOF15 carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# markers with no length field: TEM, RST0..7 (SOI/EOI handled explicitly)
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def dimensions(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels, or None when the header is missing, truncated or malformed."""
    if data.startswith(_PNG_MAGIC):
        return _png(data)
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return _gif(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    return None


def fits_model(size: tuple[int, int]) -> bool:
    """Whether the model API accepts an image of this size (at most :data:`MAX_SIDE` on each side)."""
    width, height = size
    return width <= MAX_SIDE and height <= MAX_SIDE


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _png(data: bytes) -> tuple[int, int] | None:
    # signature (8), chunk length (4), b"IHDR" (4), width (4), height (4)
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return _positive(width, height)


def _gif(data: bytes) -> tuple[int, int] | None:
    if len(data) < 10:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return _positive(width, height)


def _jpeg(data: bytes) -> tuple[int, int] | None:
    pos, end = 2, len(data)
    while pos < end:
        if data[pos] != 0xFF:
            return None  # not at a marker: garbage between segments
        while pos < end and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= end:
            return None
        marker = data[pos]
        pos += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD8, 0xD9, 0xDA, 0x00):
            return None  # SOI again, EOI or start of scan before any frame header, or a stray 0xFF00
        if pos + 2 > end:
            return None
        (length,) = struct.unpack(">H", data[pos : pos + 2])
        if length < 2:
            return None  # a length that would not move forward
        if marker in _JPEG_SOF:
            # length (2), precision (1), height (2), width (2)
            if length < 7 or pos + 7 > end:
                return None
            height, width = struct.unpack(">HH", data[pos + 3 : pos + 7])
            return _positive(width, height)
        pos += length
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    if len(data) < 20:
        return None
    chunk = data[12:16]
    body = data[20:]
    if chunk == b"VP8 ":
        # frame tag (3), start code 9d 01 2a (3), 14-bit width and height (2 each)
        if len(body) < 10 or body[3:6] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", body[6:10])
        return _positive(width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":
        # signature 0x2f, then 14 bits width-1, 14 bits height-1
        if len(body) < 5 or body[0] != 0x2F:
            return None
        (bits,) = struct.unpack("<I", body[1:5])
        return ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":
        # flags (1), reserved (3), 24-bit canvas width-1 and height-1
        if len(body) < 10:
            return None
        width = int.from_bytes(body[4:7], "little") + 1
        height = int.from_bytes(body[7:10], "little") + 1
        return (width, height)
    return None
