"""Hold many idle connections to a Unix socket, as a hostile local client would (run as a subprocess).

``python holder.py SOCKET COUNT [--silent]`` opens COUNT connections one
after the other; each says ``hello`` (unless ``--silent``) and then sends
nothing more. It prints one JSON line ``{"opened", "refused"}`` when done,
and after that answers every line on stdin with ``{"open": N}``: how many of
its connections the server has not closed. It exits at EOF on stdin.
Only the standard library and msgpack, so it runs as any uid.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys

import msgpack


def hello() -> bytes:
    body = msgpack.packb([0, 0, "hello", {"role": "clankiectl", "pid": os.getpid(), "protocol": 1}])
    return struct.pack(">I", len(body)) + body


def open_one(path: str, silent: bool) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    try:
        s.connect(path)
        if silent:
            return s
        s.sendall(hello())
        head = s.recv(4)
        if len(head) < 4:
            s.close()
            return None
        (size,) = struct.unpack(">I", head)
        while size > 0:
            chunk = s.recv(size)
            if not chunk:
                s.close()
                return None
            size -= len(chunk)
        return s
    except OSError:
        s.close()
        return None


def still_open(socks: list[socket.socket]) -> int:
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
    closed = {fd for fd, _ in poller.poll(0)}  # an idle client gets nothing: any event means EOF or reset
    return sum(1 for s in socks if s.fileno() not in closed)


def main() -> int:
    path, count = sys.argv[1], int(sys.argv[2])
    silent = "--silent" in sys.argv[3:]
    socks = [s for s in (open_one(path, silent) for _ in range(count)) if s is not None]
    print(json.dumps({"opened": len(socks), "refused": count - len(socks)}), flush=True)
    for _line in sys.stdin:
        print(json.dumps({"open": still_open(socks)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
