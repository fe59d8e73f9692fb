"""The bridge's de-duplication memory: every admitted message id for the retention window, in bytes (pure).

Discord message ids are snowflakes: 64-bit numbers whose top bits are the
millisecond they were made, so they sort by age. :class:`Dedupe` keeps them in
three parallel arrays sorted by id: the id (``array('Q')``), 64 bits of the
message's fingerprint, and when it may be forgotten (``array('d')``). That is
24 bytes a message plus the arrays' slack (``bench/dedupe_memory.py`` measures
it with tracemalloc), where a dict of objects costs about 300. A lookup is a
binary search; a new message is nearly always the newest id and is appended; an
older one (a catch-up read back from history) is inserted near the end. Expired
and evicted ids leave from the front, and the arrays are cut down once an
eighth of them is gone.

**The bound never refuses a message** (``CLANKIE_DISCORD_MAX_RETAINED``). Past
it the oldest id goes if it was admitted before the catch-up horizon
(``CLANKIE_RECOVERY_HORIZON_SECONDS``): nothing can hand the bridge that
message again (a new gateway session replays nothing, a resumed one replays
seconds, and the history read-back starts at the horizon), so forgetting it
costs nothing (``evicted``). An id admitted within the horizon is kept past the
bound, up to twice it; only beyond that does the oldest go anyway, counted in
``forgot_early`` (a message that old coming back would be answered again).

Ids that are not canonical decimal 64-bit numbers (local tools and tests use
ids like ``m1``) are kept by value in a small insertion-ordered dict under the
same rules; nothing Discord sends takes that path.

:meth:`Dedupe.snapshot` and :meth:`Dedupe.restore` carry it across a restart
(the journal writes the snapshot at each compaction, :mod:`bridge.journal`).
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import struct
import sys
from array import array
from bisect import bisect_left
from collections import OrderedDict

MAX_ID = (1 << 64) - 1
MAX_FP = (1 << 64) - 1  # a fingerprint's 64 bits, unsigned (PostgreSQL keeps them signed: clankie.store.ports.fingerprint_key)
COMPACT_AT = 4096
"""The arrays are cut down once this many ids (and an eighth of them) have left from the front."""
MAGIC = b"clankie-dedupe\x00\x01"
_HEADER = struct.Struct("<16sQQ")  # magic, snowflake ids, bytes of the others' JSON


class Seen(enum.Enum):
    """What the memory says about a message id."""

    NEW = "new"
    SAME = "same"  # seen, with the same fingerprint: a re-delivery
    CONFLICT = "conflict"  # seen, with another body


def id_key(delivery_id: str) -> int | None:
    """The id as a 64-bit number, or None if it is not a canonical decimal snowflake."""
    if not 0 < len(delivery_id) <= 20 or not delivery_id.isascii() or not delivery_id.isdigit():
        return None
    if delivery_id[0] == "0" and len(delivery_id) > 1:
        return None  # "07" and "7" are different ids; only the canonical spelling is a number
    value = int(delivery_id)
    return value if value <= MAX_ID else None


def fp_key(fingerprint: str) -> int:
    """64 bits of a fingerprint: enough to tell a re-delivery from a different body (2⁻⁶⁴ to be wrong)."""
    return int.from_bytes(hashlib.blake2b(fingerprint.encode(), digest_size=8).digest(), "little")


class Dedupe:
    """Message ids admitted within ``retention`` seconds, bounded by ``bound`` (see the module doc)."""

    def __init__(self, *, retention: float, horizon: float, bound: int) -> None:
        if bound < 1:
            raise ValueError("the bound must be at least 1")
        self.retention = retention
        self.horizon = horizon
        self.bound = bound
        self._ids = array("Q")
        self._fps = array("Q")
        self._expires = array("d")
        self._head = 0  # ids before this index have left
        self._other: OrderedDict[str, tuple[int, float]] = OrderedDict()  # id -> (fp, expires), oldest first
        self._now = float("-inf")  # the latest time seen: an admission, a check or a prune
        self.evicted = 0  # left at the bound, admitted before the horizon
        self.forgot_early = 0  # left at twice the bound although admitted within the horizon

    def __len__(self) -> int:
        return len(self._ids) - self._head + len(self._other)

    def __contains__(self, delivery_id: object) -> bool:
        return isinstance(delivery_id, str) and self._expiry(delivery_id) > self._now

    # ------------------------------------------------------------ queries

    def check(self, delivery_id: str, fingerprint: str, now: float) -> Seen:
        """Whether ``delivery_id`` was admitted within the retention, and with this body."""
        self.prune(now)
        found = self._find(delivery_id)
        if found is None or found[1] <= now:
            return Seen.NEW
        return Seen.SAME if found[0] == fp_key(fingerprint) else Seen.CONFLICT

    def _find(self, delivery_id: str) -> tuple[int, float] | None:
        key = id_key(delivery_id)
        if key is None:
            return self._other.get(delivery_id)
        i = self._index(key)
        return (self._fps[i], self._expires[i]) if i >= 0 else None

    def _index(self, key: int) -> int:
        i = bisect_left(self._ids, key, self._head)
        return i if i < len(self._ids) and self._ids[i] == key else -1

    def _expiry(self, delivery_id: str) -> float:
        found = self._find(delivery_id)
        return found[1] if found is not None else float("-inf")

    # ------------------------------------------------------------ changes

    def add(self, delivery_id: str, fingerprint: str, expires: float) -> None:
        """Remember ``delivery_id`` until ``expires`` (admitted at ``expires - retention``); then keep the bound."""
        self._now = max(self._now, expires - self.retention)
        self._put(delivery_id, fp_key(fingerprint), expires)
        self._keep_bound()

    def _put(self, delivery_id: str, fp: int, expires: float) -> None:
        key = id_key(delivery_id)
        if key is None:
            self._other[delivery_id] = (fp, expires)
            self._other.move_to_end(delivery_id)
            return
        ids = self._ids
        i = bisect_left(ids, key, self._head)
        if i < len(ids) and ids[i] == key:
            self._fps[i], self._expires[i] = fp, expires
        elif i == len(ids):
            ids.append(key)
            self._fps.append(fp)
            self._expires.append(expires)
        elif i == self._head and self._head > 0:  # older than everything held: reuse a slot that has left
            self._head -= 1
            ids[self._head], self._fps[self._head], self._expires[self._head] = key, fp, expires
        else:
            ids.insert(i, key)
            self._fps.insert(i, fp)
            self._expires.insert(i, expires)

    def recall(self, entries: list[tuple[str, int, float]]) -> int:
        """Remember ids another holder of their shard admitted (the postgres profile, as a shard is taken): (id, the
        fingerprint's 64 bits as stored, signed or not, expiry), then keep the bound; returns how many."""
        numeric = sorted((e for e in entries if id_key(e[0]) is not None), key=lambda e: id_key(e[0]) or 0)
        for delivery_id, fp, expires in (*numeric, *(e for e in entries if id_key(e[0]) is None)):
            if self._expiry(delivery_id) < expires:
                self._put(delivery_id, fp & MAX_FP, expires)
        self._keep_bound()
        return len(entries)

    def entries(self) -> list[tuple[str, int, float]]:
        """Every id held (an expired one too, until :meth:`prune` lets it go): (id, the fingerprint's 64 bits unsigned,
        expiry), the snowflakes in id order, then the others oldest first (``clankie migrate --to postgres``)."""
        held = zip(self._ids[self._head:], self._fps[self._head:], self._expires[self._head:], strict=True)
        return [(str(key), fp, expires) for key, fp, expires in held] + [
            (key, fp, expires) for key, (fp, expires) in self._other.items()]

    def discard(self, delivery_id: str) -> None:
        """Forget one id (its turn could not be run, so a re-delivery may try again)."""
        key = id_key(delivery_id)
        if key is None:
            self._other.pop(delivery_id, None)
            return
        i = self._index(key)
        if i >= 0:
            del self._ids[i], self._fps[i], self._expires[i]

    def prune(self, now: float) -> None:
        """Forget what has expired by ``now`` (from the oldest end; an id behind an unexpired one waits for it)."""
        self._now = max(self._now, now)
        n = len(self._ids)
        while self._head < n and self._expires[self._head] <= now:
            self._head += 1
        while self._other and next(iter(self._other.values()))[1] <= now:
            self._other.popitem(last=False)
        self._compact()

    def _keep_bound(self) -> None:
        cutoff = self._now - self.horizon
        while len(self) > self.bound:
            in_ids = self._expires[self._head] if self._head < len(self._ids) else float("inf")
            in_other = next(iter(self._other.values()))[1] if self._other else float("inf")
            expires = min(in_ids, in_other)
            if expires - self.retention < cutoff:
                self.evicted += 1
            elif len(self) > 2 * self.bound:
                self.forgot_early += 1
            else:
                break  # the oldest was admitted within the horizon: kept past the bound (up to twice it)
            if in_other < in_ids:
                self._other.popitem(last=False)
            else:
                self._head += 1
        self._compact()

    def _compact(self) -> None:
        if self._head >= COMPACT_AT and self._head * 8 >= len(self._ids):
            del self._ids[: self._head], self._fps[: self._head], self._expires[: self._head]
            self._head = 0

    # ------------------------------------------------------------ across a restart

    def snapshot(self) -> bytes:
        """Everything held, as bytes for :meth:`restore` (little-endian arrays, then the other ids as JSON)."""
        ids, fps, expires = self._ids[self._head:], self._fps[self._head:], self._expires[self._head:]
        if sys.byteorder != "little":
            ids.byteswap()
            fps.byteswap()
            expires.byteswap()
        others = json.dumps([[k, fp, exp] for k, (fp, exp) in self._other.items()]).encode()
        header = _HEADER.pack(MAGIC, len(ids), len(others))
        return b"".join((header, ids.tobytes(), fps.tobytes(), expires.tobytes(), others))

    def restore(self, data: bytes) -> int:
        """Take back a :meth:`snapshot` (into an empty memory, before anything else); returns how many ids.

        Raises ValueError for bytes that are not a whole snapshot, or not one in order.
        """
        if len(self):
            raise ValueError("restore into an empty memory only")
        if len(data) < _HEADER.size:
            raise ValueError("short snapshot")
        magic, count, other_len = _HEADER.unpack_from(data)
        if magic != MAGIC or len(data) != _HEADER.size + 24 * count + other_len:
            raise ValueError("not a snapshot of this format")
        start, size = _HEADER.size, 8 * count
        ids, fps, expires = array("Q"), array("Q"), array("d")
        ids.frombytes(data[start: start + size])
        fps.frombytes(data[start + size: start + 2 * size])
        expires.frombytes(data[start + 2 * size: start + 3 * size])
        if sys.byteorder != "little":
            ids.byteswap()
            fps.byteswap()
            expires.byteswap()
        if not all(a < b for a, b in zip(ids, itertools.islice(ids, 1, None), strict=False)):
            raise ValueError("snapshot ids out of order")
        others = json.loads(data[start + 3 * size:]) if other_len else []
        self._ids, self._fps, self._expires, self._head = ids, fps, expires, 0
        for key, fp, expiry in others:
            self._other[str(key)] = (int(fp), float(expiry))
        latest = max((*(e for _, e in self._other.values()), max(expires, default=float("-inf"))))
        self._now = max(self._now, latest - self.retention)
        self._keep_bound()
        return len(self)
