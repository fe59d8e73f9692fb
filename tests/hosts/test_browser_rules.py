"""The URL policy's pure rules and the policy proxy in-process (no browser)."""

from __future__ import annotations

import asyncio
import base64
import ipaddress

import pytest

from clankie.errors import ConfigError, LocalProtocolError
from hosts.browser import policy
from hosts.browser.lifecycle import Lifecycle
from hosts.browser.proxy import MARKER, PolicyProxy
from tests.hosts.pages import Site

REFUSED = [
    "127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1",
    "169.254.169.254", "169.254.1.1", "fe80::1", "fc00::1", "fd00:ec2::254", "100.64.0.1", "100.127.255.254",
    "0.0.0.0", "::", "224.0.0.1", "ff02::1", "64:ff9b::7f00:1", "2002:7f00:1::1", "192.0.2.1", "198.18.0.1",
]
ALLOWED = ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("addr", REFUSED)
def test_non_public_addresses_are_refused_by_default(addr: str) -> None:
    """Loopback, private, link-local, metadata, CGNAT, multicast, unspecified and wrapped forms of them are refused."""
    assert policy.address_verdict(ipaddress.ip_address(addr), allow_private=False) is not None


@pytest.mark.parametrize("addr", ALLOWED)
def test_public_addresses_are_allowed(addr: str) -> None:
    """Globally routable unicast addresses (also IPv4-mapped) may be visited."""
    assert policy.address_allowed(ipaddress.ip_address(addr), allow_private=False)


def test_allow_private_keeps_metadata_multicast_and_unspecified_refused() -> None:
    """allow_private opens loopback and private ranges but never cloud metadata, multicast or 0.0.0.0."""
    ok = ["127.0.0.1", "::1", "10.0.0.1", "192.168.0.1", "100.64.0.1", "fe80::1"]
    for addr in ok:
        assert policy.address_allowed(ipaddress.ip_address(addr), allow_private=True), addr
    for addr in ["169.254.169.254", "fd00:ec2::254", "224.0.0.1", "0.0.0.0", "::"]:
        assert not policy.address_allowed(ipaddress.ip_address(addr), allow_private=True), addr


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "javascript:alert(1)", "ftp://example.com/", "data:text/html,x", "chrome://version",
     "view-source:http://example.com/", "http://user:pw@example.com/", "http:///nohost", "http://example.com:99999/", "//example.com/"],
)
def test_urls_other_than_plain_http_and_https_are_refused(url: str) -> None:
    """Only http(s) URLs with a host, a valid port and no credentials pass the shape check."""
    with pytest.raises(policy.UrlRefused):
        policy.check_url(url)


def test_check_url_normalises_hosts() -> None:
    """Hosts are lower-cased, IDNA-encoded and unbracketed; default ports are filled in."""
    assert policy.check_url("HTTPS://Bücher.Example./x") == policy.Target("https", "xn--bcher-kva.example", 443)
    assert policy.check_url("http://[::1]:8080/") == policy.Target("http", "::1", 8080)


def test_pins_parse_and_reject_garbage() -> None:
    """CLANKIE_BROWSER_PINNED_HOSTS takes name=ip pairs; anything else is a configuration error."""
    pins = policy.Pins.parse(" allowed.test=127.0.0.1 , v6.test=[::1] ")
    assert pins.get("allowed.test") == ipaddress.ip_address("127.0.0.1")
    assert pins.get("v6.test") == ipaddress.ip_address("::1")
    assert pins.get("other.test") is None
    for bad in ("allowed.test", "x=notanip", "=1.2.3.4"):
        with pytest.raises(ConfigError):
            policy.Pins.parse(bad)


async def _through_proxy(proxy: PolicyProxy, head: bytes) -> bytes:
    """Send ``head`` as Chromium would: with the proxy's credential after the request line."""
    token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode())
    line, crlf, rest = head.partition(b"\r\n")
    session = await proxy.open_session()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", session.port)
        writer.write(line + crlf + b"Proxy-Authorization: Basic " + token + b"\r\n" + rest)
        data = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return data
    finally:
        await proxy.close_session(session)


def test_proxy_refuses_names_that_resolve_to_private_addresses() -> None:
    """A name whose DNS answer contains any private address (a rebinding setup) is refused with the marker, for GET and CONNECT."""

    async def resolver(host: str, port: int) -> list[policy.IPAddress]:
        return [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.5")]

    async def main() -> None:
        proxy = PolicyProxy(allow_private=False, pins=policy.Pins(), resolver=resolver)
        for head in (b"GET http://rebind.example/ HTTP/1.1\r\nHost: rebind.example\r\n\r\n", b"CONNECT rebind.example:443 HTTP/1.1\r\n\r\n"):
            reply = await _through_proxy(proxy, head)
            assert reply.startswith(b"HTTP/1.1 403") and f"{MARKER}: refused".encode() in reply
        assert proxy.refused_total == 2

    asyncio.run(main())


def test_proxy_forwards_pinned_hosts_to_the_pinned_address() -> None:
    """A pinned name is fetched from its pinned address, and the origin sees an origin-form request."""

    async def main() -> None:
        async with Site() as site:
            proxy = PolicyProxy(allow_private=False, pins=policy.Pins.parse("allowed.test=127.0.0.1"))
            head = f"GET http://allowed.test:{site.port}/ HTTP/1.1\r\nHost: allowed.test\r\nProxy-Connection: keep-alive\r\n\r\n"
            reply = await _through_proxy(proxy, head.encode())
            assert reply.startswith(b"HTTP/1.1 200") and b"Hello from the test page" in reply
            assert site.hits == ["/"]
            literal = f"GET http://127.0.0.1:{site.port}/ HTTP/1.1\r\nHost: x\r\n\r\n"
            assert (await _through_proxy(proxy, literal.encode())).startswith(b"HTTP/1.1 403")
            assert site.hits == ["/"]

    asyncio.run(main())


def test_lifecycle_counts_crashes_and_restarts() -> None:
    """The browser state machine moves launch -> up -> down on a crash and counts the relaunch; illegal events are bugs."""
    life = Lifecycle()
    life.apply("launch", 0.0)
    life.apply("launched", 1.0)
    life.apply("disconnected", 5.0, "browser_crashed")
    life.apply("launch", 6.0)
    life.apply("launched", 6.5)
    assert life.report(10.0) == {
        "browser": "up", "launches": 2, "restarts": 1, "crashes": 1, "last_error": "browser_crashed", "up_for_s": 3.5, "idle_stops": 0,
    }
    with pytest.raises(LocalProtocolError):
        life.apply("launched", 11.0)


def test_a_failed_launch_logs_chromiums_own_words_on_one_bounded_line() -> None:
    """Why Chromium died at launch (its exit and its stderr, as Playwright reports them) fits one log line."""
    from hosts.browser.chromium import launch_excerpt

    exc = RuntimeError("BrowserType.launch: Target page, context or browser has been closed\nBrowser logs:\n\n"
                       "=========\n[pid=7][err] shm_open failed\n[pid=7] <process did exit: exitCode=null, signal=SIGTRAP>\n")
    line = launch_excerpt(exc)
    assert "\n" not in line and "=====" not in line
    assert line.startswith("BrowserType.launch") and line.endswith("signal=SIGTRAP>") and "shm_open failed" in line
    long = launch_excerpt(RuntimeError("x" * 5000), limit=100)
    assert len(long) == 101 and long.startswith("\u2026")
