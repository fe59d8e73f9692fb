"""The URL policy's pure rules and the policy proxy in-process (no browser)."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
from pathlib import Path

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


UNITS = Path(__file__).resolve().parents[2] / "docs" / "systemd"


def _unit_denied() -> list[str]:
    """Every address the shipped units' ``IPAddressDeny=`` lines name (each network's first and last address)."""
    found: set[str] = set()
    for unit in sorted(UNITS.glob("*.service")):
        for line in unit.read_text().splitlines():
            if line.startswith("IPAddressDeny="):
                for cidr in line.partition("=")[2].split():
                    net = ipaddress.ip_network(cidr)
                    found |= {str(net[0]), str(net[-1])}
    return sorted(found)


METADATA = ["169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"]


def test_the_units_deny_the_cloud_metadata_addresses_the_policy_is_checked_against() -> None:
    """The list below is read from the shipped units, so a unit that denies a new address is tested here too."""
    assert set(METADATA) <= set(_unit_denied())


@pytest.mark.parametrize("addr", sorted(set(METADATA) | set(_unit_denied())))
def test_every_metadata_address_the_unit_denies_is_refused_even_with_allow_private(addr: str) -> None:
    """Whatever CLANKIE_BROWSER_ALLOW_PRIVATE says, each address IPAddressDeny lists is refused, also wrapped in an
    IPv6 form that carries it (mapped, NAT64, 6to4), as a literal or as a name resolving to it, and cannot be
    pinned."""
    ip = ipaddress.ip_address(addr)
    forms = [ip]
    if isinstance(ip, ipaddress.IPv4Address):
        v4 = int(ip)
        forms += [ipaddress.IPv6Address((0xFFFF << 32) | v4), ipaddress.IPv6Address("64:ff9b::") + v4,
                  ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80))]
    for form in forms:
        assert policy.address_verdict(form, allow_private=True) == "cloud metadata address", form
        assert policy.address_verdict(form, allow_private=False) == "cloud metadata address", form

    async def resolver(host: str, port: int) -> list[policy.IPAddress]:
        return [ip]

    async def main() -> None:
        proxy = PolicyProxy(allow_private=True, pins=policy.Pins(), resolver=resolver)
        literal = f"[{ip}]" if ip.version == 6 else str(ip)
        for head in (f"GET http://{literal}/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                     b"GET http://metadata.example/ HTTP/1.1\r\nHost: metadata.example\r\n\r\n",
                     b"CONNECT metadata.example:443 HTTP/1.1\r\n\r\n"):
            reply = await _through_proxy(proxy, head)
            assert reply.startswith(b"HTTP/1.1 403") and f"{MARKER}: refused".encode() in reply, head
        assert proxy.refused_total == 3

    asyncio.run(main())
    with pytest.raises(ConfigError, match="cloud metadata"):
        policy.Pins.parse(f"meta.test={addr}")


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
