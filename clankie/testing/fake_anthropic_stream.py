"""The fake Anthropic's wire shapes: the Messages API's message body and its SSE events.

Pure encoding: :func:`events` turns a :class:`Reply` into the event sequence
the real API streams (``message_start``, each block's start/deltas/stop,
``message_delta``, ``message_stop``, pings), and :func:`frame` turns one event
into its SSE bytes (:func:`event_stream_frame`: Bedrock's binary framing of the
same event). The server decides what to send, cut or break.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clankie.testing.fake_anthropic_scenarios import Reply

_ids = itertools.count(1)


def req_id() -> str:
    return f"req_fake{next(_ids):08d}"


def frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def event_stream_frame(name: str, data: dict[str, Any]) -> bytes:
    """One event as Bedrock streams it: an AWS event-stream message (prelude, its CRC, headers, payload, CRC) whose
    payload is a ``chunk`` holding the event's JSON as base64 ``bytes``."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()}).encode()
    headers = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v)) + v.encode()
        for k, v in ((":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event"))
    )
    prelude = struct.pack(">II", 12 + len(headers) + len(payload) + 4, len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude))
    body = head + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def message(
    body: dict[str, Any], blocks: list[dict[str, Any]], stop: str | None, usage: dict[str, int], output: int
) -> dict[str, Any]:
    return {
        "id": f"msg_fake{next(_ids):08d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": output},
    }


def _chunks(value: str, size: int) -> Iterator[str]:
    for start in range(0, len(value), size):
        yield value[start : start + size]


def events(
    body: dict[str, Any], reply: Reply, usage: dict[str, int], output: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    start = message(body, [], None, usage, 1)
    yield "message_start", {"type": "message_start", "message": start}
    for _ in range(reply.pings):
        yield "ping", {"type": "ping"}
    for index, block in enumerate(reply.blocks):
        yield from _block_events(index, block, reply.chunk_size)
    if reply.stop_reason is not None:
        delta = {"stop_reason": reply.stop_reason, "stop_sequence": None}
        yield "message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output}}
    yield "message_stop", {"type": "message_stop"}


def _block_events(index: int, block: dict[str, Any], size: int) -> Iterator[tuple[str, dict[str, Any]]]:
    def delta(d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}

    kind = block["type"]
    if kind == "text":
        head: dict[str, Any] = {"type": "text", "text": ""}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
        for piece in _chunks(block["text"], size):
            yield delta({"type": "text_delta", "text": piece})
    elif kind == "tool_use":
        head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
        for piece in _chunks(json.dumps(block["input"]), size):
            yield delta({"type": "input_json_delta", "partial_json": piece})
    elif kind == "thinking":
        head = {"type": "thinking", "thinking": "", "signature": ""}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
        for piece in _chunks(block["thinking"], size):
            yield delta({"type": "thinking_delta", "thinking": piece})
        yield delta({"type": "signature_delta", "signature": block.get("signature", "sig-fake")})
    else:
        raise ValueError(f"fake cannot stream block type {kind!r}")
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
