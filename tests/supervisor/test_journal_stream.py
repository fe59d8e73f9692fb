"""Children log in journald format only when their stderr really is the journal stream."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from clankie import logs
from supervisor.systemd import scrub


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def stream_id(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


def test_journal_format_only_for_the_stream_journal_stream_names(pipe: tuple[int, int]) -> None:
    """A leaked or mismatched $JOURNAL_STREAM does not switch a pipe to journald format."""
    _, w = pipe
    assert logs.stderr_is_journal({"JOURNAL_STREAM": stream_id(w)}, w)
    assert not logs.stderr_is_journal({"JOURNAL_STREAM": stream_id(0) if stream_id(0) != stream_id(w) else "1:1"}, w)
    assert not logs.stderr_is_journal({}, w)
    assert not logs.stderr_is_journal({"JOURNAL_STREAM": "garbage"}, w)
    assert not logs.stderr_is_journal({"JOURNAL_STREAM": "1:2"}, 9999)  # a closed fd


def _format(env: dict[str, str]) -> str:
    logs.configure("test", "INFO", env=env)
    handler = logging.getLogger().handlers[0]
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "hello %s", ("there",), None)
    return handler.format(record)


def test_configure_takes_the_decision_from_the_env_it_is_given() -> None:
    """configure(env=...) prefixes <N> only when that env's JOURNAL_STREAM is our fd 2."""
    assert _format({"JOURNAL_STREAM": stream_id(2)}).startswith("<4>x: hello there")
    leaked = _format({"JOURNAL_STREAM": "1:2"})
    assert not leaked.startswith("<") and "W test x: hello there" in leaked
    assert not _format({}).startswith("<")


def test_journal_stream_never_reaches_a_child() -> None:
    """The supervisor scrubs JOURNAL_STREAM (it names the supervisor's stderr, not the child's pipe)."""
    assert scrub({"JOURNAL_STREAM": "8:1234", "KEEP": "1"}) == {"KEEP": "1"}
