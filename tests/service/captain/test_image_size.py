"""Reading an image's pixel size from its header: every allowed format, and hostile headers refused without a crash."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from service.captain.media.image_size import MAX_SIDE, dimensions, fits_model

Builder = Callable[[int, int], bytes]


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00"


def jpeg(width: int, height: int, sof: int = 0xC0) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    dht = b"\xff\xc4" + struct.pack(">H", 4) + b"\x00\x00"  # C4 sits in the SOF range but is not a frame header
    frame = bytes([0xFF, sof]) + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + dht + b"\xff\xff" + frame + b"\xff\xd9"


def riff(chunk: bytes, body: bytes) -> bytes:
    payload = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def webp_vp8(width: int, height: int) -> bytes:
    return riff(b"VP8 ", b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\0" * 4)


def webp_vp8l(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    return riff(b"VP8L", b"\x2f" + struct.pack("<I", bits))


def webp_vp8x(width: int, height: int) -> bytes:
    return riff(b"VP8X", b"\x10\0\0\0" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little"))


BUILDERS = [png, gif, jpeg, webp_vp8, webp_vp8l, webp_vp8x]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_each_format_reports_its_width_and_height(build: Builder) -> None:
    """A tiny crafted header of each allowed format yields its width and height, not swapped."""
    assert dimensions(build(300, 17)) == (300, 17)


@pytest.mark.parametrize("build", [png, jpeg, webp_vp8x], ids=lambda b: b.__name__)
def test_a_side_over_8000_px_does_not_fit_the_model(build: Builder) -> None:
    """An image 8001 px wide or tall is too large for the model; exactly 8000 fits."""
    assert fits_model((MAX_SIDE, MAX_SIDE)) and dimensions(build(MAX_SIDE, MAX_SIDE)) == (MAX_SIDE, MAX_SIDE)
    for w, h in ((MAX_SIDE + 1, 10), (10, MAX_SIDE + 1)):
        size = dimensions(build(w, h))
        assert size == (w, h) and not fits_model(size)


def test_progressive_jpeg_frame_headers_are_read_too() -> None:
    """SOF2 (progressive) carries the size just like baseline SOF0."""
    assert dimensions(jpeg(640, 480, sof=0xC2)) == (640, 480)


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "JPEG", "WEBP"])
def test_real_encoder_output_is_measured(fmt: str) -> None:
    """Files written by a real encoder (Pillow) are measured to the pixel."""
    out = io.BytesIO()
    Image.new("RGB", (37, 21), (1, 2, 3)).save(out, fmt)
    assert dimensions(out.getvalue()) == (37, 21)


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_every_truncation_is_refused_not_crashed(build: Builder) -> None:
    """A header cut off anywhere before its size fields gives None rather than an exception or a guess."""
    data = build(300, 17)
    results = {dimensions(data[:n]) for n in range(len(data))}
    assert results <= {None, (300, 17)}
    assert dimensions(data[:9]) is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an image at all",
        b"\x89PNG\r\n\x1a\n" + b"\0\0\0\x0dIHDX" + b"\0" * 8,  # wrong chunk type
        png(0, 10),  # zero-sized
        b"\xff\xd8\xff\xe0\x00\x00",  # segment length 0 would never move forward
        b"\xff\xd8\xff\xe0\x00\x01",  # segment length 1 likewise
        b"\xff\xd8\xff\xda\x00\x08" + b"\0" * 8,  # start of scan before any frame header
        b"\xff\xd8garbage",  # not at a marker
        b"\xff\xd8" + b"\xff" * 10_000,  # only fill bytes
        b"\xff\xd8\xff\xc0\x00\x05\x08\x00",  # frame header shorter than its fields
        riff(b"VP8 ", b"\x00\x00\x00\x00\x00\x00\x10\x00\x10\x00"),  # VP8 without its start code
        riff(b"VP8L", b"\x00\x00\x00\x00\x00"),  # VP8L without its signature
        riff(b"ALPH", b"\0" * 16),  # not a bitstream chunk
    ],
)
def test_hostile_headers_are_refused(data: bytes) -> None:
    """Malformed headers yield None: the image is refused, the service keeps going."""
    assert dimensions(data) is None


def test_a_jpeg_with_many_segments_is_walked_forward_to_its_frame() -> None:
    """Many segments before the frame header are skipped in order, each by its own length."""
    filler = (b"\xff\xfe" + struct.pack(">H", 6) + b"abcd") * 5_000
    data = b"\xff\xd8" + filler + jpeg(12, 34)[2:]
    assert dimensions(data) == (12, 34)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_raise(tail: bytes) -> None:
    """Whatever follows a valid magic number, measuring returns a size or None and never raises."""
    for magic in (b"\x89PNG\r\n\x1a\n", b"GIF89a", b"\xff\xd8", b"RIFF\0\0\0\0WEBP"):
        got = dimensions(magic + tail)
        assert got is None or (got[0] > 0 and got[1] > 0)
