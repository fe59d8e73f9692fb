"""The ports the bridge's durable memory is kept behind, one Protocol per durable thing (pure).

Each port has two adapters that pass one contract suite (``tests/clankie/store/test_contract_*.py``): the file
adapter, today's code on one machine's disk (``bridge/store_files.py``), and the PostgreSQL adapter, whose every
write is fenced by the shard's lease epoch (:mod:`clankie.store.bridge_pg`). The ports are async because the
PostgreSQL adapter is; the file adapters answer at once.

- :class:`DedupeStore`: every admitted message id for the retention window, with its body's fingerprint
  (:class:`bridge.dedupe.Dedupe`);
- :class:`GatewaySessionStore`: each shard's gateway session, what a RESUME needs (session id, resume URL, the
  sequence of the last journaled event; :mod:`bridge.gateway_session`).

Times are wall-clock seconds (a message's expiry must mean the same after a restart, or on another machine).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, Protocol

SeenAs = Literal["new", "same", "conflict"]
"""What the dedupe memory says of a message id: never seen (or expired), seen with this body, seen with another."""

Shard = tuple[int, int]
"""(shard id, shard count); an unsharded bot is (0, 1)."""


class StaleEpoch(Exception):
    """Raised by a fenced write whose lease epoch is stale (another tree took the shard) or whose lease expired.

    Defined here, with the ports, so that a caller can tell it apart without loading the driver
    (:mod:`clankie.store.leases` raises it)."""


def fingerprint_key(fingerprint: str) -> int:
    """64 bits of a body's fingerprint as a signed integer (a PostgreSQL ``bigint``); the file adapter keeps the
    same 64 bits unsigned (:func:`bridge.dedupe.fp_key`)."""
    return signed_key(int.from_bytes(hashlib.blake2b(fingerprint.encode(), digest_size=8).digest(), "little"))


def signed_key(value: int) -> int:
    """A fingerprint's 64 bits kept unsigned (the file adapter's, :func:`bridge.dedupe.fp_key`) as the database keeps
    them, signed."""
    return value - (1 << 64) if value >= 1 << 63 else value


class DedupeStore(Protocol):
    """The de-duplication memory."""

    async def check(self, message_id: str, fingerprint: str, now: float) -> SeenAs:
        """Whether ``message_id`` was admitted and has not expired by ``now``, and with this body."""
        ...

    async def add(self, message_id: str, fingerprint: str, expires: float) -> None:
        """Remember ``message_id`` until ``expires`` (again: the newer expiry and body win)."""
        ...

    async def discard(self, message_id: str) -> None:
        """Forget one id (its turn could not be run, so a re-delivery may try again)."""
        ...

    async def prune(self, now: float) -> None:
        """Forget what has expired by ``now``."""
        ...

    async def close(self) -> None:
        """Make everything added durable (the file adapter writes its snapshot) and let go of the store."""
        ...


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """What a RESUME needs for one shard, and when the session started (wall seconds)."""

    session_id: str
    resume_url: str
    seq: int | None
    since: float


class GatewaySessionStore(Protocol):
    """Each shard's gateway session."""

    async def load(self, shard: Shard) -> SessionRecord | None:
        """The session to RESUME for ``shard``, or None (IDENTIFY)."""
        ...

    async def save(self, shard: Shard, record: SessionRecord) -> None:
        """A new session (READY): it replaces whatever was kept for ``shard``."""
        ...

    async def advance(self, shard: Shard, seq: int) -> None:
        """Events up to ``seq`` are journaled: a RESUME may start after them. The sequence never goes back."""
        ...

    async def forget(self, shard: Shard) -> None:
        """The session is given up (an IDENTIFY follows)."""
        ...

    async def close(self) -> None:
        """Make everything durable and let go of the store."""
        ...
