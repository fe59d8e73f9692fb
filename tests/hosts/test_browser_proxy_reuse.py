"""One vetted request per proxy connection: nothing after a request's own body ever reaches its site.

A real :class:`PolicyProxy` session on a loopback port, raw clients, and raw upstream sites that record every
byte they receive (each answers, half-closes, then keeps reading until the proxy hangs up, so anything the proxy
forwarded after the request shows up in ``extra``).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from hosts.browser import policy
from hosts.browser.proxy import PolicyProxy

REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\nok"


@dataclass
class Upstream:
    """A site that reads one request (head and ``Content-Length`` body), answers, and records what came after."""

    port: int = 0
    requests: list[bytes] = field(default_factory=list)
    extra: list[bytes] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
        if b"transfer-encoding: chunked" in head.lower():
            body = await reader.readuntil(b"0\r\n\r\n")
        else:
            body = await reader.readexactly(length)
        self.requests.append(head + body)
        writer.write(REPLY)
        writer.write_eof()  # the response is over; keep listening: a forwarded second request would land here
        self.extra.append(await reader.read())
        writer.close()
        self.done.set()


@asynccontextmanager
async def world() -> AsyncIterator[tuple[PolicyProxy, int, Upstream, Upstream]]:
    a, b = Upstream(), Upstream()
    servers = [await asyncio.start_server(site.serve, "127.0.0.1", 0) for site in (a, b)]
    a.port, b.port = (s.sockets[0].getsockname()[1] for s in servers)
    proxy = PolicyProxy(allow_private=False, pins=policy.Pins.parse("first.test=127.0.0.1,second.test=127.0.0.1"))
    session = await proxy.open_session()
    try:
        yield proxy, session.port, a, b
    finally:
        await proxy.close_session(session)
        for s in servers:
            s.close()


def request(proxy: PolicyProxy, method: str, url: str, body: bytes = b"", *, headers: str = "") -> bytes:
    auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    host = url.split("/")[2]
    length = f"Content-Length: {len(body)}\r\n" if body and "chunked" not in headers.lower() else ""
    return (f"{method} {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {auth}\r\n"
            f"Proxy-Connection: keep-alive\r\n{length}{headers}\r\n").encode() + body


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on one proxy connection and read until the proxy closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def test_a_second_pipelined_request_never_reaches_any_site() -> None:
    """Two requests on one connection: the first is answered with ``Connection: close`` and the connection ends;
    the second (to another site) reaches neither the first request's site nor its own."""

    async def main() -> None:
        async with world() as (proxy, port, a, b):
            first = request(proxy, "GET", f"http://first.test:{a.port}/one")
            second = request(proxy, "GET", f"http://second.test:{b.port}/two")
            answer = await exchange(port, first + second)
            await asyncio.wait_for(a.done.wait(), 20)
            assert answer.count(b"HTTP/1.1 ") == 1 and answer.endswith(b"\r\n\r\nok")
            head = answer.split(b"\r\n\r\n")[0].lower()
            assert b"connection: close" in head and b"keep-alive" not in head
            assert len(a.requests) == 1 and a.requests[0].startswith(b"GET /one HTTP/1.1\r\n")
            assert a.extra == [b""] and b.requests == []

    asyncio.run(main())


def test_a_request_carries_exactly_its_own_body_and_no_smuggled_request() -> None:
    """A POST's ``Content-Length`` bytes go through; a request glued after them does not."""

    async def main() -> None:
        async with world() as (proxy, port, a, _b):
            smuggled = b"GET /admin HTTP/1.1\r\nHost: first.test\r\n\r\n"
            answer = await exchange(port, request(proxy, "POST", f"http://first.test:{a.port}/form", b"x=1&y=2") + smuggled)
            await asyncio.wait_for(a.done.wait(), 20)
            assert answer.startswith(b"HTTP/1.1 200 OK")
            assert a.requests[0].endswith(b"\r\n\r\nx=1&y=2") and a.extra == [b""]

    asyncio.run(main())


def test_a_chunked_body_is_forwarded_to_its_last_chunk_and_no_further() -> None:
    """Chunks, the last chunk and the trailer section pass; the bytes after them are not read."""

    async def main() -> None:
        async with world() as (proxy, port, a, _b):
            chunked = b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n"
            data = request(proxy, "POST", f"http://first.test:{a.port}/up", chunked, headers="Transfer-Encoding: chunked\r\n")
            answer = await exchange(port, data + b"GET /next HTTP/1.1\r\n\r\n")
            await asyncio.wait_for(a.done.wait(), 20)
            assert answer.startswith(b"HTTP/1.1 200 OK")
            assert a.requests[0].endswith(b"\r\n\r\n" + chunked) and a.extra == [b""]

    asyncio.run(main())


def test_a_request_that_cannot_be_framed_is_refused_before_any_site_is_dialled() -> None:
    """Both ``Content-Length`` and ``Transfer-Encoding``, or two lengths that disagree: 400, no connection made."""

    async def main() -> None:
        async with world() as (proxy, port, a, _b):
            both = request(proxy, "POST", f"http://first.test:{a.port}/x", b"",
                           headers="Content-Length: 3\r\nTransfer-Encoding: chunked\r\n")
            two = request(proxy, "POST", f"http://first.test:{a.port}/x", b"", headers="Content-Length: 3\r\nContent-Length: 4\r\n")
            for data in (both, two):
                assert (await exchange(port, data)).startswith(b"HTTP/1.1 400")
            assert a.requests == []

    asyncio.run(main())


def test_a_name_whose_answer_turns_private_is_refused_on_its_next_request() -> None:
    """DNS rebinding over time: every request (so every connection) resolves and vets again; the public first
    answer buys nothing for the second, which resolves to loopback and is refused."""
    answers = [[ipaddress.ip_address("93.184.216.34")], [ipaddress.ip_address("127.0.0.1")]]

    async def resolver(host: str, port: int) -> list[policy.IPAddress]:
        return answers.pop(0)

    async def main() -> None:
        proxy = PolicyProxy(allow_private=False, pins=policy.Pins(), resolver=resolver)
        assert str(await proxy.vet("rebind.test", 80)) == "93.184.216.34"
        with pytest.raises(policy.UrlRefused, match="resolves to a loopback address"):
            await proxy.vet("rebind.test", 80)
        assert answers == []

    asyncio.run(main())
