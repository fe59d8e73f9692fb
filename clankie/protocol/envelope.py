"""msgpack-RPC envelopes: shape checks and builders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clankie.errors import RemoteProtocolError

PROTOCOL_VERSION = 1

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Request:
    msgid: int
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Response:
    msgid: int
    error: dict[str, str] | None
    result: Any


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: Any


Envelope = Request | Response | Notification
MAX_MSGID = 2**32 - 1


def _msgid(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_MSGID:
        return value
    return None


class BadEnvelope(RemoteProtocolError):
    """An envelope that is not msgpack-RPC; ``msgid`` is set when one could be read."""

    def __init__(self, message: str, msgid: int | None = None) -> None:
        super().__init__(message)
        self.msgid = msgid


def parse_envelope(obj: Any) -> Envelope:
    """Check the msgpack-RPC shape of one decoded frame."""
    if not isinstance(obj, list) or not obj:
        raise BadEnvelope("message is not a msgpack-RPC array")
    kind = obj[0]
    if kind == REQUEST:
        msgid = _msgid(obj[1]) if len(obj) > 1 else None
        if len(obj) != 4 or msgid is None:
            raise BadEnvelope("request must be [0, msgid, method, params]", msgid)
        if not isinstance(obj[2], str) or not obj[2]:
            raise BadEnvelope("request method must be a non-empty string", msgid)
        return Request(msgid, obj[2], obj[3])
    if kind == RESPONSE:
        msgid = _msgid(obj[1]) if len(obj) > 1 else None
        if len(obj) != 4 or msgid is None:
            raise BadEnvelope("response must be [1, msgid, error, result]")
        err = obj[2]
        if err is not None and not (
            isinstance(err, dict)
            and isinstance(err.get("code"), str)
            and isinstance(err.get("message", ""), str)
        ):
            raise BadEnvelope("response error must be nil or {code, message}")
        return Response(msgid, err, obj[3])
    if kind == NOTIFICATION:
        if len(obj) != 3 or not isinstance(obj[1], str) or not obj[1]:
            raise BadEnvelope("notification must be [2, method, params]")
        return Notification(obj[1], obj[2])
    raise BadEnvelope("unknown message type")


def request(msgid: int, method: str, params: Any) -> list[Any]:
    return [REQUEST, msgid, method, params]


def response(msgid: int, error: dict[str, str] | None, result: Any) -> list[Any]:
    return [RESPONSE, msgid, error, result]


def notification(method: str, params: Any) -> list[Any]:
    return [NOTIFICATION, method, params]


def error_map(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}
