"""sd_notify, written by hand (sd_notify(3)): one datagram per message.

Silent when ``NOTIFY_SOCKET`` is unset. Sends are non-blocking: a manager
whose queue is full costs a dropped datagram, never a blocked loop. Accepts a filesystem path or an
``@abstract`` name. Never raises into the caller: a missing or refusing
socket is logged once and counted. The socket is opened per send, so a
systemd that restarted its notify socket is picked up on the next message.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)

NOTIFY_ENV = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "JOURNAL_STREAM",  # names the supervisor's stderr; a child writes into a pipe
)
"""Variables meant for the supervisor alone; children never see them."""

MAX_DATAGRAM = 4096


def _address(raw: str | None) -> str | bytes | None:
    if not raw:
        return None
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    if raw.startswith("/"):
        return raw
    return None  # vsock: and anything else: not supported, stay silent


class Notifier:
    """Sends ``READY=1``, ``STATUS=``, ``WATCHDOG=1``, ``STOPPING=1`` to systemd."""

    def __init__(self, env: Mapping[str, str]) -> None:
        raw = env.get("NOTIFY_SOCKET")
        self.address = _address(raw)
        if raw and self.address is None:
            log.warning("NOTIFY_SOCKET has an unsupported address; not notifying systemd")
        self.failures = 0
        self.sent = 0
        self.watchdog_usec = _watchdog_usec(env)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` as one datagram; True if it went out."""
        if self.address is None:
            return False
        data = "\n".join(fields).encode("utf-8", "replace")[:MAX_DATAGRAM]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK) as sock:
                sock.sendto(data, self.address)
        except OSError as exc:
            if self.failures == 0:
                log.warning("cannot notify systemd: %s (logged once)", exc.strerror or exc)
            self.failures += 1
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={_one_line(status)}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def watchdog_interval(self) -> float | None:
        """Seconds between pings (half of ``WATCHDOG_USEC``), or None when systemd wants none."""
        if self.address is None or self.watchdog_usec is None:
            return None
        return self.watchdog_usec / 2_000_000


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    raw = env.get("WATCHDOG_USEC", "")
    if not raw.isdigit() or int(raw) == 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None  # meant for another process
    return int(raw)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:400]


def scrub(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the systemd variables that belong to the supervisor."""
    return {k: v for k, v in env.items() if k not in NOTIFY_ENV}
