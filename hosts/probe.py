"""The ``clankiectl doctor`` probe: a tiny deterministic PNG a host writes through its normal artifact path.

The picture is 8×8 pixels of one colour with a ``tEXt`` chunk naming the
host, built with :mod:`zlib` alone, so the same host always writes the same
bytes (and the same ref) and the probe never depends on a browser or a
renderer being up: it proves the *path* from writer to reader, nothing else.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZE = 8


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def probe_png(label: str) -> bytes:
    """The probe picture for one host (``label`` is its name, ASCII)."""
    header = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    row = b"\x00" + bytes((0x2E, 0x86, 0xC1)) * SIZE  # filter byte, then the pixels
    text = b"Comment\x00clankie doctor probe: " + label.encode("ascii", "replace")[:64]
    return b"".join(
        (
            SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"tEXt", text),
            _chunk(b"IDAT", zlib.compress(row * SIZE, 9)),
            _chunk(b"IEND", b""),
        )
    )
