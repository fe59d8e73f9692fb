"""The policy proxy: the one place every browser connection is vetted.

Chromium is launched with this proxy for every URL, loopback included, and
with resolver rules that make every other name and address unreachable, so
whatever a page does (redirect hops, subresources, JavaScript navigations,
WebSockets, which Chromium sends as ``CONNECT``) arrives here first. For each
request line the proxy resolves the host **once** itself (or takes a pinned
address), refuses unless every address passes :func:`policy.address_verdict`,
and connects to the vetted IP without resolving again, so DNS rebinding
gains nothing.

One vetted request per connection: a plain-HTTP request is forwarded with
exactly its own body (``Content-Length`` bytes, or its chunks up to the last
one) and nothing more, its response goes back marked ``Connection: close``,
and the connection is closed. A second request Chromium (or a page) sends on
the same connection never reaches the first request's site: it is not read.
A ``CONNECT`` tunnel carries one vetted host and port for its whole life.

A refusal is ``403`` with the marker header :data:`MARKER` set to
``refused`` and a short plain-text page; a site that cannot be reached is
``502`` with the marker ``unreachable``. The host recognises both on the
final response. Each request
gets its own :class:`Session` (its own listening port, bound to that
request's browser context) so refusals are attributed to the request that
caused them.

Every session demands the proxy's per-process random credential (HTTP Basic
in ``Proxy-Authorization``), which only Chromium is given (Playwright's
``proxy={"server", "username", "password"}``). Anything else on the machine
that finds the loopback port gets ``407`` and nothing is fetched for it. The
credential is never logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import ipaddress
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from clankie.waits import within

from . import policy
from .demo_site import DemoSite
from .http1 import CHUNK, HOP_BY_HOP, IDLE_TIMEOUT, body_length, pipe, relay_response, send_body

log = logging.getLogger(__name__)

MARKER = "X-Clankie-Policy"
HEAD_LIMIT = 64 * 1024
CONNECT_TIMEOUT = 10.0
MAX_SESSION_CONNECTIONS = 256
"""Connections one session serves at once (Chromium opens far fewer per proxy); past it a new one gets ``503``."""
MAX_REFUSALS_KEPT = 16
"""Refusal reasons a session keeps: the first and the newest (every refusal is still logged and counted)."""

Resolver = Callable[[str, int], Awaitable[list[policy.IPAddress]]]


async def system_resolver(host: str, port: int) -> list[policy.IPAddress]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


@dataclass(slots=True)
class Session:
    """One request's proxy listener and what it refused."""

    port: int = 0
    refusals: list[str] = field(default_factory=list)  # reasons, in order
    connections: int = 0
    server: asyncio.base_events.Server | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class PolicyProxy:
    """Vets and forwards HTTP and CONNECT requests; see the module docstring."""

    def __init__(
        self, *, allow_private: bool, pins: policy.Pins, resolver: Resolver = system_resolver,
        max_connections: int = MAX_SESSION_CONNECTIONS, demo: DemoSite | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.demo = demo  # demo mode only: the demo page, answered here (hosts/browser/demo_site.py)
        self.pins = pins
        self.resolver = resolver
        self.max_connections = max_connections
        self.refused_total = 0
        self.unauthenticated_total = 0
        self.over_cap_total = 0  # connections turned away at max_connections
        self.username = "clankie"
        self.password = secrets.token_urlsafe(24)

    @property
    def credentials(self) -> dict[str, str]:
        """What Playwright needs to authenticate to a session: ``{"username", "password"}``."""
        return {"username": self.username, "password": self.password}

    def authorized(self, headers: list[str]) -> bool:
        """Whether the request head carries this proxy's Basic credential."""
        for line in headers:
            name, sep, value = line.partition(":")
            if not sep or name.strip().lower() != "proxy-authorization":
                continue
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() != "basic":
                return False
            try:
                given = base64.b64decode(token.strip(), validate=True)
            except (binascii.Error, ValueError):
                return False
            expected = f"{self.username}:{self.password}".encode()
            return hmac.compare_digest(given, expected)
        return False

    async def open_session(self) -> Session:
        """Listen on a fresh loopback port for one request."""
        session = Session()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            if len(session.tasks) >= self.max_connections:
                self.over_cap_total += 1
                log.warning("policy proxy: %d connections already open on one session; turned one away (503)",
                            self.max_connections)
                _reply(writer, 503, "Service Unavailable", "too many connections through this proxy",
                       marker="unreachable")
                writer.close()
                return
            session.tasks.add(task)
            try:
                await self._handle(session, reader, writer)
            finally:
                session.tasks.discard(task)

        session.server = await asyncio.start_server(accept, "127.0.0.1", 0, limit=HEAD_LIMIT)
        session.port = session.server.sockets[0].getsockname()[1]
        return session

    async def close_session(self, session: Session) -> None:
        """Stop listening and cut every connection the request still holds."""
        if session.server is not None:
            session.server.close()
        for task in list(session.tasks):
            task.cancel()
        if session.tasks:
            await asyncio.gather(*session.tasks, return_exceptions=True)

    # ------------------------------------------------------------ vetting

    async def vet(self, host: str, port: int) -> policy.IPAddress:
        """The address to connect to, or :class:`policy.UrlRefused`."""
        host = policy.normalise_host(host)
        pinned = self.pins.get(host)
        if pinned is not None:
            return pinned
        if port < 1 or port > 65535:
            raise policy.UrlRefused("invalid port")
        try:
            literal: policy.IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            reason = policy.address_verdict(literal, allow_private=self.allow_private)
            if reason is not None:
                raise policy.UrlRefused(f"the address is a {reason}")
            return literal
        try:
            addrs = await within(self.resolver(host, port), CONNECT_TIMEOUT)
        except (OSError, TimeoutError):
            raise policy.Unresolvable("the host name does not resolve") from None
        if not addrs:
            raise policy.Unresolvable("the host name does not resolve")
        for addr in addrs:  # every address must pass: a mixed answer is refused
            reason = policy.address_verdict(addr, allow_private=self.allow_private)
            if reason is not None:
                raise policy.UrlRefused(f"the host name resolves to a {reason}")
        return addrs[0]

    # ------------------------------------------------------------ serving

    async def _handle(self, session: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session.connections += 1
        try:
            head = await within(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        except asyncio.CancelledError:  # the session closed while the head was awaited: close this socket too
            writer.close()
            raise
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            if not self.authorized(lines[1:]):
                self.unauthenticated_total += 1
                log.info("policy proxy: request without the proxy credential refused (407)")
                _reply(writer, 407, "Proxy Authentication Required", "this proxy is for Clankie's browser only",
                       extra={"Proxy-Authenticate": 'Basic realm="clankie"'})
                return
            if method == "CONNECT":
                host, port = _split_authority(target, 443)
                await self._connect(session, host, port, reader, writer)
            else:
                await self._forward(session, method, target, version, lines[1:], reader, writer)
        except policy.Unresolvable:
            _reply(writer, 502, "Bad Gateway", "the host name does not resolve", marker="unreachable")
        except policy.UrlRefused as exc:
            self._refuse(session, writer, exc.reason)
        except ValueError:
            _reply(writer, 400, "Bad Request", "the proxy could not read this request")
        except (OSError, TimeoutError):
            _reply(writer, 502, "Bad Gateway", "the site could not be reached", marker="unreachable")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _refuse(self, session: Session, writer: asyncio.StreamWriter, reason: str) -> None:
        if len(session.refusals) >= MAX_REFUSALS_KEPT:  # the long-lived default session must not grow forever
            del session.refusals[1]  # keep the first (what a request reports) and the newest
        session.refusals.append(reason)
        self.refused_total += 1
        log.info("policy proxy refused a connection: %s", reason)
        _reply(writer, 403, "Forbidden", f"Refused by Clankie's browser policy: {reason}.", marker="refused")

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        addr = await self.vet(host, port)
        return await within(asyncio.open_connection(str(addr), port, limit=CHUNK), CONNECT_TIMEOUT)

    async def _connect(
        self, session: Session, host: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        up_reader, up_writer = await self._open(host, port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _pipe_both(reader, writer, up_reader, up_writer)

    async def _forward(
        self,
        session: Session,
        method: str,
        target: str,
        version: str,
        headers: list[str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if not target.lower().startswith("http://"):
            raise ValueError("absolute http URL expected")
        rest = target[len("http://") :]
        authority, slash, path = rest.partition("/")
        host, port = _split_authority(authority, 80)
        if self.demo is not None and self.demo.serves(policy.normalise_host(host), port):
            answer = await self.demo.answer(method, f"/{path if slash else ''}")
            writer.write(answer.encode())  # in process: no connection to any address
            await within(writer.drain(), IDLE_TIMEOUT)
            return
        length = body_length(headers)  # before connecting: a request we cannot frame is refused (400)
        up_reader, up_writer = await self._open(host, port)
        kept = [h for h in headers if h and not h.lower().startswith(HOP_BY_HOP)]
        request = f"{method} /{path if slash else ''} {version}\r\n" + "".join(f"{h}\r\n" for h in kept)
        up_writer.write((request + "Connection: close\r\n\r\n").encode("latin-1"))
        body = asyncio.ensure_future(send_body(reader, up_writer, length))
        try:
            await relay_response(up_reader, writer)
        finally:
            await _end(body, up_writer)


def _split_authority(authority: str, default_port: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else default_port
        return host, port
    host, sep, port_text = authority.rpartition(":")
    if not sep:
        return authority, default_port
    return host, int(port_text)


def _reply(
    writer: asyncio.StreamWriter,
    status: int,
    phrase: str,
    text: str,
    *,
    marker: str | None = None,
    extra: dict[str, str] | None = None,
) -> None:
    body = text.encode("utf-8") + b"\n"
    fields = {**({MARKER: marker} if marker else {}), **(extra or {})}
    extra_lines = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n{extra_lines}Connection: close\r\n\r\n"
    )
    with contextlib.suppress(Exception):
        writer.write(head.encode("latin-1") + body)


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until the site is done with us; then close both ends."""
    upstream = asyncio.ensure_future(pipe(reader, up_writer))
    try:
        await pipe(up_reader, writer)
    finally:
        await _end(upstream, up_writer)


async def _end(copying: asyncio.Future[None], up_writer: asyncio.StreamWriter) -> None:
    """Stop the copy toward the site (whatever it was doing) and close our end of the site's connection."""
    copying.cancel()
    with contextlib.suppress(BaseException):
        await copying
    up_writer.close()
