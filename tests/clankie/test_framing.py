"""The frame codec: split, merged, oversized and truncated input, without sockets."""

from __future__ import annotations

import struct
import tracemalloc

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clankie import framing
from clankie.errors import LocalProtocolError, RemoteProtocolError


def test_one_frame_round_trips() -> None:
    """A message encoded and fed back comes out unchanged."""
    dec = framing.FrameDecoder()
    dec.feed(framing.encode([0, 1, "turn.submit", {"text": "héllo"}]))
    assert dec.next_message() == [0, 1, "turn.submit", {"text": "héllo"}]
    assert dec.next_message() is framing.NEED_DATA


def test_frame_split_byte_by_byte_is_reassembled() -> None:
    """A frame that arrives one byte at a time still yields exactly one message."""
    data = framing.encode({"a": list(range(50))})
    dec = framing.FrameDecoder()
    for i in range(len(data) - 1):
        dec.feed(data[i : i + 1])
        assert dec.next_message() is framing.NEED_DATA
    dec.feed(data[-1:])
    assert dec.next_message() == {"a": list(range(50))}


def test_merged_frames_come_out_in_order() -> None:
    """Several frames in one read come out one by one, in order."""
    dec = framing.FrameDecoder()
    dec.feed(b"".join(framing.encode(i) for i in range(100)))
    assert [dec.next_message() for _ in range(100)] == list(range(100))
    assert dec.next_message() is framing.NEED_DATA


def test_clean_eof_between_frames() -> None:
    """EOF after a whole frame is a clean end of stream."""
    dec = framing.FrameDecoder()
    dec.feed(framing.encode("x") + b"")
    dec.feed(b"")
    assert dec.next_message() == "x"
    assert dec.next_message() is framing.EOF


def test_eof_inside_a_frame_is_the_peers_fault() -> None:
    """EOF in the middle of a frame is a protocol error, not a silent loss."""
    dec = framing.FrameDecoder()
    dec.feed(framing.encode("hello")[:-2])
    dec.feed(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        dec.next_message()


def test_max_length_prefix_rejected_before_buffering() -> None:
    """A 0xFFFFFFFF length prefix is refused at once, without waiting for or keeping a body."""
    dec = framing.FrameDecoder(max_frame_size=1024)
    dec.feed(b"\xff\xff\xff\xff" + b"x" * 10)
    with pytest.raises(RemoteProtocolError) as info:
        dec.next_message()
    assert info.value.code == "message_too_large"


def test_array32_claiming_100m_elements_is_rejected_without_memory_growth() -> None:
    """An array32 header claiming 100 M elements fails fast and allocates almost nothing."""
    body = b"\xdd" + struct.pack(">I", 100_000_000)
    tracemalloc.start()
    try:
        dec = framing.FrameDecoder()
        dec.feed(struct.pack(">I", len(body)) + body)
        with pytest.raises(RemoteProtocolError):
            dec.next_message()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_ext_types_are_refused() -> None:
    """msgpack ext types are not part of the protocol."""
    body = msgpack.packb(msgpack.ExtType(5, b"abc"))
    dec = framing.FrameDecoder()
    dec.feed(struct.pack(">I", len(body)) + body)
    with pytest.raises(RemoteProtocolError):
        dec.next_message()


def test_non_utf8_strings_and_non_string_map_keys_are_refused() -> None:
    """Strings must be UTF-8 and map keys must not be containers."""
    for body in (b"\xa2\xff\xfe", b"\x81\x91\x01\x01"):
        dec = framing.FrameDecoder()
        dec.feed(struct.pack(">I", len(body)) + body)
        with pytest.raises(RemoteProtocolError):
            dec.next_message()


def test_encoding_an_oversized_message_is_our_bug() -> None:
    """We refuse to send a frame the peer would refuse."""
    with pytest.raises(LocalProtocolError) as info:
        framing.encode("x" * 2000, max_frame_size=1000)
    assert info.value.code == "message_too_large"


def test_encoding_an_unserialisable_object_is_our_bug() -> None:
    """An object msgpack cannot carry is a local protocol error."""
    with pytest.raises(LocalProtocolError):
        framing.encode({"x": object()})


def test_feeding_after_eof_is_a_local_error() -> None:
    """Bytes after EOF mean the caller is confused."""
    dec = framing.FrameDecoder()
    dec.feed(b"")
    with pytest.raises(LocalProtocolError):
        dec.feed(b"x")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    """Any byte string yields messages, NEED_DATA, EOF or a RemoteProtocolError: nothing else."""
    dec = framing.FrameDecoder(max_frame_size=256)
    dec.feed(data)
    dec.feed(b"")
    for _ in range(len(data) + 2):
        try:
            msg = dec.next_message()
        except RemoteProtocolError:
            return
        if msg is framing.EOF:
            return


wire_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(wire_values, st.integers(min_value=1, max_value=64))
def test_any_valid_object_survives_any_split(obj: object, step: int) -> None:
    """Every msgpack value round-trips however the stream is cut."""
    data = framing.encode(obj)
    dec = framing.FrameDecoder()
    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
    assert dec.next_message() == obj
