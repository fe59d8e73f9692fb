"""Log records as journal entries with fields, through journald's native protocol (under systemd only).

Under systemd the supervisor's stderr is the journal; it then tells each child
(``CLANKIE_JOURNAL_NATIVE=1``) to write its log records straight to
``/run/systemd/journal/socket`` as native entries, so they can be selected by
field rather than by text::

    journalctl -u clankie CHILD=bridge
    journalctl -u clankie CODE=captain_model_failed
    journalctl -u clankie TURN=<delivery id>  LANE=<lane hash>

Each entry has ``MESSAGE`` (the house line, redacted like every other),
``PRIORITY`` (from the level), ``SYSLOG_IDENTIFIER=clankie``, ``CHILD``,
``LOGGER``, and when known ``CODE`` (a record's ``extra={"code": ...}``),
``TURN`` (the delivery id) and ``LANE`` (:func:`lane_hash`, never the lane):
the turn's fields come from :func:`turn_fields`, a context the service binds
around each turn. The text lines on stderr (and so in the child's log file)
are unchanged; outside systemd nothing here runs.

A send never blocks the loop: the socket is non-blocking, and an entry the
journal cannot take at once (full buffer) is dropped and counted
(:attr:`JournalHandler.dropped`). A message is cut to :data:`MAX_MESSAGE`.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import os
import socket
import stat
import struct
from collections.abc import Iterator, Mapping

SOCKET = "/run/systemd/journal/socket"
NATIVE_ENV = "CLANKIE_JOURNAL_NATIVE"
"""Set to 1 by a supervisor whose stderr is the journal: its children write native entries."""
MAX_MESSAGE = 48 * 1024
PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}

_turn: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("clankie_journal_turn", default={})  # noqa: B039 (read-only Mapping: replaced, never mutated)


def lane_hash(lane: str) -> str:
    """A lane's pseudonym in journal fields and trace spans: 16 hex digits of SHA-256, the same in every process."""
    return hashlib.sha256(b"clankie-lane\0" + lane.encode()).hexdigest()[:16]


@contextlib.contextmanager
def turn_fields(turn: str, lane: str) -> Iterator[None]:
    """Every record logged inside (and in tasks started inside) carries ``TURN`` and the hashed ``LANE``."""
    token = _turn.set({"TURN": turn, "LANE": lane_hash(lane)})
    try:
        yield
    finally:
        _turn.reset(token)


def encode(fields: Mapping[str, str]) -> bytes:
    """One native-protocol datagram: ``KEY=value`` lines, or ``KEY``, a little-endian 64-bit length and the value
    for a value with a newline (systemd's journal-native-protocol)."""
    out = bytearray()
    for key, value in fields.items():
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


def wanted(env: Mapping[str, str], path: str | None = None) -> bool:
    """Whether this process should write native entries: told so by its supervisor, and the socket is there."""
    if env.get(NATIVE_ENV) != "1":
        return False
    with contextlib.suppress(OSError):
        return stat.S_ISSOCK(os.stat(path or SOCKET).st_mode)
    return False


class JournalHandler(logging.Handler):
    """Sends each record as a native journal entry with clankie's fields (see the module docstring)."""

    def __init__(self, child: str, formatter: logging.Formatter, path: str | None = None) -> None:
        super().__init__()
        self.child = child
        self.path = path or SOCKET
        self.setFormatter(formatter)
        self.dropped = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)

    def fields(self, record: logging.LogRecord) -> dict[str, str]:
        fields = {"MESSAGE": self.format(record)[:MAX_MESSAGE], "PRIORITY": str(PRIORITY.get(record.levelno, 6)),
                  "SYSLOG_IDENTIFIER": "clankie", "CHILD": self.child, "LOGGER": record.name}
        code = getattr(record, "code", None)
        if code:
            fields["CODE"] = str(code)
        fields.update(_turn.get())
        return fields

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._sock.sendto(encode(self.fields(record)), self.path)
        except (BlockingIOError, InterruptedError):
            self.dropped += 1  # the journal is behind: never wait for it on the loop
        except OSError:
            self.dropped += 1  # journald restarting, or gone: the text line still reaches the child's log file
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        self._sock.close()
        super().close()
