"""The URL policy end to end: a real browser host with the default policy and real Chromium.

The test site runs on 127.0.0.1, which the default policy refuses. To have
an *allowed* origin that does not look private, the host is started with
``CLANKIE_BROWSER_PINNED_HOSTS=allowed.test=127.0.0.1``: the policy proxy
resolves that one name itself and trusts it (docs/hosts.md). Every other
way to reach 127.0.0.1 must still be refused, and the site's hit log shows
that the refused requests never arrived.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie.errors import RemoteError
from clankie.protocol import Artifact
from tests.hosts.hostproc import HostProcess, attempt, policy_env
from tests.hosts.pages import Site

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_private_and_non_http_urls_are_refused_by_default(env: dict[str, str], tmp_path: Path) -> None:
    """127.0.0.1, localhost, [::1], mapped IPv6, 169.254.169.254, CGNAT and non-http schemes are refused, and nothing reaches the site."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", policy_env(env), tmp_path / "host.log") as host:
            port = site.port
            urls = [
                f"http://127.0.0.1:{port}/",
                f"http://localhost:{port}/",
                f"http://[::1]:{port}/",
                f"http://[::ffff:127.0.0.1]:{port}/",
                f"https://127.0.0.1:{port}/",
                "http://169.254.169.254/latest/meta-data/",
                "http://100.64.0.1/",
                "http://10.0.0.1/",
                "http://0.0.0.0/",
                "file:///etc/passwd",
                "javascript:alert(1)",
                "ftp://allowed.test/",
                "data:text/html,<h1>hi</h1>",
                f"view-source:http://allowed.test:{port}/",
                f"http://user:pw@allowed.test:{port}/",
            ]
            for url in urls:
                outcome = await attempt(host, url)
                assert isinstance(outcome, RemoteError) and outcome.code == "browser_url_refused", url
            assert site.hits == []
            assert host.alive()

    asyncio.run(main())


def test_redirects_to_private_addresses_are_refused_at_the_hop(env: dict[str, str], tmp_path: Path) -> None:
    """An allowed page that redirects to 127.0.0.1, localhost or [::1] is refused, and the private target never sees the request."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", policy_env(env), tmp_path / "host.log") as host:
            allowed = f"http://allowed.test:{site.port}"
            ok = await attempt(host, allowed + "/")
            assert isinstance(ok, Artifact)
            for target in (f"http://127.0.0.1:{site.port}/secret", f"http://localhost:{site.port}/secret", f"http://[::1]:{site.port}/secret", f"https://127.0.0.1:{site.port}/secret", "http://169.254.169.254/secret"):
                outcome = await attempt(host, f"{allowed}/redirect?to={target}")
                assert isinstance(outcome, RemoteError) and outcome.code == "browser_url_refused", target
            assert "/secret" not in site.hits
            assert site.hits.count("/redirect") == 5
            beat = await host.next_heartbeat()
            assert beat.report["policy_refusals"] >= 5

    asyncio.run(main())


def test_subresources_websockets_and_frames_cannot_reach_private_addresses(env: dict[str, str], tmp_path: Path) -> None:
    """An allowed page still renders, but its image, fetch, iframe and WebSocket aimed at 127.0.0.1 never reach the private site."""

    async def main() -> None:
        async with Site() as allowed_site, Site() as private_site, HostProcess("browser", policy_env(env), tmp_path / "host.log") as host:
            url = f"http://allowed.test:{allowed_site.port}/embed?src=http://127.0.0.1:{private_site.port}"
            outcome = await attempt(host, url)
            assert isinstance(outcome, Artifact)
            assert allowed_site.hits == ["/embed"]
            assert private_site.hits == []

    asyncio.run(main())


def test_allow_private_lets_the_browser_visit_loopback(env: dict[str, str], tmp_path: Path) -> None:
    """With CLANKIE_BROWSER_ALLOW_PRIVATE=true the same loopback redirect is followed, but cloud metadata and non-http schemes stay refused."""

    async def main() -> None:
        host_env = {**policy_env(env), "CLANKIE_BROWSER_ALLOW_PRIVATE": "true"}
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            outcome = await attempt(host, f"http://allowed.test:{site.port}/redirect?to=http://localhost:{site.port}/")
            assert isinstance(outcome, Artifact)
            assert site.hits == ["/redirect", "/"]
            for url in ("file:///etc/passwd", "http://169.254.169.254/latest/meta-data/"):
                refused = await attempt(host, url)
                assert isinstance(refused, RemoteError) and refused.code == "browser_url_refused", url

    asyncio.run(main())
