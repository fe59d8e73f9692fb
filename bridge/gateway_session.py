"""The gateway session as durable state: a new bridge process RESUMEs the one its predecessor held.

Discord keeps a session resumable for a while after its socket dies without a
close frame (a SIGKILLed bridge), and replays what it missed, in order, to
whoever presents the session id and a sequence at the session's resume URL.
So the bridge keeps, per shard, in ``<state>/bridge/gateway-session.json``
(0600, written whole through :func:`clankie.jsonl.replace_file`):

* the session id (sensitive as the token is: never logged), the resume URL,
  the shard and the count, when the session started;
* the sequence of the last event the bridge has **journaled**, not the
  socket's last sequence: discord.py sets that before parsing a frame, so an
  event received but not yet handed over (and journaled) would be skipped by a
  RESUME from it. The client reports a message's sequence only once
  :func:`bridge.discord_gateway.hand_over` returned (the journal line is in the
  kernel by then); a lower sequence only replays events the de-duplication
  memory already knows, so a sequence written a moment late costs nothing;
* today's session starts: IDENTIFYs and RESUMEs, the IDENTIFYs in a row
  without a session that lived (:data:`bridge.gateway_link.SETTLED`) or resumed, and the last
  ``session_start_limit`` Discord reported.

:class:`SessionKeeper` is the shell (the file, the clock, the log, the
metrics) around the pure :mod:`bridge.gateway_link` (each shard's
:class:`~bridge.gateway_link.Link`, moved only through ``_move``, and the
:class:`~bridge.gateway_link.Book` the file holds). It has no timer of its own: a
moved sequence is written with the next event at least :data:`FLUSH_EVERY`
after the last write, or at the next heartbeat, or at the stop.

In the postgres profile (``CLANKIE_STORE=postgres``) each shard's session is the shard's, not the machine's: the
keeper's :attr:`SessionKeeper.mirror` (:class:`bridge.store_writer.StoreWriter`) writes each new session, each moved
sequence (the same journaled one, at the same moments) and each session given up to the database, fenced by the
shard's lease; and before the gateway opens, :meth:`SessionKeeper.adopt` takes each shard's session from the
database in place of the file's. So a tree that takes a dead tree's shard RESUMEs the session that tree held, from
the sequence it last journaled. The file is still written (the day's counts, the crash-loop backoff are this
machine's); without a mirror (the files profile) nothing here changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.gateway_link import (
    MAX_ID_CHARS,
    MAX_URL_CHARS,
    SETTLED,
    Book,
    IdentifyGate,
    Link,
    Move,
    Shard,
    State,
    Stored,
)
from clankie.clock import Clock
from clankie.jsonl import replace_file
from clankie.metrics import GATEWAY_IDENTIFIES, GATEWAY_RESUMES, GATEWAY_SESSION_STARTS_REMAINING, METER
from clankie.paths import ensure_private_dir
from clankie.store.ports import SessionRecord

if TYPE_CHECKING:
    from bridge.store_writer import StoreWriter

log = logging.getLogger(__name__)


def utc_day(wall: float) -> str:
    """The UTC date of ``wall``, as Discord's day of session starts is counted (``2026-12-06``)."""
    return time.strftime("%Y-%m-%d", time.gmtime(wall))

FILENAME = "gateway-session.json"
MAX_FILE_BYTES = 256 * 1024  # a file larger than this is not ours: ignored, the next session overwrites it
FLUSH_EVERY = 0.2  # seconds between writes of a moved sequence (a kill replays at most this much: de-duplicated)
REFUSING_CLOSES = frozenset({4007, 4009})  # invalid sequence, session timed out: a new session is needed


