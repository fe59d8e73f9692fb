"""Clients for the browser and tldraw hosts: connect lazily, reconnect with jittered backoff.

A host that is down is not an error of the turn: the tool tells the model
``<host>_unavailable`` so he can say so, and the next call tries again once
the backoff allows it.

A browser host outside the tree (``CLANKIE_BROWSER_HOST=external``, its own
unit and user) is dialled at ``CLANKIE_BROWSER_SOCKET`` with the same hello
and methods; its screenshots are not under our attachment root, so
:class:`ImportingClient` reads each one from ``CLANKIE_BROWSER_ARTIFACTS``,
checks it against its hash (:func:`clankie.artifacts.resolve_artifact`) and
writes it under our root by that same ref, where the tool and the bridge
find it as they find every other artifact.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from clankie import artifacts, ipc
from clankie.backoff import Backoff
from clankie.clock import Clock
from clankie.errors import ChannelBroken, ChannelClosed, ClankieError, RemoteError
from clankie.protocol import Artifact, Code, Record

log = logging.getLogger(__name__)


class HostUnavailable(ClankieError):
    """The host's socket is not there or not answering (its fault, or not started yet)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class HostClient:
    """One lazily dialled connection to a host socket."""

    def __init__(self, name: str, path: Path, clock: Clock, backoff: Backoff | None = None) -> None:
        self.name = name
        self.path = path
        self._clock = clock
        self._backoff = backoff or Backoff(base=0.2, cap=10.0, reset_after=30.0)
        self._conn: ipc.Connection | None = None
        self._next_try = 0.0

    @property
    def unavailable_code(self) -> str:
        return f"{self.name}_unavailable"

    async def request(self, method: str, params: Record, timeout: float) -> Record:
        """Call ``method`` on the host; raises :class:`HostUnavailable` or ``RemoteError``."""
        conn = await self._connection()
        try:
            return await conn.request(method, params, timeout=timeout)
        except (ChannelBroken, ChannelClosed):
            self._conn = None
            raise HostUnavailable(self.unavailable_code) from None

    async def _connection(self) -> ipc.Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        now = self._clock.monotonic()
        if now < self._next_try:
            raise HostUnavailable(self.unavailable_code)
        try:
            self._conn = await ipc.connect(self.path, "service")
        except (OSError, ChannelBroken, ChannelClosed, ClankieError) as exc:
            self._next_try = now + self._backoff.delay(now)
            log.warning("%s host not reachable (%s); next try in %.1fs", self.name, type(exc).__name__, self._next_try - now)
            raise HostUnavailable(self.unavailable_code) from None
        self._backoff.reset()
        log.info("connected to the %s host", self.name)
        return self._conn

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.aclose()
            self._conn = None


class ImportingClient(HostClient):
    """A host outside the tree: every artifact it answers is verified by hash and copied under our own root."""

    def __init__(self, name: str, path: Path, clock: Clock, *, source: Path, root: Path, max_bytes: int) -> None:
        super().__init__(name, path, clock)
        self.source = source
        self.root = root
        self.max_bytes = max_bytes

    async def request(self, method: str, params: Record, timeout: float) -> Record:
        reply = await super().request(method, params, timeout)
        if isinstance(reply, Artifact):
            await asyncio.to_thread(self.import_artifact, reply)
        return reply

    def import_artifact(self, artifact: Artifact) -> None:
        """``artifact`` (and each of its extra refs) read from the host's directory, its hash checked, and written under
        our root by the same ref; anything wrong is the host's refusal, with the resolver's code."""
        try:
            if artifacts.parse_ref(artifact.ref)[0] != artifact.sha256:
                raise artifacts.ArtifactError(Code.ARTIFACT_HASH_MISMATCH, "the record names another hash than its ref")
            for ref in (artifact.ref, *artifact.extra_refs):
                self._copy(ref)
        except artifacts.ArtifactError as exc:
            log.warning("%s artifact refused: %s", self.name, exc.code)
            raise RemoteError(exc.code, f"the {self.name} host's artifact was refused: {exc}") from None

    def _copy(self, ref: str) -> None:
        resolved = artifacts.resolve_artifact(self.source, ref, self.max_bytes)
        _digest, sub, ext = artifacts.parse_ref(ref)
        try:
            artifacts.write_artifact(self.root, sub, resolved.data, ext)
        except (OSError, ClankieError):
            log.exception("cannot copy a %s artifact under the attachment root", self.name)
            raise RemoteError(Code.ARTIFACT_WRITE_FAILED, "the artifact could not be copied under the attachment root") from None
