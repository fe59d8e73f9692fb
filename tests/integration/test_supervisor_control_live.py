"""Malformed msgpack-RPC on a real supervisor's control.sock, frame by frame (C36, C38)."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest

from clankie.protocol import PROTOCOL_VERSION
from tests.supervisor.harness import fixture, supervisor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


class Raw:
    """A hand-driven control.sock client: length-prefixed msgpack frames, nothing else."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(path))

    def send(self, msg: Any) -> None:
        body = msgpack.packb(msg)
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def recv(self) -> Any:
        """The next frame, or None when the supervisor closed the connection."""
        head = self._exactly(4)
        if head is None:
            return None
        body = self._exactly(struct.unpack(">I", head)[0])
        return None if body is None else msgpack.unpackb(body)

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def hello(self) -> None:
        self.send([0, 0, "hello", {"role": "raw", "pid": os.getpid(), "protocol": PROTOCOL_VERSION}])
        reply = self.recv()
        assert reply[0] == 1 and reply[1] == 0 and reply[2] is None

    def status(self, msgid: int) -> dict[str, Any]:
        self.send([0, msgid, "status", {}])
        reply = self.recv()
        assert reply[:3] == [1, msgid, None], reply
        return reply[3]

    def close(self) -> None:
        self.sock.close()


def test_c36_malformed_requests_get_invalid_request_and_an_unknown_type_closes_only_that_connection(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """A non-string method and a short request are answered invalid_request on msgid 7; type 3 closes the connection; a new client is served."""
    with supervisor(tmp_path, runtime_dir, [fixture("svc")]) as sup:
        raw = Raw(sup.sock)
        try:
            raw.hello()
            for bad in ([0, 7, 5, {}], [0, 7, "m"]):
                raw.send(bad)
                reply = raw.recv()
                assert reply[0] == 1 and reply[1] == 7 and reply[3] is None, reply
                assert reply[2]["code"] == "invalid_request" and reply[2]["message"]
            assert raw.status(8)["supervisor"]["pid"] == sup.proc.pid  # still served after both
            raw.send([3, 1, 2, 3])
            assert raw.recv() is None  # no msgid to answer on: the connection is closed
        finally:
            raw.close()
        fresh = Raw(sup.sock)
        try:
            fresh.hello()
            assert [c["name"] for c in fresh.status(1)["children"]] == ["svc"]
        finally:
            fresh.close()
        assert sup.status().children[0].state == "running"


def test_c38_an_unknown_notification_is_ignored(tmp_path: Path, runtime_dir: Path) -> None:
    """A notification for a method nobody serves gets no reply and the same connection answers status next."""
    with supervisor(tmp_path, runtime_dir, [fixture("svc")]) as sup:
        raw = Raw(sup.sock)
        try:
            raw.hello()
            raw.send([2, "nope", {}])
            assert raw.status(9)["supervisor"]["state"] == "running"  # the next frame is status's reply, nothing before it
        finally:
            raw.close()
