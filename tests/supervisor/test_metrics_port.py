"""Issue 37 item 2, the port's parts: one log line per flood, the cap's decision, the header-read timeout, the
answers, the loopback warning and a failed accept, on a real TCP socket in this process."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from supervisor import metrics_port
from supervisor.metrics_port import Admit, Flood, Port, Refuse, admit, loopback
from tests.polling import until


def test_a_flood_is_one_line_and_a_new_flood_after_a_quiet_spell_another() -> None:
    """The first drop logs, the rest of the flood only count; a drop a quiet minute later starts a new flood."""
    flood = Flood(quiet=60.0)
    assert [flood.hit(t) for t in (0.0, 1.0, 30.0, 89.0)] == [True, False, False, False]
    assert flood.in_flood == 4 and flood.floods == 1
    assert flood.hit(149.0) and flood.in_flood == 1 and flood.floods == 2


def test_at_the_cap_the_oldest_reader_goes_and_with_none_reading_the_new_one_is_refused() -> None:
    """Under the cap: in. At it: the oldest connection still reading its request is evicted; every one being
    answered: the newcomer is refused."""
    assert admit([(1, True)], 2) == Admit()
    assert admit([(1, False), (2, True), (3, True)], 3) == Admit(evict=2)
    assert admit([(1, False), (2, False)], 2) == Refuse()


def test_loopback_is_recognised() -> None:
    assert all(map(loopback, ("127.0.0.1", "127.9.9.9", "::1", "localhost")))
    assert not any(map(loopback, ("0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com")))


def answer(accept: str | None) -> tuple[bytes, str]:
    return b"up 1\n" if accept is None else f"accept {accept}\n".encode(), "text/plain; version=0.0.4"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(body: Callable[[Port], Awaitable[None]], **kwargs: Any) -> None:
    async def main() -> None:
        port = Port(kwargs.pop("listen", f"127.0.0.1:{free_port()}"), answer, **kwargs)
        await port.start()
        try:
            await body(port)
        finally:
            await port.close()

    asyncio.run(main())


async def request(port: Port, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
    writer.write(raw)
    data = await reader.read()
    writer.close()
    return data


def test_requests_are_answered_and_closed() -> None:
    """GET and HEAD /metrics (Accept passed on), 404, 405, 400 and 431; every answer closes its connection."""

    async def body(port: Port) -> None:
        ok = await request(port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in ok and ok.endswith(b"accept text/plain\n")
        head = await request(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n") and b"Content-Length: 5" in head
        assert (await request(port, b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert b"Allow: GET, HEAD" in await request(port, b"POST /metrics HTTP/1.1\r\n\r\n")
        assert (await request(port, b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400")
        big = b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 10_000 + b"\r\n\r\n"
        assert (await request(port, big)).startswith(b"HTTP/1.1 431")
        assert port.scrapes == 2 and port.dropped.counts["bad_request"] == 2
        await until(lambda: port.held == 0, 10, "every answered connection closed")

    run(body)


def test_idle_connections_past_the_cap_are_evicted_and_a_scrape_still_served(caplog: pytest.LogCaptureFixture) -> None:
    """Twenty idle connections against a cap of four: the port never holds more than four, a scrape is answered
    past them, and the whole flood is one warning line."""

    async def body(port: Port) -> None:
        idle = []
        for _ in range(20):
            idle.append(await asyncio.open_connection("127.0.0.1", port.port))
            await until(lambda: port.held <= 4 and port.held >= min(4, len(idle)), 10, "the port to settle")
        assert (await request(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert port.dropped.counts["evicted"] >= 16
        for _, writer in idle:
            writer.close()

    with caplog.at_level(logging.WARNING, logger=metrics_port.__name__):
        run(body, max_connections=4, header_seconds=60.0)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["metrics port at its cap of 4 connections"]


def test_a_connection_that_sends_no_request_is_closed_at_the_header_timeout() -> None:
    """An idle connection (and one that sent half a request) hears EOF from the server; both counted as timeouts."""

    async def body(port: Port) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
        half_reader, half_writer = await asyncio.open_connection("127.0.0.1", port.port)
        half_writer.write(b"GET /metrics HTTP/1.1\r\n")
        assert await reader.read() == b"" and await half_reader.read() == b""
        assert port.dropped.counts["timeout"] == 2 and port.held == 0
        writer.close()
        half_writer.close()

    run(body, header_seconds=0.2)


def test_bound_beyond_loopback_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    async def body(port: Port) -> None:
        assert port.port > 0

    with caplog.at_level(logging.WARNING, logger=metrics_port.__name__):
        run(body, listen=f"0.0.0.0:{free_port()}")
    assert any("reachable beyond this machine" in r.getMessage() for r in caplog.records)


def test_the_cap_never_exceeds_a_quarter_of_the_fd_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cap set above a quarter of the soft fd limit is lowered to it (a setting cannot let the port take the
    supervisor's descriptors)."""
    monkeypatch.setattr("supervisor.metrics_port.resource.getrlimit", lambda which: (64, 64))

    async def body(port: Port) -> None:
        assert port.max_connections == 16

    run(body, max_connections=1000)


class OutOfFiles:
    """A listening socket whose accept fails as at the fd limit."""

    def __init__(self) -> None:
        self.tries = 0

    def accept(self) -> tuple[socket.socket, Any]:
        self.tries += 1
        raise OSError(errno.EMFILE, "Too many open files")


def test_a_failed_accept_pauses_the_port_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    """EMFILE on accept: one warning, the port's readers off for a second instead of a retry per loop turn, counted."""

    async def body(port: Port) -> None:
        fake = OutOfFiles()
        port._accept(cast(socket.socket, fake))
        port._accept(cast(socket.socket, fake))  # a wake already queued: it fails again, still one line
        assert fake.tries == 2 and port.dropped.counts["accept_failed"] == 2
        assert port._paused is not None

    with caplog.at_level(logging.WARNING, logger=metrics_port.__name__):
        run(body)
    assert len([r for r in caplog.records if "cannot accept" in r.getMessage()]) == 1


def test_a_host_name_is_served_on_each_of_its_addresses() -> None:
    """``localhost`` is listened on at every address it resolves to (127.0.0.1 and ::1 where both are named; a
    scraper may resolve either), each answering."""
    port_number = free_port()
    addresses = {str(info[4][0]) for info in socket.getaddrinfo("localhost", port_number, type=socket.SOCK_STREAM)}

    async def body(port: Port) -> None:
        assert len(port._socks) == len(addresses)
        for host in sorted(addresses):
            reader, writer = await asyncio.open_connection(host, port.port)
            writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert (await reader.read()).startswith(b"HTTP/1.1 200")
            writer.close()

    run(body, listen=f"localhost:{port_number}")
