"""A shard's gateway session, pure: the table-driven state machine of its link and the book its file holds.

:class:`Link` moves through :data:`TRANSITIONS` (RESUME or IDENTIFY sent,
RESUMED or READY seen, the socket dropped); a pair not in the table raises
:class:`IllegalSessionMove`. :class:`Book` is what ``gateway-session.json``
holds: per shard the session to RESUME, and today's session starts, with the
crash-loop backoff worked out from them. :class:`IdentifyGate` is Discord's
IDENTIFY rate limit over a bot's shards (``max_concurrency``). No I/O, no
clock: the shell is :mod:`bridge.gateway_session`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

MAX_SHARDS = 64  # sessions kept in the file (one process runs at most this many shards' sessions)
MAX_ID_CHARS = 128
MAX_URL_CHARS = 512
SETTLED = 60.0  # seconds a new session must live before the IDENTIFYs before it stop counting as a crash loop
FREE_IDENTIFIES = 3  # IDENTIFYs in a row that wait for nothing (a restart, a refused RESUME, an op 9 of Discord's)
IDENTIFY_BASE = 5.0  # seconds before the first held IDENTIFY; doubling after each, up to IDENTIFY_CAP
IDENTIFY_CAP = 600.0
LOW_STARTS = 0.10  # warn when today's remaining session starts fall under this share of the day's total
IDENTIFY_WINDOW = 5.0  # seconds: Discord lets each rate-limit key (shard id % max_concurrency) IDENTIFY once in this

Shard = tuple[int, int]  # (shard id, shard count); an unsharded session is (0, 1)


class State(Enum):
    IDLE = "idle"  # no socket yet in this process
    RESUMING = "resuming"  # RESUME sent, RESUMED not yet seen
    IDENTIFYING = "identifying"  # IDENTIFY sent, READY not yet seen
    LIVE = "live"
    DOWN = "down"  # the socket dropped; discord.py will RESUME or IDENTIFY


class Move(Enum):
    RESUME = "resume"  # about to send RESUME
    IDENTIFY = "identify"  # about to send IDENTIFY
    RESUMED = "resumed"
    READY = "ready"
    DROPPED = "dropped"


class IllegalSessionMove(Exception):
    """A move the table has no row for: a bug on our side; the state stays."""


TRANSITIONS: dict[tuple[State, Move], State] = {
    (State.IDLE, Move.RESUME): State.RESUMING,
    (State.IDLE, Move.IDENTIFY): State.IDENTIFYING,
    (State.RESUMING, Move.RESUMED): State.LIVE,
    (State.RESUMING, Move.IDENTIFY): State.IDENTIFYING,  # refused: op 9, 4007, 4009
    (State.RESUMING, Move.DROPPED): State.DOWN,
    (State.IDENTIFYING, Move.READY): State.LIVE,
    (State.IDENTIFYING, Move.DROPPED): State.DOWN,
    (State.LIVE, Move.DROPPED): State.DOWN,
    (State.DOWN, Move.RESUME): State.RESUMING,
    (State.DOWN, Move.IDENTIFY): State.IDENTIFYING,
    (State.DOWN, Move.DROPPED): State.DOWN,
}
IGNORED: frozenset[tuple[State, Move]] = frozenset({(State.IDLE, Move.DROPPED)})


class Link:
    """One shard's connection, every move through :data:`TRANSITIONS`."""

    def __init__(self) -> None:
        self.state = State.IDLE

    def move(self, move: Move) -> State:
        if (self.state, move) in IGNORED:
            return self.state
        try:
            self.state = TRANSITIONS[(self.state, move)]
        except KeyError:
            raise IllegalSessionMove(f"{move.value} in {self.state.value}") from None
        return self.state


class IdentifyGate:
    """Discord's IDENTIFY rate limit, pure: shard ``i``'s key is ``i % max_concurrency`` (``GET /gateway/bot``'s
    ``session_start_limit``), and each key starts at most one session per :data:`IDENTIFY_WINDOW`. RESUMEs are not
    limited: only the shards that IDENTIFY wait here, the first of each key not at all."""

    def __init__(self, max_concurrency: int = 1) -> None:
        self.max_concurrency = max(1, max_concurrency)
        self.next_at: dict[int, float] = {}  # key -> the earliest its next IDENTIFY may go

    def claim(self, shard_id: int, now: float) -> float:
        """Seconds from ``now`` that shard ``shard_id``'s IDENTIFY waits; the slot is taken."""
        key = shard_id % self.max_concurrency
        at = max(now, self.next_at.get(key, now))
        self.next_at[key] = at + IDENTIFY_WINDOW
        return at - now


