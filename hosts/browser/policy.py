"""The browser's URL policy, as pure functions: which URLs and which addresses may be visited.

Two checks, both pure:

* :func:`check_url` takes the URL the captain asked for and returns a
  :class:`Target` (scheme, IDNA host, port) or raises :class:`UrlRefused`:
  http and https only, no user-info, a host, a valid port.
* :func:`address_allowed` decides one resolved IP address. By default only
  globally routable unicast addresses pass: loopback, private (RFC 1918, ULA),
  link-local (with the 169.254.169.254 cloud-metadata address), CGNAT
  (100.64/10), multicast, unspecified and NAT64-wrapped addresses are refused.
  IPv4-mapped, 6to4 and Teredo IPv6 addresses are judged by the IPv4 address
  they carry (Python's ``is_loopback`` is False for ``::ffff:127.0.0.1``).
  ``allow_private`` relaxes everything except multicast, unspecified and
  the cloud-metadata addresses, which are never a page anyone means.

:class:`Pins` is the operator's (and the tests') explicit list of names the
policy proxy resolves itself to a fixed address and trusts
(``CLANKIE_BROWSER_PINNED_HOSTS=name=ip,...``). A pinned name skips the
address check; nothing else does. The enforcement point is the policy proxy
(:mod:`hosts.browser.proxy`), which applies these functions to every
connection Chromium makes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from clankie.errors import ConfigError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SCHEMES = {"http": 80, "https": 443}
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


class UrlRefused(Exception):
    """Raised when a URL or an address is outside the policy; ``reason`` is short and content-free."""

    code = "browser_url_refused"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unresolvable(UrlRefused):
    """Raised when a host name has no address: not a policy matter, the site just cannot be reached."""

    code = "browser_navigation_failed"


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str  # IDNA-encoded name or IP literal without brackets
    port: int

    @property
    def ip(self) -> IPAddress | None:
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return None


def address_verdict(ip: IPAddress, *, allow_private: bool) -> str | None:
    """Why ``ip`` is refused (a short reason), or ``None`` if it may be visited."""
    inner = _embedded_v4(ip)
    if inner is not None:
        return address_verdict(inner, allow_private=allow_private)
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_multicast:
        return "multicast address"
    if ip in METADATA:
        return "cloud metadata address"
    if allow_private:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and (ip in NAT64 or ip in NAT64_LOCAL):
        return "NAT64 address"
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if not ip.is_global:
        return "private address"
    return None


def address_allowed(ip: IPAddress, *, allow_private: bool) -> bool:
    return address_verdict(ip, allow_private=allow_private) is None


def check_url(url: str) -> Target:
    """Parse and check the URL's shape; addresses are checked separately."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise UrlRefused("the URL cannot be parsed") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise UrlRefused("only http and https URLs can be visited")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("URLs with user names or passwords are not visited")
    host = parts.hostname
    if not host:
        raise UrlRefused("the URL has no host")
    return Target(scheme, normalise_host(host), port or SCHEMES[scheme])


def normalise_host(host: str) -> str:
    """Lower-case, strip brackets and a trailing dot, IDNA-encode names."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        encoded = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise UrlRefused("the host name is not valid") from None
    if not encoded or len(encoded) > 253 or any(c in encoded for c in "/\\@ %"):
        raise UrlRefused("the host name is not valid")
    return encoded


@dataclass(frozen=True, slots=True)
class Pins:
    """Names resolved to a fixed, trusted address (``name=ip`` pairs)."""

    table: tuple[tuple[str, IPAddress], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Pins:
        """Parse ``CLANKIE_BROWSER_PINNED_HOSTS``; a bad entry is a configuration error."""
        table = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, addr = item.partition("=")
            try:
                if not sep:
                    raise ValueError(item)
                table.append((normalise_host(name.strip()), ipaddress.ip_address(addr.strip().strip("[]"))))
            except (ValueError, UrlRefused):
                raise ConfigError(
                    f"CLANKIE_BROWSER_PINNED_HOSTS: {item[:80]!r} is not name=ip"
                ) from None
        return cls(tuple(table))

    def get(self, host: str) -> IPAddress | None:
        for name, addr in self.table:
            if name == host:
                return addr
        return None
