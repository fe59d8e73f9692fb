"""The supervisor's own log file, ``<state>/logs/supervisor.log``, for ``clankiectl logs supervisor`` outside systemd.

Under systemd the journal keeps the supervisor's lines (``journalctl -u
clankie``) and no file is written. Anywhere else its stderr is a terminal or a
pipe nobody keeps, so every record (each crash, restart and kill among them)
also goes to a file of its own, written like a child's log
(:class:`supervisor.output.RotatingLog`: bounded by
``CLANKIE_CHILD_LOG_ROTATE_BYTES`` × (``CLANKIE_CHILD_LOG_BACKUPS`` + 1), a
full disk costs lines and never raises), with the date in each line and the
secrets the supervisor holds redacted, as on its stderr. Only the
supervisor's own records: its children's output is in their own files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from clankie.paths import child_log_dir
from clankie.redact import Redactor
from supervisor.output import RotatingLog

NAME = "supervisor"
"""``clankiectl logs supervisor``: no child may have this name while the supervisor keeps its file."""


def log_path(state_dir: Path) -> Path:
    return child_log_dir(state_dir) / f"{NAME}.log"


class _Format(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%S%z")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


class FileHandler(logging.Handler):
    """Each record, formatted and redacted, as one line (continuation lines indented) of a :class:`RotatingLog`."""

    def __init__(self, log: RotatingLog, redact: Redactor) -> None:
        super().__init__()
        self.log = log
        self.setFormatter(_Format(redact))
        self._writing = False

    def emit(self, record: logging.LogRecord) -> None:  # called under the handler's lock (logging.Handler.handle)
        if self._writing:  # a record about this very file, logged while it writes (a full disk): its stderr has it
            return
        try:
            text = self.format(record).replace("\n", "\n  ")
        except Exception:  # logging's own rule: a bad record never raises into its caller
            self.handleError(record)
            return
        self._writing = True
        try:
            self.log.write(text.encode(errors="replace") + b"\n")
        finally:
            self._writing = False

    def close(self) -> None:
        self.log.close()
        super().close()


def keep(state_dir: Path, max_bytes: int, backups: int, redact: Redactor) -> FileHandler:
    """Add the file handler to the root logger and return it (the caller closes it at exit)."""
    handler = FileHandler(RotatingLog(log_path(state_dir), max_bytes, backups), redact)
    logging.getLogger().addHandler(handler)
    return handler