@dataclass(frozen=True, slots=True)
class Stored:
    """What a RESUME needs, for one shard."""

    session_id: str
    resume_url: str
    seq: int | None
    since: float  # wall time the session started (READY)


@dataclass(slots=True)
class Book:
    """The file's content, pure: sessions by shard and today's session starts."""

    day: str = ""
    identifies: int = 0
    resumes: int = 0
    refused: int = 0
    in_a_row: int = 0  # IDENTIFYs since the last RESUME or settled session
    starts_total: int | None = None  # GET /gateway/bot session_start_limit
    starts_remaining: int | None = None
    sessions: dict[Shard, Stored] = field(default_factory=dict)

    def roll(self, day: str) -> None:
        """A new UTC day: the day's counts start over (the crash-loop count does not)."""
        if day != self.day:
            self.day, self.identifies, self.resumes, self.refused = day, 0, 0, 0

    def identify_delay(self, shards: int = 1) -> float:
        """How long the next IDENTIFY waits: nothing for the first :data:`FREE_IDENTIFIES` in a row, then doubling.

        A process running ``shards`` shards spends that many per start: the count is of rounds (``in_a_row //
        shards``), so a cold start of 4 shards is one round, not a crash loop."""
        extra = self.in_a_row // max(1, shards) - FREE_IDENTIFIES
        return 0.0 if extra < 0 else min(IDENTIFY_CAP, IDENTIFY_BASE * 2.0 ** min(extra, 30))

    def low(self) -> bool:
        """Today's remaining session starts are under :data:`LOW_STARTS` of the day's total."""
        return (self.starts_total is not None and self.starts_remaining is not None and self.starts_total > 0
                and self.starts_remaining < LOW_STARTS * self.starts_total)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": 1, "day": self.day, "identifies": self.identifies, "resumes": self.resumes, "refused": self.refused,
            "in_a_row": self.in_a_row, "starts_total": self.starts_total, "starts_remaining": self.starts_remaining,
            "sessions": [{"shard": list(k), "session_id": s.session_id, "resume_url": s.resume_url, "seq": s.seq,
                          "since": s.since} for k, s in list(self.sessions.items())[:MAX_SHARDS]],
        }

    @classmethod
    def from_json(cls, raw: Any) -> Book:
        """The book a file held; ``ValueError`` when it is not one (the caller starts from nothing)."""
        if not isinstance(raw, dict) or raw.get("v") != 1:
            raise ValueError("not a version 1 session file")
        book = cls(day=_str(raw.get("day"), 10), identifies=_count(raw.get("identifies")),
                   resumes=_count(raw.get("resumes")), refused=_count(raw.get("refused")),
                   in_a_row=_count(raw.get("in_a_row")), starts_total=_opt_count(raw.get("starts_total")),
                   starts_remaining=_opt_count(raw.get("starts_remaining")))
        sessions = raw.get("sessions")
        if not isinstance(sessions, list):
            raise ValueError("sessions is not a list")
        for s in sessions[:MAX_SHARDS]:
            if not isinstance(s, dict):
                raise ValueError("a session is not an object")
            shard = s.get("shard")
            if not (isinstance(shard, list) and len(shard) == 2 and all(type(v) is int for v in shard)
                    and 0 <= shard[0] < shard[1]):
                raise ValueError("a session's shard is malformed")
            sid, url = s.get("session_id"), s.get("resume_url")
            if not isinstance(sid, str) or not sid or len(sid) > MAX_ID_CHARS:
                raise ValueError("a session id is malformed")
            if not isinstance(url, str) or not url.startswith(("ws://", "wss://")) or len(url) > MAX_URL_CHARS:
                raise ValueError("a resume URL is malformed")
            seq, since = s.get("seq"), s.get("since")
            if seq is not None and (type(seq) is not int or seq < 0):
                raise ValueError("a sequence is malformed")
            if not isinstance(since, int | float) or isinstance(since, bool):
                raise ValueError("a session start is malformed")
            book.sessions[(shard[0], shard[1])] = Stored(sid, url, seq, float(since))
        return book


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError("a count is malformed")
    return int(value)


def _opt_count(value: Any) -> int | None:
    return None if value is None else _count(value)


def _str(value: Any, most: int) -> str:
    if not isinstance(value, str) or len(value) > most:
        raise ValueError("a text field is malformed")
    return value


def shard_key(shard_id: int | None, count: int | None) -> Shard:
    return (shard_id or 0, count or 1)


