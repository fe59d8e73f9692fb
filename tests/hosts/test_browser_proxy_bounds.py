"""The policy proxy at its bounds: connections per session, and the refusal reasons a session keeps."""

from __future__ import annotations

import asyncio
import base64

import pytest

from hosts.browser import policy
from hosts.browser.proxy import MARKER, MAX_REFUSALS_KEPT, PolicyProxy
from tests.polling import until


def _authorized(proxy: PolicyProxy, target: str) -> bytes:
    token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    return f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode()


def test_past_the_connection_cap_a_session_answers_503_and_counts_it(caplog: pytest.LogCaptureFixture) -> None:
    """With ``max_connections`` open on a session the next one gets 503 (marker ``unreachable``), is counted
    and logged; when one closes, the session serves again."""

    async def main() -> None:
        proxy = PolicyProxy(allow_private=True, pins=policy.Pins(), max_connections=2)
        session = await proxy.open_session()
        try:
            held = [await asyncio.open_connection("127.0.0.1", session.port) for _ in range(2)]
            await until(lambda: len(session.tasks) == 2, what="both held connections accepted", step=0)
            reader, writer = await asyncio.open_connection("127.0.0.1", session.port)
            reply = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert reply.startswith(b"HTTP/1.1 503") and f"{MARKER}: unreachable".encode() in reply
            assert proxy.over_cap_total == 1 and "2 connections already open" in caplog.text
            held[0][1].close()
            await until(lambda: len(session.tasks) == 1, what="the closed connection's task to end", step=0)
            reader, writer = await asyncio.open_connection("127.0.0.1", session.port)
            writer.write(b"GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n")  # no credential: 407, not 503
            assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 407")
            writer.close()
            held[1][1].close()
        finally:
            await proxy.close_session(session)

    asyncio.run(main())


def test_a_long_lived_session_keeps_only_the_first_and_newest_refusal_reasons() -> None:
    """Every refusal is counted, but a session (the default one lives as long as the host) keeps at most
    ``MAX_REFUSALS_KEPT`` reasons, the first among them."""

    async def main() -> None:
        proxy = PolicyProxy(allow_private=False, pins=policy.Pins())
        session = await proxy.open_session()
        try:
            targets = ["10.0.0.1", *(f"127.0.0.{i}" for i in range(2, MAX_REFUSALS_KEPT + 12))]
            for target in targets:
                reader, writer = await asyncio.open_connection("127.0.0.1", session.port)
                writer.write(_authorized(proxy, target))
                assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 403")
                writer.close()
            assert proxy.refused_total == len(targets)
            assert len(session.refusals) == MAX_REFUSALS_KEPT
            assert "private" in session.refusals[0] and all("loopback" in r for r in session.refusals[1:])
        finally:
            await proxy.close_session(session)

    asyncio.run(main())
