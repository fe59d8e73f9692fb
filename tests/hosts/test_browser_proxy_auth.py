"""The browser's policy proxy serves Chromium only: anyone else on the machine gets 407 and nothing is fetched."""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path

import psutil
import pytest

from clankie.protocol import Artifact, ScreenshotRequest
from hosts.browser import policy
from hosts.browser.proxy import PolicyProxy
from tests.hosts.hostproc import HostProcess
from tests.hosts.pages import Site


async def _raw(port: int, head: str) -> bytes:
    """Send one request head to a proxy port as an ordinary local program would; return the status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode("latin-1"))
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()


def _heads(site: Site, path: str, auth: str | None) -> list[str]:
    line = f"Proxy-Authorization: {auth}\r\n" if auth else ""
    return [
        f"GET {site.origin}{path} HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n{line}\r\n",
        f"CONNECT 127.0.0.1:{site.port} HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n{line}\r\n",
    ]


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_only_the_proxy_credential_gets_a_page_fetched(caplog: pytest.LogCaptureFixture) -> None:
    """Without the credential, or with a wrong one, the proxy answers 407 and the site sees nothing; with it the page is fetched."""
    caplog.set_level(logging.DEBUG)

    async def main() -> None:
        proxy = PolicyProxy(allow_private=True, pins=policy.Pins.parse(""))
        session = await proxy.open_session()
        try:
            async with Site() as site:
                wrong = [_basic(proxy.username, "guess"), "Bearer " + proxy.password, "Basic !!!not-base64"]
                for auth in (None, *wrong):
                    for head in _heads(site, "/stolen", auth):
                        assert (await _raw(session.port, head)).startswith(b"HTTP/1.1 407 "), (auth, head)
                assert site.hits == []
                assert proxy.unauthenticated_total == 8
                good = _heads(site, "/", _basic(proxy.username, proxy.password))[0]
                assert (await _raw(session.port, good)).startswith(b"HTTP/1.1 200 ")
                assert site.hits == ["/"]
        finally:
            await proxy.close_session(session)

    asyncio.run(main())
    assert proxy_password_absent(caplog.text)


def proxy_password_absent(text: str) -> bool:
    return "Proxy-Authorization" not in text and "Basic " not in text


def test_two_proxies_do_not_share_a_credential() -> None:
    """Each browser host process makes its own random credential."""
    a = PolicyProxy(allow_private=False, pins=policy.Pins.parse(""))
    b = PolicyProxy(allow_private=False, pins=policy.Pins.parse(""))
    assert a.password != b.password and len(a.password) >= 24


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_local_program_cannot_use_the_running_hosts_proxy(env: dict[str, str], tmp_path: Path) -> None:
    """With private sites allowed, the host still screenshots one, but a raw client on its proxy ports gets 407 and fetches nothing."""

    async def main() -> None:
        host_env = {**env, "CLANKIE_BROWSER_ALLOW_PRIVATE": "true"}
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            shot = await (await host.client()).request("screenshot", ScreenshotRequest(url=site.origin + "/"), timeout=70)
            assert isinstance(shot, Artifact)
            assert site.hits == ["/"]
            assert host.proc is not None
            ports = sorted(
                c.laddr.port
                for c in psutil.Process(host.proc.pid).net_connections(kind="tcp4")
                if c.status == psutil.CONN_LISTEN and c.laddr.ip == "127.0.0.1"
            )
            assert ports, "the browser host should be listening on its proxy port"
            before = (await host.next_heartbeat()).report["proxy_unauthenticated"]  # Chromium's own first challenge counts
            for port in ports:
                for head in _heads(site, "/stolen", None):
                    assert (await _raw(port, head)).startswith(b"HTTP/1.1 407 "), port
            assert site.hits == ["/"]
            beat = await host.next_heartbeat()
            assert beat.report["proxy_unauthenticated"] - before == 2 * len(ports)
            assert proxy_password_absent(host.log())

    asyncio.run(main())
