"""The explicit IPv6 table and the numeric IPv4 forms (pure): what the policy refuses does not hang on ``is_global``."""

from __future__ import annotations

import ipaddress

import pytest

from hosts.browser import policy


def verdict(address: str, *, allow_private: bool = False) -> str | None:
    return policy.address_verdict(ipaddress.ip_address(address), allow_private=allow_private)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::7f00:1", "IPv4-compatible address"),  # Python 3.11 calls this is_global
        ("::127.0.0.1", "IPv4-compatible address"),
        ("::a9fe:a9fe", "IPv4-compatible address"),
        ("::808:808", "IPv4-compatible address"),  # even a public v4 inside: the form is never a destination
        ("::ffff:0:7f00:1", "IPv4-translated address"),
        ("::ffff:0:808:808", "IPv4-translated address"),
        ("::2:0:0:1", "reserved address"),
        ("64:ff9b::7f00:1", "loopback address"),  # NAT64 judged by the IPv4 it carries
        ("64:ff9b::a00:1", "private address"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata address"),
        ("64:ff9b:1::8.8.8.8", "local NAT64 address"),
        ("::ffff:127.0.0.1", "loopback address"),
        ("::ffff:169.254.169.254", "cloud metadata address"),
        ("2002:7f00:1::1", "loopback address"),  # 6to4
        ("100::1", "discard-only address"),
        ("2001:db8::1", "documentation address"),
        ("3fff::1", "documentation address"),
        ("2001:10::1", "IETF protocol address"),
        ("5f00::1", "segment routing address"),
        ("fc00::1", "private address"),
        ("fe80::1", "link-local address"),
        ("fec0::1", "site-local address"),
        ("ff02::1", "multicast address"),
        ("::", "unspecified address"),
        ("::1", "loopback address"),
        ("fd00:ec2::254", "cloud metadata address"),
    ],
)
def test_every_special_ipv6_range_is_refused_by_its_row(address: str, reason: str) -> None:
    """Each row of the table refuses with its own reason (first match wins)."""
    assert verdict(address) == reason


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "::ffff:8.8.8.8", "2606:4700:4700::1111", "2a00:1450::1"])
def test_global_addresses_and_nat64_of_a_public_ipv4_pass(address: str) -> None:
    """A NAT64 or mapped address of a public IPv4 is that public address; ordinary global unicast passes."""
    assert verdict(address) is None


def test_allow_private_relaxes_only_the_private_rows() -> None:
    """Loopback, ULA, link-local and local NAT64 open up; the never-a-page rows and metadata do not."""
    for address in ("::1", "fc00::1", "fe80::1", "64:ff9b:1::1", "64:ff9b::7f00:1", "::ffff:10.0.0.1"):
        assert verdict(address, allow_private=True) is None, address
    for address in ("::7f00:1", "::ffff:0:7f00:1", "::", "ff02::1", "2001:db8::1", "fd00:ec2::254", "64:ff9b::a9fe:a9fe"):
        assert verdict(address, allow_private=True) is not None, address


def test_the_table_is_ordered_so_no_row_hides_a_narrower_one() -> None:
    """First match wins, so a row never comes after a wider row that holds it (it would never be reached)."""
    rows = policy.IPV6_RANGES
    for i, row in enumerate(rows):
        for earlier in rows[:i]:
            assert not row.network.subnet_of(earlier.network) or row.network == earlier.network, (row, earlier)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.1", "127.0.0.1"),
        ("10.0.0.010", "10.0.0.8"),
        ("0", "0.0.0.0"),
        ("3232235521", "192.168.0.1"),
        ("169.254.43518", "169.254.169.254"),
    ],
)
def test_numeric_ipv4_forms_are_read_as_chromium_reads_them(host: str, address: str) -> None:
    """The WHATWG URL standard's IPv4 parser: the policy judges the address Chromium would connect to."""
    assert policy.normalise_host(host) == address
    assert policy.check_url(f"http://{host}:8080/x").host == address


@pytest.mark.parametrize("host", ["256.1", "1.2.3.4.5", "a.123", "08.1", "1.2.3.0x100", "4294967296", "1.2.65536"])
def test_a_malformed_numeric_host_is_refused_not_resolved(host: str) -> None:
    """A host that ends in a number but is no IPv4 address is invalid, as in Chromium; it never reaches DNS."""
    with pytest.raises(policy.UrlRefused, match="not a valid IPv4 address"):
        policy.normalise_host(host)


@pytest.mark.parametrize("host", ["example.com", "1.example", "0x.example", "123abc", "a1"])
def test_names_that_only_contain_digits_stay_names(host: str) -> None:
    """Only a last label that is a number makes an address."""
    assert policy.normalise_host(host) == host


@pytest.mark.parametrize(
    "url",
    [
        "http://[fe80::1%25eth0]/",  # a zone id does not make link-local reachable
        "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/",  # fullwidth digits: IDNA maps them to 127.0.0.1
        "http://\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11/",  # and ideographic full stops
        "http://0x7f.0.0.1./",  # a trailing dot
        "http://[::ffff:7f00:1]/",
        "blob:http://allowed.test/x",
        "about:blank",
    ],
)
def test_the_remaining_spellings_of_a_private_or_non_http_target_are_refused(url: str) -> None:
    """The forms security-notes listed as untested: each is refused by its shape or by the address it names."""
    try:
        target = policy.check_url(url)
    except policy.UrlRefused:
        return
    assert target.ip is not None and policy.address_verdict(target.ip, allow_private=False) is not None, target
