"""The metrics port: a listening TCP socket that no flood of connections can turn against the supervisor.

It is served inside the supervisor (issue 37 item 2), so what it may hold is
bounded by hand instead of by a process of its own:

* **a hard cap** on the connections it holds (``CLANKIE_METRICS_MAX_CONNECTIONS``,
  and never more than a quarter of the supervisor's fd limit whatever that says):
  it never holds more descriptors than that, plus the one just accepted. At the
  cap a new connection takes the place of the one that has waited longest
  without sending its request (an idle or slow client); when every held
  connection is being answered, the new one is closed at once. So a scraper,
  which sends its request at once, gets in past any number of idle
  connections, and ``control.sock``, the links and the log files keep their
  descriptors;
* **a header-read timeout** (``CLANKIE_METRICS_HEADER_SECONDS``): a connection
  that has not sent its whole request head by then is closed, and one whose
  answer is not taken within it too. One request per connection
  (``Connection: close``), so nothing idles between scrapes;
* **its own accept loop**, not asyncio's: an accept that fails (``EMFILE``,
  ``ENFILE``, ``ENOBUFS``, ``ENOMEM``) pauses the port for a second instead of
  writing a log record with a traceback each time (at 20,000 connections
  asyncio's wrote 311 MB in two minutes);
* **one log line per flood** (:class:`Flood`): the first connection closed or
  refused for the cap, or the first failed accept, after a quiet minute is one
  warning; the rest are counted (``clankie_metrics_connections_dropped_total``)
  until the port has been quiet for a minute again.

Nothing is authenticated, so a port bound beyond loopback is a warning at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import itertools
import logging
import resource
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from clankie.errors import ConfigError
from clankie.settings_observability import parse_listen
from clankie.tasks import TaskSet
from clankie.waits import within
from supervisor.metric_families import CONNECTIONS_DROPPED

log = logging.getLogger(__name__)

Answer = Callable[[str | None], tuple[bytes, str]]
"""The ``Accept`` header of a scrape -> the body and its content type."""

MAX_HEAD = 8192
"""Bytes a request head may take (the request line and its headers); past it the answer is 431."""
ACCEPT_BATCH = 64
"""Connections accepted per wake of the loop (the loop serves the tree between batches)."""
ACCEPT_PAUSE = 1.0
"""Seconds the port stops accepting after an accept failed for want of descriptors or memory."""
FLOOD_QUIET = 60.0
"""Seconds without a dropped connection that end a flood (the next drop is logged again)."""
BACKLOG = 128
FD_SHARE = 4
"""The port holds at most this share of the supervisor's soft fd limit, whatever its setting says."""
_OUT_OF = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass
class Flood:
    """One log line per flood (pure; ``now`` is passed in): :meth:`hit` is True for the first drop after
    :data:`FLOOD_QUIET` seconds without one, and counts the rest."""

    quiet: float = FLOOD_QUIET
    last: float | None = None
    in_flood: int = 0  # drops in the current flood
    floods: int = 0

    def hit(self, now: float) -> bool:
        starts = self.last is None or now - self.last >= self.quiet
        self.last = now
        if starts:
            self.floods += 1
            self.in_flood = 0
        self.in_flood += 1
        return starts


@dataclass(frozen=True, slots=True)
class Admit:
    evict: int | None = None  # the key of the held connection to close first


@dataclass(frozen=True, slots=True)
class Refuse:
    pass


def admit(held: list[tuple[int, bool]], cap: int) -> Admit | Refuse:
    """A new connection, given the held ones oldest first as ``(key, still reading its request)``: under the cap it
    is let in; at the cap it replaces the oldest one still reading, or is refused when every one is being answered."""
    if len(held) < cap:
        return Admit()
    waiting = next((key for key, reading in held if reading), None)
    return Refuse() if waiting is None else Admit(evict=waiting)


@dataclass
class _Held:
    conn: socket.socket
    task: asyncio.Task[None] | None = None
    reading: bool = True


