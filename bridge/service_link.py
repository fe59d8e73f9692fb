"""The bridge's connection to the captain's ``service.sock``.

One connection at a time. When it drops, the first re-dial is immediate: the
supervisor holds ``service.sock`` across a service restart, so the connect
waits in its backlog and the next service answers it. Only dials that fail
(no service at all, the hand-over off) back off, with jitter.
:meth:`ServiceLink.submit` holds a turn open as long as the service takes (no
client timeout); if the connection breaks first, it waits for the next
connection and submits the same delivery again. The service de-duplicates by
delivery id, so a re-submission joins the turn already running or returns its
retained result: one outcome per delivery.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from bridge.receipts import code as reason_code
from clankie import ipc
from clankie.backoff import Backoff
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed, ConfigError, RemoteError, RequestTimeout
from clankie.protocol import Code, TurnResult, TurnSubmit

log = logging.getLogger(__name__)

RETRYABLE_REMOTE = frozenset({Code.CANCELLED, Code.SHUTTING_DOWN, Code.SERVICE_UNAVAILABLE})
MAX_REMOTE_RETRIES = 5
HELLO_WAIT = 30.0
"""How long a dial may wait in the supervisor's backlog for the next service to answer its hello."""
MIN_HEALTHY = 0.5
"""A connection up this long earns an immediate re-dial when it drops; a shorter one backs off."""


class ServiceLink:
    def __init__(self, path: Path, handler: ipc.Handler, clock: Clock, backoff: Backoff | None = None) -> None:
        self.path = path
        self._handler = handler
        self._clock = clock
        self._backoff = backoff or Backoff(base=0.05, cap=5.0, reset_after=30.0)
        self._conn: ipc.Connection | None = None
        self._changed = asyncio.Condition()
        self.connects = 0
        self.resubmits = 0

    @property
    def status(self) -> str:
        return "connected" if self._conn is not None and not self._conn.closed else "connecting"

    async def run(self) -> None:
        """Keep a connection up until cancelled."""
        while True:
            try:
                conn = await ipc.connect(self.path, "bridge", self._handler, timeout=HELLO_WAIT)
            except (ChannelBroken, ConfigError, OSError, RequestTimeout) as exc:
                delay = self._backoff.delay(self._clock.monotonic())
                log.debug("service not reachable (%s); retrying in %.2fs", type(exc).__name__, delay)
                await self._clock.sleep(delay)
                continue
            except RemoteError as exc:  # the service answered the hello with a refusal: a service started cold serves
                # before the supervisor has named its clients (peer_not_allowed), so this is a wait, never our end
                delay = self._backoff.delay(self._clock.monotonic())
                log.warning("the service refused this bridge's hello (%s); retrying in %.2fs", exc.code, delay)
                await self._clock.sleep(delay)
                continue
            self.connects += 1
            up_since = self._clock.monotonic()
            log.info("connected to the service (connection %d)", self.connects)
            await self._set(conn)
            try:
                await conn.wait_closed()
            finally:
                await self._set(None)
                if not conn.closed:
                    await conn.aclose()
            if self._clock.monotonic() - up_since >= MIN_HEALTHY:
                self._backoff.reset()
                log.warning("service connection lost: %s; re-dialling now", conn.close_reason)
            else:  # it dropped as soon as it was up: do not spin
                delay = self._backoff.delay(self._clock.monotonic())
                log.warning("service connection lost at once: %s; re-dialling in %.2fs", conn.close_reason, delay)
                await self._clock.sleep(delay)

    async def _set(self, conn: ipc.Connection | None) -> None:
        async with self._changed:
            self._conn = conn
            self._changed.notify_all()

    async def _connection(self, not_this: ipc.Connection | None) -> ipc.Connection:
        async with self._changed:
            await self._changed.wait_for(
                lambda: self._conn is not None and self._conn is not not_this and not self._conn.closed
            )
            assert self._conn is not None
            return self._conn

    async def submit(self, record: TurnSubmit) -> TurnResult:
        """Run one turn to its result, across reconnects; service errors become ``failed``."""
        last: ipc.Connection | None = None
        remote_retries = 0
        while True:
            conn = await self._connection(last)
            if last is not None:
                self.resubmits += 1
                log.info("re-submitting delivery %s after a reconnect", record.delivery_id)
            try:
                result = await conn.request("turn.submit", record, expect=TurnResult)
            except (ChannelBroken, ChannelClosed):
                last = conn
                continue
            except RemoteError as exc:
                if exc.code in RETRYABLE_REMOTE and remote_retries < MAX_REMOTE_RETRIES:
                    remote_retries += 1
                    last = conn
                    continue
                # a full disk is the service's to say (once, in its own line); anything else is worth a warning here
                level = logging.INFO if exc.code in (Code.SERVICE_DISK_FULL, Code.SERVICE_DISK_ERROR) else logging.WARNING
                log.log(level, "service refused delivery %s: %s", record.delivery_id, exc.code)
                return TurnResult.failed(reason_code(exc.code))
            return result