class SessionKeeper:
    """The shell around :class:`Book`: read at start, written whole when it changes (at most every
    :data:`FLUSH_EVERY` for a moved sequence, at once for a new session or a count)."""

    def __init__(self, state_dir: Path, clock: Clock, *, enabled: bool = True, shards: int = 1) -> None:
        self.path = ensure_private_dir(state_dir / "bridge") / FILENAME
        self.clock = clock
        self.enabled = enabled  # off: IDENTIFY every time, as before (the comparison's setting)
        self.shards = shards  # how many shards this process runs: each start spends one IDENTIFY per shard at most
        self.book = self._read()
        self.links: dict[Shard, Link] = {}
        self.seqs: dict[Shard, int] = {}  # the newest journaled sequence, per shard, not yet written
        self.started_at = clock.wall()
        self.holding: float | None = None  # seconds the IDENTIFY now waiting was held for (the crash-loop backoff)
        self._dirty = False
        self._flushed = clock.monotonic()
        self._due = asyncio.Event()  # a moved sequence waits for :meth:`write_behind`
        self._warned_low = False
        self.mirror: StoreWriter | None = None  # the postgres profile: each session change also to the database
        self.book.roll(utc_day(self.started_at))

    def _read(self) -> Book:
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return Book()
        except OSError as exc:
            log.warning("gateway session file unreadable (%s); starting a new session", type(exc).__name__)
            return Book()
        try:
            if len(data) > MAX_FILE_BYTES:
                raise ValueError("too large")
            return Book.from_json(json.loads(data))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            log.warning("gateway session file malformed (%s); starting a new session", type(exc).__name__)
            return Book()

    # ------------------------------------------------------------ what the client asks

    def link(self, shard: Shard) -> Link:
        return self.links.setdefault(shard, Link())

    def _move(self, shard: Shard, move: Move) -> State:
        """The one place a shard's link moves (through its table)."""
        return self.link(shard).move(move)

    def stored(self, shard: Shard) -> Stored | None:
        """The session to RESUME for ``shard``, or None (IDENTIFY)."""
        return self.book.sessions.get(shard) if self.enabled else None

    def resuming(self, shard: Shard) -> None:
        self._move(shard, Move.RESUME)

    async def identifying(self, shard: Shard) -> None:
        """Before an IDENTIFY: wait out the crash-loop backoff; the stored session, if any, is given up."""
        delay = self.book.identify_delay(self.shards) if self.enabled else 0.0  # off is today's behaviour, backoff included
        if delay > 0:
            log.warning("gateway: %d session starts in a row without a session that lasted; next IDENTIFY in %.0fs",
                        self.book.in_a_row, delay)
            self.holding = delay
            try:
                await self.clock.sleep(delay)
            finally:
                self.holding = None
        self._move(shard, Move.IDENTIFY)
        self.book.roll(utc_day(self.clock.wall()))
        if self.book.sessions.pop(shard, None) is not None:  # a session we held is given up: refused, or too old
            self.book.refused += 1
            if self.mirror is not None:
                self.mirror.forget(shard)
        self.seqs.pop(shard, None)
        self.flush()

    async def identify_slot(self, gate: IdentifyGate, shard_id: int) -> None:
        """Wait for shard ``shard_id``'s IDENTIFY slot in ``gate`` (its rate-limit key, on our clock): a process's
        first IDENTIFY of a key goes at once, the next ones :data:`~bridge.gateway_link.IDENTIFY_WINDOW` apart. Both
        clients' ``before_identify_hook`` instead of discord.py's 5 s before every IDENTIFY but a client's first."""
        delay = gate.claim(shard_id, self.clock.monotonic())
        if delay > 0:
            log.info("shard %d: IDENTIFY waits %.1fs for its rate-limit key", shard_id, delay)
            await self.clock.sleep(delay)

    def identified(self, shard: Shard) -> None:
        """An IDENTIFY was sent: one session start spent (an attempt whose socket never opened spent none, so a
        network outage does not grow the crash-loop backoff)."""
        self.book.roll(utc_day(self.clock.wall()))
        self.book.identifies += 1
        self.book.in_a_row += 1
        METER.count(GATEWAY_IDENTIFIES.of())
        self.flush()

    def ready(self, shard: Shard, session_id: str, resume_url: str, seq: int | None) -> None:
        """READY: a new session to keep."""
        self._move(shard, Move.READY)
        kept = self.book.sessions[shard] = Stored(session_id[:MAX_ID_CHARS], resume_url[:MAX_URL_CHARS], seq,
                                                  self.clock.wall())
        if self.mirror is not None:
            self.mirror.save(shard, SessionRecord(kept.session_id, kept.resume_url, kept.seq, kept.since))
        self.flush()

    def resumed(self, shard: Shard, seq: int | None) -> None:
        """RESUMED: the stored session goes on; the crash loop, if any, is over. The sequence does not move here:
        RESUMED comes right after the replay, whose messages' journal lines may not be in yet (each replayed message
        moves it, through :meth:`journaled`, once its line is); ``seq`` is kept for the caller's symmetry."""
        self._move(shard, Move.RESUMED)
        self.book.roll(utc_day(self.clock.wall()))
        self.book.resumes += 1
        self.book.in_a_row = 0
        METER.count(GATEWAY_RESUMES.of())
        self.flush()

    def dropped(self, shard: Shard) -> None:
        self._move(shard, Move.DROPPED)

    def forget(self, shard: Shard) -> None:
        """Give up this process's copy of ``shard``'s session (the postgres profile: a message came past the shard's
        lease, so nothing more of it is this tree's to journal, and its sequence must not move). The database's copy
        is left alone: it is the shard's, and whoever serves the shard next (this tree too) adopts it."""
        if self.book.sessions.pop(shard, None) is not None:
            log.info("gateway: the session of shard %d/%d is set aside: the shard's lease is not surely ours", *shard)
        self.seqs.pop(shard, None)
        self.flush()

    async def adopt(self, shards: list[Shard]) -> None:
        """The postgres profile, before the gateway opens: each shard's session as the database keeps it (the last
        holder's, whichever tree that was), in place of this process's copy; the changes made so far written first.
        Raises what the database raised (the caller then IDENTIFYs: :meth:`set_aside`)."""
        assert self.mirror is not None
        await self.mirror.drained()
        for shard in shards:
            record = await self.mirror.load(shard)
            self.seqs.pop(shard, None)
            if record is None:
                self.book.sessions.pop(shard, None)
            else:
                self.book.sessions[shard] = Stored(record.session_id[:MAX_ID_CHARS], record.resume_url[:MAX_URL_CHARS],
                                                   record.seq, record.since)
        self.flush()

    def set_aside(self, shards: list[Shard]) -> None:
        """The database could not be read before the gateway opened: no session is RESUMEd (this process's copy may
        be older than what another holder resumed and advanced since); each shard IDENTIFYs."""
        for shard in shards:
            self.book.sessions.pop(shard, None)
            self.seqs.pop(shard, None)
        self.flush()

    def journaled(self, shard: Shard, seq: int | None) -> None:
        """An event up to ``seq`` is journaled (or needs no journal): a RESUME may start after it."""
        if seq is not None and seq > self.seqs.get(shard, -1):
            self.seqs[shard] = seq
            self._dirty = True
            if self.clock.monotonic() - self._flushed >= FLUSH_EVERY:
                self.flush()
            else:
                self._due.set()

    async def write_behind(self) -> None:
        """Write each moved sequence within :data:`FLUSH_EVERY` of its move, when no later event comes to write
        it (the last message before a quiet spell, then a kill: its RESUME starts from it, not from an older one).

        The wait is the loop's own timer, not the injected clock: it only spaces disk writes out, and nothing is
        decided by it (a fake clock that never moves must not keep a sequence unwritten)."""
        while True:
            await self._due.wait()
            self._due.clear()
            await asyncio.sleep(FLUSH_EVERY)
            if self._dirty:
                self.flush()

    def limit(self, total: int, remaining: int) -> None:
        """``GET /gateway/bot``'s ``session_start_limit``: a warning when under :data:`LOW_STARTS` of the total."""
        self.book.starts_total, self.book.starts_remaining = max(0, total), max(0, remaining)
        METER.set(GATEWAY_SESSION_STARTS_REMAINING.of(), float(remaining))
        if self.book.low() and not self._warned_low:
            self._warned_low = True
            log.warning("gateway: only %d of today's %d session starts remain; when none do, Discord refuses "
                        "the token until the day's reset", remaining, total)
        self.flush()

    # ------------------------------------------------------------ writing

    def flush(self) -> None:
        """Write the book whole, with each shard's newest journaled sequence (a failure is logged, kept for later)."""
        now = self.clock.wall()
        for shard, seq in self.seqs.items():
            kept = self.book.sessions.get(shard)
            if kept is not None and (kept.seq is None or seq > kept.seq):
                self.book.sessions[shard] = Stored(kept.session_id, kept.resume_url, seq, kept.since)
                if self.mirror is not None:  # the same journaled sequence, at the same moment, to the database
                    self.mirror.advance(shard, seq)
        if self.book.in_a_row and any(now - s.since >= SETTLED for s in self.book.sessions.values()):
            self.book.in_a_row = 0
        try:
            replace_file(self.path, json.dumps(self.book.to_json(), separators=(",", ":")).encode())
        except OSError as exc:
            self._dirty = True
            log.warning("gateway session file not written (%s)", type(exc).__name__)
            return
        self._dirty = False
        self._flushed = self.clock.monotonic()

    def tick(self) -> None:
        """Write a sequence that moved since the last write (the heartbeat calls this: a quiet room's last message
        is not left unwritten until the next one)."""
        if self._dirty:
            self.flush()

    # ------------------------------------------------------------ status

    def report(self) -> dict[str, Any]:
        """For the heartbeat: per shard the session's age and state; today's RESUMEs, IDENTIFYs and starts left."""
        now = self.clock.wall()
        shards = {f"{k[0]}/{k[1]}": {"age_s": round(now - s.since, 1), "state": self.link(k).state.value}
                  for k, s in self.book.sessions.items()}
        out: dict[str, Any] = {"resumes_today": self.book.resumes, "identifies_today": self.book.identifies,
                               "refused_today": self.book.refused, "identifies_in_a_row": self.book.in_a_row,
                               "shards": shards}
        if self.book.starts_remaining is not None:
            out["starts_remaining"] = self.book.starts_remaining
            out["starts_total"] = self.book.starts_total
        if self.book.low():
            out["starts_low"] = True
        if self.holding is not None:
            out["identify_held_s"] = self.holding
        return out

    def detail(self) -> str:
        """The status line's part: ``gateway: session 3m, 2 resumes, 1 identify today`` (and a low-starts warning)."""
        now = self.clock.wall()
        ages = [now - s.since for s in self.book.sessions.values()]
        age = f"session {_age(min(ages))}, " if ages else ""
        text = f"gateway: {age}{self.book.resumes} resumes, {self.book.identifies} identifies today"
        if self.holding is not None:
            text += f"; next IDENTIFY in {self.holding:.0f}s (crash loop)"
        if self.book.low():
            text += f"; session starts low: {self.book.starts_remaining}/{self.book.starts_total}"
        return text


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"