@dataclass
class Dropped:
    """Connections the port let go of early, by why (``clankie_metrics_connections_dropped_total``)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("evicted", "refused", "timeout", "accept_failed", "bad_request"), 0))


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``): nothing beyond this machine reaches it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Port:
    """``GET /metrics`` (and ``HEAD``) on one TCP address, capped and timed (the module's docstring says how)."""

    def __init__(self, listen: str, answer: Answer, *, max_connections: int = 16, header_seconds: float = 10.0) -> None:
        self.host, self.port = parse_listen(listen)
        self._answer = answer
        self.max_connections = max_connections
        self.header_seconds = header_seconds
        self._socks: list[socket.socket] = []  # one per address the host names (localhost: 127.0.0.1 and ::1)
        self._held: dict[int, _Held] = {}  # a connection's number -> it; insertion order is age
        self._numbers = itertools.count()
        self._tasks = TaskSet("metrics connections", 2 * max_connections + 1)
        self.flood = Flood()
        self.dropped = Dropped()
        self.scrapes = 0
        self._paused: asyncio.TimerHandle | None = None

    @property
    def held(self) -> int:
        return len(self._held)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        room = max(1, soft // FD_SHARE)
        if self.max_connections > room:
            log.warning("CLANKIE_METRICS_MAX_CONNECTIONS=%d is more than a %dth of the fd limit (%d): holding at most %d",
                        self.max_connections, FD_SHARE, soft, room)
            self.max_connections = room
        socks: list[socket.socket] = []
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in dict.fromkeys(infos):  # every address of the host, as asyncio does
                sock = socket.socket(family, kind, proto)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except OSError as exc:
            for sock in socks:
                sock.close()
            raise ConfigError(f"CLANKIE_METRICS_LISTEN: cannot listen on {self.host}:{self.port} "
                              f"({exc.strerror or exc})") from exc
        self._socks = socks
        for sock in socks:
            loop.add_reader(sock.fileno(), self._accept, sock)
        log.info("serving metrics on %s:%d/metrics (at most %d connections, %gs to send a request)", self.host,
                 self.port, self.max_connections, self.header_seconds)
        if not loopback(self.host):
            log.warning("CLANKIE_METRICS_LISTEN=%s:%d is reachable beyond this machine and has no authentication: "
                        "anyone who can reach it reads the tree's metrics; bind it to 127.0.0.1 or firewall it",
                        self.host, self.port)

    # -- accepting -------------------------------------------------------------

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            if self._tasks.full:  # evicted connections still ending: leave the rest in the backlog until they have
                return
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno not in _OUT_OF:
                    raise
                self._drop("accept_failed", "cannot accept a metrics connection (%s); pausing the port %gs",
                           errno.errorcode.get(exc.errno or 0, "?"), ACCEPT_PAUSE)
                self._pause()
                return
            self._take(conn)

    def _pause(self) -> None:
        loop = asyncio.get_running_loop()
        if not self._socks or self._paused is not None:
            return
        for sock in self._socks:
            loop.remove_reader(sock.fileno())
        self._paused = loop.call_later(ACCEPT_PAUSE, self._resume)

    def _resume(self) -> None:
        self._paused = None
        for sock in self._socks:
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept, sock)

    def _take(self, conn: socket.socket) -> None:
        verdict = admit([(key, h.reading) for key, h in self._held.items()], self.max_connections)
        if isinstance(verdict, Refuse) or self._tasks.full:
            conn.close()
            self._drop("refused", "metrics port at its cap of %d connections, every one being answered; "
                       "closing new ones", self.max_connections)
            return
        if verdict.evict is not None:
            victim = self._held.pop(verdict.evict)
            if victim.task is not None:
                victim.task.cancel()  # its done-callback closes the socket once the task has ended
            self._drop("evicted", "metrics port at its cap of %d connections: the one waiting longest for its "
                       "request makes room for each new one", self.max_connections)
        conn.setblocking(False)
        held = _Held(conn)
        key = next(self._numbers)
        self._held[key] = held
        held.task = self._tasks.spawn(self._serve(key, conn, held), name="metrics-connection")
        # closed when its task ends, even one cancelled before it ran; never before (the loop may still watch its fd)
        held.task.add_done_callback(lambda _task: conn.close())

    def _drop(self, why: str, fmt: str, *args: object) -> None:
        self.dropped.counts[why] += 1
        if self.flood.hit(asyncio.get_running_loop().time()):
            log.warning(fmt + " (one line per flood; counted in clankie_metrics_connections_dropped_total)", *args)

    # -- one connection --------------------------------------------------------

    async def _serve(self, key: int, conn: socket.socket, held: _Held) -> None:
        loop = asyncio.get_running_loop()
        try:
            try:
                head = await within(self._read_head(conn), self.header_seconds)
            except TimeoutError:
                self.dropped.counts["timeout"] += 1
                return
            held.reading = False
            status, body, content_type, send_body = self._respond(head)
            reply = _reply(status, body if send_body else b"", content_type, len(body))
            try:
                await within(loop.sock_sendall(conn, reply), self.header_seconds)
            except TimeoutError:
                self.dropped.counts["timeout"] += 1
        except OSError:  # the client went away
            pass
        finally:
            if self._held.get(key) is held:
                del self._held[key]

    async def _read_head(self, conn: socket.socket) -> bytes | None:
        """The request head without its blank line; None when it is too large."""
        loop = asyncio.get_running_loop()
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD:
                return None
            chunk = await loop.sock_recv(conn, 4096)
            if not chunk:
                raise ConnectionResetError("closed before its request")
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0]
        return None if len(head) > MAX_HEAD else head

    def _respond(self, head: bytes | None) -> tuple[str, bytes, str, bool]:
        """(status line, body, content type, whether the body is sent) for one request head."""
        text = "text/plain; charset=utf-8"
        if head is None:
            self.dropped.counts["bad_request"] += 1
            return "431 Request Header Fields Too Large", b"request head too large\n", text, True
        request_line, *headers = head.decode("latin-1").split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self.dropped.counts["bad_request"] += 1
            return "400 Bad Request", b"bad request\n", text, True
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET /metrics\n", text, True
        if target.split("?", 1)[0] != "/metrics":
            return "404 Not Found", b"GET /metrics\n", text, method == "GET"
        accept = next((v.strip() for k, _, v in (h.partition(":") for h in headers) if k.strip().lower() == "accept"),
                      None)
        body, content_type = self._answer(accept)
        self.scrapes += 1
        return "200 OK", body, content_type, method == "GET"

    # -- shown and closed ------------------------------------------------------

    def collector(self) -> Collector:
        return _PortCollector(self)

    async def close(self) -> None:
        socks, self._socks = self._socks, []
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        for sock in socks:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        self._held.clear()
        await self._tasks.aclose(timeout=5.0)


def _reply(status: str, body: bytes, content_type: str, length: int) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n")
    if status.startswith("405"):
        head += "Allow: GET, HEAD\r\n"
    return head.encode("latin-1") + b"\r\n" + body


class _PortCollector(Collector):
    def __init__(self, port: Port) -> None:
        self.port = port

    def collect(self) -> Iterator[Metric]:
        dropped = CounterMetricFamily(CONNECTIONS_DROPPED.name, CONNECTIONS_DROPPED.help, labels=CONNECTIONS_DROPPED.labels)
        for why, n in self.port.dropped.counts.items():
            dropped.add_metric([why], float(n))
        yield dropped
