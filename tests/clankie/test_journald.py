"""clankie.journald: under systemd a child's records reach the journal as native entries with CHILD, CODE, TURN and a
hashed LANE; outside systemd nothing changes. A real datagram socket stands in for journald's."""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from clankie import journald, logs
from clankie.redact import Redactor

LANE = "discord:clankie:discord:100:101"


def parse(datagram: bytes) -> dict[str, str]:
    """The fields of one native-protocol datagram (both the KEY=value and the length-prefixed forms)."""
    out, rest = {}, datagram
    while rest:
        line, _, tail = rest.partition(b"\n")
        if b"=" in line:
            key, _, value = line.partition(b"=")
            out[key.decode()] = value.decode()
            rest = tail
        else:
            (size,) = struct.unpack("<Q", tail[:8])
            out[line.decode()] = tail[8:8 + size].decode()
            rest = tail[8 + size + 1:]
    return out


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "journal.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        yield sock, path
    finally:
        sock.close()


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in handlers:
            handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_an_entry_carries_child_priority_code_turn_and_the_lane_only_hashed(journal: tuple[socket.socket, str]) -> None:
    sock, path = journal
    handler = journald.JournalHandler("service", logging.Formatter("%(name)s: %(message)s"), path=path)
    log = logging.getLogger("service.captain.service")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with journald.turn_fields("d-42", LANE):
            log.warning("delivery %s: failed (%s)", "d-42", "captain_model_failed", extra={"code": "captain_model_failed"})
        log.info("no turn here")
    finally:
        log.removeHandler(handler)
        log.setLevel(logging.NOTSET)
        handler.close()
    first, second = parse(sock.recv(65536)), parse(sock.recv(65536))
    assert first == {"MESSAGE": "service.captain.service: delivery d-42: failed (captain_model_failed)", "PRIORITY": "4",
                     "SYSLOG_IDENTIFIER": "clankie", "CHILD": "service", "LOGGER": "service.captain.service",
                     "CODE": "captain_model_failed", "TURN": "d-42", "LANE": journald.lane_hash(LANE)}
    assert second["PRIORITY"] == "6" and not {"CODE", "TURN", "LANE"} & set(second)
    assert LANE not in str(first) and len(first["LANE"]) == 16


def test_a_multiline_message_uses_the_length_prefixed_form() -> None:
    datagram = journald.encode({"MESSAGE": "line one\nline two", "CHILD": "bridge"})
    assert datagram == b"MESSAGE\n" + struct.pack("<Q", 17) + b"line one\nline two\nCHILD=bridge\n"
    assert parse(datagram) == {"MESSAGE": "line one\nline two", "CHILD": "bridge"}


def test_a_journal_that_cannot_take_an_entry_costs_a_count_never_a_wait(tmp_path: Path) -> None:
    """No journal listening (or a full one): the record is dropped and counted; logging goes on."""
    handler = journald.JournalHandler("bridge", logging.Formatter("%(message)s"), path=str(tmp_path / "absent.sock"))
    try:
        handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None))
        assert handler.dropped == 1
    finally:
        handler.close()


def test_configure_adds_native_entries_only_when_the_supervisor_says_so_and_redacts_them(
    journal: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told CLANKIE_JOURNAL_NATIVE=1 with the socket there: a JournalHandler beside stderr; told nothing: stderr only."""
    sock, path = journal
    monkeypatch.setattr(journald, "SOCKET", path)
    logs.configure("bridge", env={})
    assert not any(isinstance(h, journald.JournalHandler) for h in logging.getLogger().handlers)
    redact = Redactor(["tok-SECRET-123"])
    logs.configure("bridge", env={journald.NATIVE_ENV: "1"}, redact=redact)
    natives = [h for h in logging.getLogger().handlers if isinstance(h, journald.JournalHandler)]
    assert len(natives) == 1 and natives[0].path == path
    logging.getLogger("bridge.app").error("the token tok-SECRET-123 was refused")
    entry = parse(sock.recv(65536))
    assert entry["CHILD"] == "bridge" and entry["PRIORITY"] == "3"
    assert "tok-SECRET-123" not in entry["MESSAGE"] and "refused" in entry["MESSAGE"]


def test_a_message_past_the_bound_is_cut_to_it(journal: tuple[socket.socket, str]) -> None:
    """A huge record (a long traceback) is one entry of at most MAX_MESSAGE characters, never a failed send."""
    sock, path = journal
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    handler = journald.JournalHandler("service", logging.Formatter("%(message)s"), path=path)
    try:
        handler.emit(logging.LogRecord("x", logging.ERROR, __file__, 1, "y" * (journald.MAX_MESSAGE * 3), None, None))
    finally:
        handler.close()
    entry = parse(sock.recv(1 << 20))
    assert entry["MESSAGE"] == "y" * journald.MAX_MESSAGE and handler.dropped == 0
