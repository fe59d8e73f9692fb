"""A child's log file: written through the appender, bytes unchanged, never through a symlink."""

from __future__ import annotations

from pathlib import Path

from supervisor.output import RotatingLog


def test_a_log_reopened_after_a_restart_continues_an_unfinished_line_unchanged(tmp_path: Path) -> None:
    """The supervisor adds nothing to a child's bytes: a last line left without its newline is continued, not ended."""
    path = tmp_path / "svc.log"
    first = RotatingLog(path)
    first.write(b"line 1\npartial")
    first.close()
    again = RotatingLog(path)
    again.write(b" line 2\n")
    again.close()
    assert path.read_bytes() == b"line 1\npartial line 2\n"
    assert again.problem == "" and again.lost_total == 0


def test_a_symlink_in_place_of_the_log_is_refused_and_reported_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "svc.log").symlink_to(elsewhere)
    reports: list[None] = []
    log = RotatingLog(tmp_path / "svc.log", on_problem=lambda: reports.append(None))
    log.write(b"a line\n")
    log.write(b"another\n")
    assert not elsewhere.exists()
    assert log.problem and log.lost_total == len(b"a line\nanother\n")
    assert len(reports) == 1  # reported when it began, not once per line
    log.close()
