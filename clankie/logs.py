"""Per-process logging set-up: one call to :func:`configure` in each ``main``.

Logs go to stderr. When stderr *is* the journal stream (``$JOURNAL_STREAM``
names the ``st_dev:st_ino`` of fd 2, as systemd.exec(5) documents) lines
carry a ``<N>`` syslog priority prefix and no timestamp, since journald adds
both fields itself; elsewhere (a terminal, or the pipe a supervised child
writes into, even if the variable leaked into its environment) they carry a
compact timestamp. Context such as the
lane or the child name rides in contextvars and is appended as
``key=value`` pairs. Message content and secrets are never logged: callers
log ids, codes and sizes. A child whose supervisor runs under systemd also
sends each record to the journal as a native entry with fields
(:mod:`clankie.journald`: ``CHILD=``, ``CODE=``, ``TURN=``, ``LANE=``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from clankie import journald as journal
from clankie.paths import process_environment
from clankie.redact import NOTHING, Redactor

_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("clankie_log_context", default={})  # noqa: B039 (read-only Mapping: never mutated, only replaced)

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Attach ``fields`` to every log line written inside the block."""
    token = _context.set({**_context.get(), **{k: str(v) for k, v in fields.items()}})
    try:
        yield
    finally:
        _context.reset(token)


class _Formatter(logging.Formatter):
    def __init__(self, role: str, journald: bool, redact: Redactor = NOTHING) -> None:
        fmt = "%(name)s: %(message)s" if journald else "%(asctime)s %(levelname).1s " + role + " %(name)s: %(message)s"
        super().__init__(fmt, datefmt="%H:%M:%S")
        self._journald = journald
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line = self._redact(super().format(record))  # the whole line, a traceback included
        ctx = _context.get()
        if ctx:
            line += " " + " ".join(f"{k}={v}" for k, v in ctx.items())
        if self._journald:
            line = f"<{_PRIORITY.get(record.levelno, 6)}>" + line.replace("\n", "\n ")
        return line


class _Message(logging.Formatter):
    """A native journal entry's MESSAGE: the line without timestamp or priority (fields carry those), redacted."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(name)s: %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    """An exception nothing caught: as a CRITICAL record (so the journal has it too), then Python's own report."""
    logging.getLogger("clankie").critical("uncaught %s", kind.__name__, exc_info=(kind, exc, tb))
    sys.__excepthook__(kind, exc, tb)


def stderr_is_journal(env: Mapping[str, str], fd: int = 2) -> bool:
    """True when ``fd`` is the stream ``$JOURNAL_STREAM`` (``<st_dev>:<st_ino>``) names."""
    raw = env.get("JOURNAL_STREAM", "")
    dev, sep, ino = raw.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def configure(
    role: str,
    level: str = "INFO",
    *,
    journald: bool | None = None,
    env: Mapping[str, str] | None = None,
    redact: Redactor = NOTHING,
) -> None:
    """Send this process's logs to stderr in the house format.

    ``journald`` forces the format; by default it is chosen by
    :func:`stderr_is_journal` on ``env`` (``os.environ`` when None).
    ``redact`` holds the secrets this process holds: no line carries their values (:mod:`clankie.redact`).
    """
    source = process_environment() if env is None else env
    if journald is None:
        journald = stderr_is_journal(source)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(role, journald, redact))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    if journal.wanted(source):  # a child under systemd: native entries with fields (clankie.journald)
        root.addHandler(journal.JournalHandler(role, _Message(redact)))
        sys.excepthook = _log_uncaught
    root.setLevel(level)
    for noisy in ("discord", "httpx", "httpx2", "anthropic", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
