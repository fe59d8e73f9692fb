"""One HTTP/1.1 request's framing through the policy proxy: its body exactly, then its response, then close.

The proxy vets one request line per connection (:mod:`hosts.browser.proxy`).
These helpers keep it to that: the request body is forwarded by its own
framing (``Content-Length`` bytes, or chunks up to the last), never a byte past
it, and the response head is rewritten to ``Connection: close``, so a client
that pipelines or reuses the connection never sends a second, unvetted request
to the first request's site.
"""

from __future__ import annotations

import asyncio
import contextlib

from clankie.waits import within

IDLE_TIMEOUT = 60.0
CHUNK = 64 * 1024

HOP_BY_HOP = ("proxy-", "connection:", "keep-alive:", "te:", "upgrade:")
"""Request headers that are about the connection to the proxy, not the request: never passed on."""

CHUNKED = -1


def body_length(headers: list[str]) -> int:
    """The request body's length in bytes, :data:`CHUNKED`, or 0; ValueError for a request that cannot be framed
    (both framings at once, two lengths that disagree, a coding other than chunked: the stuff of smuggling)."""
    lengths: set[str] = set()
    codings: list[str] = []
    for line in headers:
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name = name.strip().lower()
        if name == "content-length":
            lengths.update(v.strip() for v in value.split(","))
        elif name == "transfer-encoding":
            codings.extend(v.strip().lower() for v in value.split(",") if v.strip())
    if codings:
        if lengths or codings != ["chunked"]:
            raise ValueError("unframeable request body")
        return CHUNKED
    if not lengths:
        return 0
    if len(lengths) != 1 or not (text := lengths.pop()).isdigit():
        raise ValueError("unframeable request body")
    return int(text)


async def copy_exactly(src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int) -> None:
    """Copy exactly ``n`` bytes; ConnectionError if ``src`` ends first."""
    while n > 0:
        data = await within(src.read(min(n, CHUNK)), IDLE_TIMEOUT)
        if not data:
            raise ConnectionError("the request body ended early")
        dst.write(data)
        await dst.drain()
        n -= len(data)


async def send_body(src: asyncio.StreamReader, dst: asyncio.StreamWriter, length: int) -> None:
    """Forward exactly one request's body; whatever follows it on the connection is never read."""
    if length != CHUNKED:
        await copy_exactly(src, dst, length)
        return
    while True:
        line = await within(src.readuntil(b"\r\n"), IDLE_TIMEOUT)
        size = int(line.split(b";", 1)[0].strip(), 16)
        dst.write(line)
        if size == 0:
            while (trailer := await within(src.readuntil(b"\r\n"), IDLE_TIMEOUT)) != b"\r\n":
                dst.write(trailer)
            dst.write(b"\r\n")
            await dst.drain()
            return
        await copy_exactly(src, dst, size + 2)


async def relay_response(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """The site's response to the client, its head saying ``Connection: close``, until the site closes."""
    try:
        head = await within(src.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
    except asyncio.IncompleteReadError as exc:  # closed before a whole head: pass on what came, then close
        dst.write(exc.partial)
        return
    except asyncio.LimitOverrunError:
        raise ConnectionError("the site's response head is too long") from None
    status, *fields = head[:-4].split(b"\r\n")
    kept = [f for f in fields if not f.lower().startswith((b"connection:", b"keep-alive:", b"proxy-connection:"))]
    dst.write(b"\r\n".join([status, *kept, b"Connection: close", b"", b""]))
    await pipe(src, dst)


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, fails or idles :data:`IDLE_TIMEOUT`; then end ``dst``."""
    try:
        while True:
            data = await within(src.read(CHUNK), IDLE_TIMEOUT)
            if not data:
                break
            dst.write(data)
            await dst.drain()
    except (OSError, TimeoutError, ConnectionError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if dst.can_write_eof():
                dst.write_eof()
