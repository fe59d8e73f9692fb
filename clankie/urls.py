"""Checks for the URL-valued settings: one place decides what a usable base URL looks like.

Pure: each function returns the normalised value or raises ``ValueError``
with a short reason, which :mod:`clankie.settings` turns into a one-line
configuration error (exit 78).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

_API_PATH = re.compile(r"^(?:/[A-Za-z0-9._~-]+)*/api/v[0-9]{1,3}$")


def _split(value: str) -> SplitResult:
    text = value.strip()
    if not text or any(ch.isspace() for ch in text):
        raise ValueError("must be an http(s) URL without spaces")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError("must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry a user or password")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query or fragment")
    try:
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if not parts.hostname or port == 0:
        raise ValueError("must name a host (and a port from 1 to 65535 if any)")
    return parts


def http_base(value: str) -> str:
    """An http(s) base URL such as ``http://127.0.0.1:8080`` (a path prefix is allowed)."""
    parts = _split(value)
    return parts.geturl().rstrip("/")


def discord_api_base(value: str) -> str:
    """Discord's REST base **including** ``/api/v<N>``, e.g. ``http://127.0.0.1:PORT/api/v10``."""
    parts = _split(value)
    path = parts.path.rstrip("/")
    if not _API_PATH.match(path):
        raise ValueError("must end with the API version path, e.g. http://127.0.0.1:8080/api/v10")
    return parts._replace(path=path).geturl()


def is_loopback(value: str) -> bool:
    """Whether ``value`` is an http(s) URL whose host is a loopback IP literal (``127.0.0.0/8``, ``::1``).

    A name (``localhost`` included) is not: what it resolves to is not this function's to know.
    """
    try:
        host = _split(value).hostname or ""
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
