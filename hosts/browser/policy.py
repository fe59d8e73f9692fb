"""The browser's URL policy, as pure functions: which URLs and which addresses may be visited.

Two checks, both pure:

* :func:`check_url` takes the URL the captain asked for and returns a
  :class:`Target` (scheme, IDNA host, port) or raises :class:`UrlRefused`:
  http and https only, no user-info, a host, a valid port.
* :func:`address_allowed` decides one resolved IP address. By default only
  globally routable unicast addresses pass: loopback, private (RFC 1918, ULA),
  link-local (with the 169.254.169.254 cloud-metadata address), CGNAT
  (100.64/10), multicast and unspecified addresses are refused. IPv6 is
  judged first by the explicit table :data:`IPV6_RANGES` (the IANA IPv6
  special-purpose registry, first match wins), never by Python's
  ``is_global`` alone (which called ``::7f00:1`` global, and changed between
  patch releases: CVE-2024-4032): IPv4-compatible (``::/96``) and
  IPv4-translated (``::ffff:0:0:0/96``) addresses are refused outright;
  IPv4-mapped, NAT64 (``64:ff9b::/96``), 6to4 and Teredo addresses are judged
  by the IPv4 address they carry. ``allow_private`` relaxes loopback, private
  and link-local ranges, never multicast, unspecified, the cloud-metadata
  addresses (:data:`METADATA`: every address the shipped units deny, and
  wrapped forms of them) or the table's never-a-page ranges.
* Host names are read as Chromium reads them (the WHATWG URL standard): a
  host whose last label is a number is an IPv4 address in any of its numeric
  forms (``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``), so the
  policy judges the address Chromium would connect to (:func:`whatwg_ipv4`).

:class:`Pins` is the operator's (and the tests') explicit list of names the
policy proxy resolves itself to a fixed address and trusts
(``CLANKIE_BROWSER_PINNED_HOSTS=name=ip,...``). A pinned name skips the
address check; nothing else does, and no name may be pinned to a cloud
metadata address. The enforcement point is the policy proxy
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
METADATA: frozenset[IPAddress] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, Oracle, OpenStack instance metadata
    "fd00:ec2::254",  # AWS instance metadata over IPv6
    "169.254.170.2",  # AWS ECS task metadata and credentials
    "169.254.170.23",  # AWS EKS Pod Identity credentials
    "fd00:ec2::23",  # AWS EKS Pod Identity credentials over IPv6
    "100.100.100.200",  # Alibaba Cloud instance metadata
))
"""Cloud metadata and credential endpoints: refused whatever ``allow_private`` says, and never pinned. Holds every
address the shipped units' ``IPAddressDeny=`` lists (``docs/systemd``; a test reads them), so the policy refuses
outside systemd what the unit refuses inside it."""

EMBEDDED = "embedded"
"""A range whose addresses carry an IPv4 address: judged by that address (:func:`embedded_v4`)."""


@dataclass(frozen=True, slots=True)
class Range:
    """One row of :data:`IPV6_RANGES`: a network, why it is refused (or :data:`EMBEDDED`), and whether
    ``allow_private`` lets it through."""

    network: ipaddress.IPv6Network
    verdict: str
    private: bool = False  # relaxed by allow_private (loopback, ULA, link-local); else refused always


def _r(cidr: str, verdict: str, private: bool = False) -> Range:
    return Range(ipaddress.IPv6Network(cidr), verdict, private)


IPV6_RANGES: tuple[Range, ...] = (
    _r("::/128", "unspecified address"),
    _r("::1/128", "loopback address", private=True),
    _r("::ffff:0:0/96", EMBEDDED),  # IPv4-mapped (RFC 4291)
    _r("::ffff:0:0:0/96", "IPv4-translated address"),  # SIIT (RFC 2765): never a destination of its own
    _r("::/96", "IPv4-compatible address"),  # deprecated (RFC 4291 2.5.5.1): ::7f00:1 is 127.0.0.1 to some stacks
    _r("64:ff9b::/96", EMBEDDED),  # NAT64 well-known prefix (RFC 6052); inside ::/8, so before it
    _r("64:ff9b:1::/48", "local NAT64 address", private=True),  # RFC 8215: a private translator
    _r("::/8", "reserved address"),  # the rest of the IETF-reserved block
    _r("100::/64", "discard-only address"),  # RFC 6666
    _r("2001::/32", EMBEDDED),  # Teredo (RFC 4380)
    _r("2001:db8::/32", "documentation address"),  # RFC 3849
    _r("2001::/23", "IETF protocol address"),  # the rest of the IETF protocol assignments (ORCHID, AMT, ...)
    _r("2002::/16", EMBEDDED),  # 6to4 (RFC 3056)
    _r("3fff::/20", "documentation address"),  # RFC 9637
    _r("5f00::/16", "segment routing address"),  # RFC 9602
    _r("fc00::/7", "private address", private=True),  # unique local (RFC 4193)
    _r("fe80::/10", "link-local address", private=True),
    _r("fec0::/10", "site-local address", private=True),  # deprecated (RFC 3879)
    _r("ff00::/8", "multicast address"),
)
"""Refused and re-judged IPv6 ranges, first match wins; an address in none of them must still be ``is_global``."""


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


def embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    """The IPv4 address an IPv4-mapped, NAT64, 6to4 or Teredo address carries (the caller knows it is one)."""
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)  # mapped and NAT64: the low 32 bits


def range_of(ip: ipaddress.IPv6Address) -> Range | None:
    """The first row of :data:`IPV6_RANGES` that holds ``ip``."""
    return next((row for row in IPV6_RANGES if ip in row.network), None)


def is_metadata(ip: IPAddress) -> bool:
    """Whether ``ip`` is a cloud metadata address (:data:`METADATA`), also inside an IPv6 form that carries one."""
    if ip in METADATA:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        row = range_of(ip)
        return row is not None and row.verdict == EMBEDDED and embedded_v4(ip) in METADATA
    return False


def address_verdict(ip: IPAddress, *, allow_private: bool) -> str | None:
    """Why ``ip`` is refused (a short reason), or ``None`` if it may be visited."""
    if is_metadata(ip):
        return "cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        row = range_of(ip)
        if row is not None and row.verdict == EMBEDDED:
            return address_verdict(embedded_v4(ip), allow_private=allow_private)
        if row is not None:
            return None if allow_private and row.private else row.verdict
    if ip.is_unspecified:
        return "unspecified address"
    if ip.is_multicast:
        return "multicast address"
    if allow_private:
        return None
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
    """Lower-case, strip brackets and a trailing dot, IDNA-encode names; an address in any form Chromium
    reads as one (an IPv6 literal, or an IPv4 address in a numeric form) becomes its canonical text."""
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
    v4 = whatwg_ipv4(encoded)
    return str(v4) if v4 is not None else encoded


def _ipv4_number(part: str) -> int | None:
    """One dotted part as the URL standard reads it: ``0x`` hex, a leading ``0`` octal, else decimal."""
    base = 10
    if part[:2] in ("0x", "0X"):
        part, base = part[2:], 16
    elif len(part) > 1 and part.startswith("0"):
        part, base = part[1:], 8
    if part == "":
        return 0
    digits = {10: "0123456789", 16: "0123456789abcdef", 8: "01234567"}[base]
    if not all(c in digits for c in part):
        return None
    return int(part, base)


def whatwg_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """``host`` as the IPv4 address Chromium would connect to, or None if it is a name.

    The WHATWG URL standard's "ends in a number" rule: if the last label is all
    digits, or ``0x`` and hex digits, the host is an IPv4 address of one to four
    numeric parts (``127.1``, ``2130706433``, ``0x7f.1``, ``0177.0.0.1``) and a
    malformed one is not a name but an invalid host (refused).
    """
    labels = host.split(".")
    last = labels[-1]
    is_number = last.isdigit() or (last[:2] in ("0x", "0X") and all(c in "0123456789abcdefABCDEF" for c in last[2:]))
    if not last or not is_number:
        return None
    numbers = [_ipv4_number(part) if part else None for part in labels]
    if len(labels) > 4 or any(n is None for n in numbers):
        raise UrlRefused("the host is not a valid IPv4 address")
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise UrlRefused("the host is not a valid IPv4 address")
    address = values[-1]
    for i, n in enumerate(values[:-1]):
        address += n << (8 * (3 - i))
    return ipaddress.IPv4Address(address)


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
                ip = ipaddress.ip_address(addr.strip().strip("[]"))
                table.append((normalise_host(name.strip()), ip))
            except (ValueError, UrlRefused):
                raise ConfigError(
                    f"CLANKIE_BROWSER_PINNED_HOSTS: {item[:80]!r} is not name=ip"
                ) from None
            if is_metadata(ip):
                raise ConfigError(f"CLANKIE_BROWSER_PINNED_HOSTS: {item[:80]!r} pins a cloud metadata address")
        return cls(tuple(table))

    def get(self, host: str) -> IPAddress | None:
        for name, addr in self.table:
            if name == host:
                return addr
        return None
