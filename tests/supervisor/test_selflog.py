"""supervisor.selflog: the supervisor's own log file is its records, dated and redacted, and bounded by rotation."""

from __future__ import annotations

import logging
from pathlib import Path

from clankie.redact import Redactor
from supervisor import selflog
from supervisor.output import RotatingLog

SECRET = "sk-ant-very-secret-key-0123456789"


def test_records_are_dated_redacted_and_the_file_is_bounded_at_its_rotation(tmp_path: Path) -> None:
    log_file = RotatingLog(selflog.log_path(tmp_path), max_bytes=4096, backups=2)
    handler = selflog.FileHandler(log_file, Redactor((SECRET,)))
    logger = logging.getLogger("tests.selflog")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        logger.warning("tldraw pid=%d killed by SIGKILL (crash); key %s", 42, SECRET)
        first = selflog.log_path(tmp_path).read_text()
        assert " WARNING tests.selflog: tldraw pid=42 killed by SIGKILL (crash); key [redacted]\n" in first
        assert first[:4].isdigit() and "T" in first.split()[0]  # an ISO date and time, for a file kept for days
        for n in range(400):  # ~30 KiB through a 4 KiB file with two rolled copies
            logger.info("line %04d %s", n, "x" * 40)
    finally:
        logger.removeHandler(handler)
        handler.close()
    files = sorted(p.name for p in tmp_path.joinpath("logs").iterdir())
    assert files == ["supervisor.log", "supervisor.log.1", "supervisor.log.2"]
    assert all(p.stat().st_size <= 4096 for p in tmp_path.joinpath("logs").iterdir())
    assert "line 0399" in selflog.log_path(tmp_path).read_text()  # the newest is kept, the oldest rolled away


def test_a_record_logged_while_the_file_writes_is_not_written_into_it(tmp_path: Path) -> None:
    """The file's own complaint (a full disk) is logged while it writes: no recursion, no second copy."""
    log_file = RotatingLog(selflog.log_path(tmp_path), max_bytes=1 << 20, backups=1)
    handler = selflog.FileHandler(log_file, Redactor(()))
    original = log_file.write

    def write_and_complain(data: bytes) -> None:
        handler.handle(logging.LogRecord("supervisor.output", logging.WARNING, __file__, 1, "cannot write", (), None))
        original(data)

    log_file.write = write_and_complain  # type: ignore[method-assign]  # the complaint, as RotatingLog._failed logs it
    handler.handle(logging.LogRecord("supervisor", logging.INFO, __file__, 1, "hello", (), None))
    handler.close()
    text = selflog.log_path(tmp_path).read_text()
    assert "hello" in text and "cannot write" not in text
