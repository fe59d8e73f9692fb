"""The demo page: the policy proxy serves it itself in demo mode only, and the URL policy is unchanged around it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import ipaddress
from pathlib import Path

import pytest
from PIL import Image

from clankie.errors import RemoteError
from clankie.testing.clock import FakeClock
from hosts.browser import policy
from hosts.browser.demo_site import DEMO_HOST, LONG_PAGE_SECONDS, DemoSite
from hosts.browser.proxy import PolicyProxy
from service.agent import demo as demo_model
from tests.hosts.hostproc import HostProcess, shoot
from tests.hosts.pages import Site
from tests.polling import until


class Resolver:
    """Every name resolves to loopback (what a rebinding name or a hostile DNS would say); calls are recorded."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[policy.IPAddress]:
        self.asked.append(host)
        return [ipaddress.ip_address("127.0.0.1")]


async def _get(proxy: PolicyProxy, port: int, url: str) -> bytes:
    """One proxied GET as Chromium sends it (absolute URL, the proxy's credential); the whole response."""
    auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {url} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def test_demo_mode_serves_the_page_in_process_and_still_refuses_loopback() -> None:
    """With a demo site the proxy answers the demo host itself (no resolving, no connection); every other name is
    vetted as before, so a name resolving to loopback is still refused (403)."""

    async def main() -> None:
        resolver = Resolver()
        proxy = PolicyProxy(allow_private=False, pins=policy.Pins.parse(""), resolver=resolver,
                            demo=DemoSite(FakeClock()))
        session = await proxy.open_session()
        try:
            page = await _get(proxy, session.port, f"http://{DEMO_HOST}/")
            assert page.startswith(b"HTTP/1.1 200 OK\r\n") and b"Clankie demo page" in page and b"This is a demo" in page
            missing = await _get(proxy, session.port, f"http://{DEMO_HOST.upper()}/etc/passwd")
            assert missing.startswith(b"HTTP/1.1 404 ")
            assert resolver.asked == []
            for url in (f"http://{DEMO_HOST}:8080/", "http://rebinding.example/"):  # another port is not the demo's
                refused = await _get(proxy, session.port, url)
                assert refused.startswith(b"HTTP/1.1 403 ") and b"loopback" in refused, url
            assert resolver.asked == [DEMO_HOST, "rebinding.example"]
            assert proxy.refused_total == 2
        finally:
            await proxy.close_session(session)

    asyncio.run(main())


def test_without_demo_mode_the_demo_host_is_just_a_name_the_policy_vets() -> None:
    """No demo site: the demo host is resolved and vetted like any name (here it resolves to loopback: 403)."""

    async def main() -> None:
        resolver = Resolver()
        proxy = PolicyProxy(allow_private=False, pins=policy.Pins.parse(""), resolver=resolver)
        session = await proxy.open_session()
        try:
            refused = await _get(proxy, session.port, f"http://{DEMO_HOST}/")
            assert refused.startswith(b"HTTP/1.1 403 ") and b"Clankie demo page" not in refused
            assert resolver.asked == [DEMO_HOST]
        finally:
            await proxy.close_session(session)

    asyncio.run(main())


def test_the_long_page_answers_after_its_wait_on_the_hosts_clock() -> None:
    """``/long`` waits LONG_PAGE_SECONDS on the injected clock, then answers the page."""

    async def main() -> None:
        clock = FakeClock()
        site = DemoSite(clock)
        answer = asyncio.ensure_future(site.answer("GET", "/long?x=1"))
        await until(lambda: clock.sleepers == 1, 10, "the long page sleeping")
        clock.advance(LONG_PAGE_SECONDS - 0.1)
        await asyncio.sleep(0)  # sleep: one loop turn, in which a premature answer would complete
        assert not answer.done()
        clock.advance(0.1)
        assert (await answer).status == 200
        assert (await site.answer("POST", "/")).status == 404

    asyncio.run(main())


def test_the_demo_model_asks_for_the_page_the_host_serves() -> None:
    """The service's copy of the demo URLs (it may not import hosts/) names the host's demo site."""
    assert demo_model.DEMO_HOST == DEMO_HOST
    assert DemoSite.serves(policy.check_url(demo_model.DEMO_URL).host, policy.check_url(demo_model.DEMO_URL).port)
    assert DemoSite.serves(policy.check_url(demo_model.DEMO_LONG_URL).host, 80)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_demo_mode_host_photographs_the_demo_page_and_still_refuses_loopback(
    env: dict[str, str], state_dir: Path, tmp_path: Path
) -> None:
    """A real browser host in demo mode (default policy, real Chromium): the demo page is photographed, the PNG under
    the root hashes to its ref; a page on 127.0.0.1 and https to the demo host are refused, and the site saw nothing."""

    async def main() -> None:
        demo_env = {**env, "CLANKIE_DEMO": "1"}
        async with Site() as site, HostProcess("browser", demo_env, tmp_path / "host.log") as host:
            art = await shoot(host, demo_model.DEMO_URL)
            data = (state_dir / "attachments" / art.ref.split(":")[2]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == art.sha256 and len(data) == art.size
            image = Image.open(io.BytesIO(data))
            assert image.size == (1280, 800) and image.convert("RGB").getpixel((5, 5)) == (0x0F, 0x27, 0x42)
            with pytest.raises(RemoteError) as refused:
                await shoot(host, site.origin + "/")
            assert refused.value.code == "browser_url_refused" and "loopback" in refused.value.message
            with pytest.raises(RemoteError) as unserved:  # only plain http on port 80 is the demo's: this is a name
                await shoot(host, f"https://{DEMO_HOST}/")
            assert unserved.value.code in ("browser_url_refused", "browser_navigation_failed")
            assert site.hits == []

    asyncio.run(main())
