"""Which Discord messages become turns (pure; ``now`` is passed in).

:class:`Ingress` decides, in a fixed order, what happens to one inbound
message and records how rooms stay engaged. It does no I/O and imports no
Discord code: the shell converts a ``discord.Message`` to an
:class:`bridge.inbound.Inbound` and carries out the returned :class:`Decision`.

Order (each drop names its reason code):

1. bot or own author                    ``self_or_bot_message``
2. DM policy                            ``dm_denied`` / ``dm_not_owner`` / ``dm_not_allowlisted``
3. guild allowlist (mandatory)          ``guild_not_allowlisted``
4. channel allowlist (optional)         ``channel_not_allowlisted``
5. ``addressed`` policy, never engaged  ``not_addressed``
6. nothing to read                      ``empty_message``
7. same id seen before                  duplicate (same content) / ``delivery_id_conflict``
   (:class:`bridge.dedupe.Dedupe`: never full; past its bound the oldest ids beyond the catch-up horizon go)
8. room drifted, not addressed, no live run   buffered for the catch-up turn
   its author has messages waiting for their pace: it waits behind them (:class:`Paced`; in a room
   where they have a waiting turn it folds into it)
   a new turn past its author's turns per minute, or a message steered into a live run past its
   share of a turn (:mod:`bridge.fairness`; the owner is exempt): it *waits* for the pace
   (:class:`Paced`, retained, journaled: :mod:`bridge.paced`); past the person's bound on
   waiting turns                         ``rate_limited`` (not retained)
   a new turn past its room's turns per minute   ``rate_limited`` (not retained)
9. ``max_turns`` turns held, or the room already has messages waiting: it *waits*
   (:class:`Waiting`, retained) for a turn slot, in the bridge's durable journal; only a
   journal at its size bound refuses it, ``journal_full`` (not retained: a re-send may try again)
10. otherwise                           run a turn

Engagement (only under ``addressed``): a room is *tracked* once he has
answered in it. Every message admitted while the room has no live run
counts toward ``since_reply``. A message that arrives while the room has a
live run (the caller says so: ``live_run``) is always a Run, which the
service steers into that run, and does not count: the count moves only with
outcomes, so a burst gets one answer instead of a live one plus a catch-up
turn for its tail (ADR 0118). An
answered result (:attr:`clankie.protocol.TurnOutcome.answered`: ``settled`` or
``absorbed``) resets it and clears the backlog; a ``silent`` (declined) or
failed result does not, so after ``window``
messages without an answer the room drifts and unaddressed chatter is
buffered instead of read live. The catch-up timer takes each room's backlog
whole (:class:`CatchUp`) and the shell builds one turn of it (newest message
as trigger, the rest as context).

A backlog holds message ids only: a buffered message's one record is its
journal entry (:class:`bridge.journal_state.Entry`), which the shell writes at
admission and reads when the turn is built. A message that leaves a backlog
without a catch-up turn is named in what the call that moved it returns
(:attr:`Buffered.fell_out`, :meth:`Ingress.settle`,
:meth:`Ingress.restore_buffered`), so the shell closes it there and then.

The engaged rooms are held by :class:`bridge.engagement.Rooms`, for any
number of rooms, bounded by age and count (settings, never a silent cap).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from bridge.dedupe import Dedupe, Seen
from bridge.engagement import DEFAULT_IDLE_S, DEFAULT_MAX_ROOMS, TRANSITIONS, Engagement, Room, RoomEvent, Rooms
from bridge.fairness import Fairness, Pace
from bridge.inbound import Inbound
from bridge.paced import PacedTurns
from bridge.waiting import MAX_JOIN
from clankie import allow
from clankie.protocol import Room as WireRoom
from clankie.protocol import TurnOutcome

__all__ = ["TRANSITIONS", "Engagement", "RoomEvent"]  # re-exported: admission is where they are used

DEFAULT_RETENTION_S = 7 * 3600.0
DEFAULT_HORIZON_S = 900.0  # CLANKIE_RECOVERY_HORIZON_SECONDS: older than this, nothing hands a message back
DEFAULT_MAX_RETAINED = 1_000_000
DEFAULT_MAX_TURNS = 512
BACKLOG_CAP = 20
BACKLOG_FULL = "backlog_full"  # a buffered message fell out of its room's full backlog
RATE_LIMITED = "rate_limited"  # a person's or a room's turns per minute are spent (bridge.fairness)
JOURNAL_FULL = "journal_full"  # a message that would wait found the journal at CLANKIE_DISCORD_JOURNAL_MAX_BYTES
BACKPRESSURE = frozenset({JOURNAL_FULL})
"""Refusals that say "not now" rather than "not for me": a re-send may run (the bridge shows them)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The admission settings, already parsed."""

    guild_ids: frozenset[str]
    channel_ids: frozenset[str] = frozenset()
    dm_policy: str = "owner_only"
    owner_id: str | None = None
    dm_user_ids: frozenset[str] = frozenset()
    reply_policy: str = "all"
    window: int = 3
    names: tuple[str, ...] = ("clankie",)
    retention_s: float = DEFAULT_RETENTION_S
    horizon_s: float = DEFAULT_HORIZON_S
    max_retained: int = DEFAULT_MAX_RETAINED  # the de-duplication memory's bound (never a refusal)
    max_turns: int = DEFAULT_MAX_TURNS
    engagement_idle_s: float = DEFAULT_IDLE_S
    engagement_max_rooms: int = DEFAULT_MAX_ROOMS
    user_turns_per_minute: float = 0.0  # 0: no limit
    room_turns_per_minute: float = 0.0
    steer_share: float = 0.5  # of a turn, what a message steered into a live run takes from its author's pace
    paced_minutes: float = 1.0  # a person's turns waiting for their pace: this many minutes' worth at most


# ------------------------------------------------------------------ decisions


@dataclass(frozen=True, slots=True)
class Drop:
    code: str


@dataclass(frozen=True, slots=True)
class Duplicate:
    delivery_id: str


@dataclass(frozen=True, slots=True)
class Buffered:
    """Held for its room's catch-up turn; ``fell_out``: the oldest ids the full backlog let go of for it (the shell
    closes them, ``backlog_full``)."""

    backlog: int
    fell_out: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Waiting:
    """Admitted, but every turn slot is taken (or its room's earlier messages wait): the shell journals it and
    runs it, joined with whatever else waits in its room, when a slot frees (:mod:`bridge.waiting`)."""

    unprompted: bool


@dataclass(frozen=True, slots=True)
class Paced:
    """Admitted, but over its author's pace: the shell journals it (with ``person``, its pace key) and it waits for
    the pace, folded with that person's other waiting messages in its room (:mod:`bridge.paced`); ``opened``: it is
    the first of a new waiting turn."""

    unprompted: bool
    person: str
    opened: bool


@dataclass(frozen=True, slots=True)
class Run:
    """Start a turn for ``trigger`` now (or steer it into its room's live run)."""

    trigger: Inbound
    unprompted: bool

    @property
    def delivery_id(self) -> str:
        return self.trigger.message_id


@dataclass(frozen=True, slots=True)
class CatchUp:
    """One room's backlog, taken whole for its catch-up turn: the buffered message ids, oldest first (the newest
    triggers the turn). The shell reads their payloads from their journal entries."""

    channel_id: str
    ids: tuple[str, ...]


Decision = Drop | Duplicate | Buffered | Waiting | Paced | Run


# ------------------------------------------------------------------ engagement


def name_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    words = [re.escape(n.lower()) for n in names if n.strip()]
    if not words:
        return None
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(words) + r")(?![a-z0-9])")


class Ingress:
    """Admission, dedupe, engagement and catch-up for every room of one bridge."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._names = name_pattern(policy.names)
        self._rooms: Rooms[str] = Rooms(policy.engagement_idle_s, policy.engagement_max_rooms)  # backlogs: ids
        self.dedupe = Dedupe(retention=policy.retention_s, horizon=policy.horizon_s, bound=policy.max_retained)
        self.fairness = Fairness(policy.user_turns_per_minute, policy.room_turns_per_minute,
                                 steer_share=policy.steer_share)
        self.paced = PacedTurns(math.ceil(policy.user_turns_per_minute * policy.paced_minutes), MAX_JOIN, self.fairness)
        self.on_forget: Callable[[str, WireRoom], None] | None = None  # postgres: the database lets the id go too

    # -------------------------------------------------------------- queries

    def addressed(self, msg: Inbound) -> bool:
        if msg.guild_id is None or msg.mentions_bot or msg.replies_to_bot:
            return True
        return bool(self._names and self._names.search(msg.text.lower()))

    def engagement(self, channel_id: str) -> Engagement:
        room = self._rooms.peek(channel_id)
        return room.state(self.policy.window) if room else Engagement.UNTRACKED

    def backlog(self, channel_id: str) -> int:
        room = self._rooms.peek(channel_id)
        return len(room.backlog) if room else 0

    @property
    def buffered(self) -> int:
        """Messages held for a catch-up turn, all rooms together (their ids; each payload is its journal entry's)."""
        return self._rooms.buffered

    @property
    def engaged_rooms(self) -> int:
        """Rooms whose engagement is held (bounded by ``engagement_max_rooms`` and ``engagement_idle_s``)."""
        return len(self._rooms)

    @property
    def engagement_evicted(self) -> int:
        """Rooms forgotten at either bound since start."""
        return self._rooms.evicted

    @property
    def retained(self) -> int:
        """Message ids held for de-duplication."""
        return len(self.dedupe)

    def room_admitted(self, guild_id: str | None, channel_id: str) -> bool:
        """Steps 3-4 alone: may the bridge act in this guild room at all? (:mod:`clankie.allow`)"""
        return allow.admits(self.policy.guild_ids, self.policy.channel_ids, guild_id, channel_id)

    # -------------------------------------------------------------- admission

    def admit(self, msg: Inbound, now: float, *, live_run: bool = False, turns: int = 0, room_waiting: bool = False,
              journal_full: bool = False) -> Decision:
        """Decide what happens to ``msg``; a Run, Waiting or Buffered is retained for dedupe.

        ``live_run``: the room has a turn submitted and not yet done, so ``msg`` is steered into it.
        ``turns``: how many turns the shell holds now; at ``max_turns`` a message that would run (or be steered into)
        one waits instead. ``room_waiting``: the room has messages waiting already, so this one waits behind them.
        ``journal_full``: the journal is at its size bound, so a message that would wait is refused.
        """
        p = self.policy
        if msg.author_is_bot or msg.from_self:
            return Drop("self_or_bot_message")
        if msg.guild_id is None:
            code = self._dm_refusal(msg.author_id)
            if code:
                return Drop(code)
        else:
            refused = allow.refusal(p.guild_ids, p.channel_ids, msg.guild_id, msg.channel_id)
            if refused is not None:
                return Drop(refused)
        self._rooms.expire(now)  # an idle room's engagement is gone before it is looked at
        addressed = self.addressed(msg)
        live_policy = p.reply_policy == "all" or msg.guild_id is None
        if not live_policy and not addressed and not self._tracked(msg.channel_id):
            return Drop("not_addressed")
        if not msg.text.strip() and msg.readable_attachments == 0:
            return Drop("empty_message")
        fingerprint = msg.fingerprint
        seen = self.dedupe.check(msg.message_id, fingerprint, now)
        if seen is Seen.CONFLICT:
            return Drop("delivery_id_conflict")
        if seen is Seen.SAME:
            return Duplicate(msg.message_id)
        room = self._rooms.peek(msg.channel_id)
        buffer = not live_run and not live_policy and not addressed and room is not None and room.since_reply >= p.window
        if not buffer and msg.author_id != p.owner_id:  # a turn, or a steer into one; the operator is never paced
            person = Fairness.user_key(msg.guild_id, msg.author_id)
            if self.paced.holds(person):  # behind their earlier waiting messages, never ahead of them
                pace = Pace.PERSON
            else:
                pace = self.fairness.admit(msg.guild_id, msg.channel_id, msg.author_id, now, steer=live_run)
            if pace is Pace.ROOM:
                return Drop(RATE_LIMITED)
            if pace is Pace.PERSON:
                return self._wait_for_pace(msg, person, now, addressed=addressed, live_run=live_run,
                                           journal_full=journal_full)
        wait = not buffer and (turns >= p.max_turns or room_waiting)
        if wait and journal_full:
            return Drop(JOURNAL_FULL)
        self.dedupe.add(msg.message_id, fingerprint, now + p.retention_s)
        room = self._rooms.touch(msg.channel_id, now)
        if wait:
            if room is not None and not live_run:
                self._hear(room)
            return Waiting(unprompted=not addressed)
        if live_run:
            return Run(msg, unprompted=not addressed)
        if buffer and room is not None:
            self._hear(room)
            fell_out = self._rooms.buffer(room, msg.message_id, BACKLOG_CAP)
            return Buffered(len(room.backlog), fell_out)
        if room is not None:
            self._hear(room)
        return Run(msg, unprompted=not addressed)

    def _wait_for_pace(self, msg: Inbound, person: str, now: float, *, addressed: bool, live_run: bool,
                       journal_full: bool) -> Paced | Drop:
        """Step 8 for a message over its author's pace: it waits (retained), unless the person's waiting turns are at
        their bound (``rate_limited``) or the journal is full (``journal_full``)."""
        if not self.paced.admits(person, msg.channel_id):
            return Drop(RATE_LIMITED)
        if journal_full:
            return Drop(JOURNAL_FULL)
        self.dedupe.add(msg.message_id, msg.fingerprint, now + self.policy.retention_s)
        room = self._rooms.touch(msg.channel_id, now)
        if room is not None and not live_run:
            self._hear(room)
        opened = self.paced.add(person, msg.channel_id, msg.message_id)
        return Paced(unprompted=not addressed, person=person, opened=opened)

    def rate_hint(self, msg: Inbound, now: float) -> bool:
        """Whether a ``rate_limited`` message should show the ⏳: at most once a minute per person."""
        return self.fairness.hint(msg.guild_id, msg.author_id, now)

    def _dm_refusal(self, author_id: str) -> str | None:
        p = self.policy
        if p.dm_policy == "deny":
            return "dm_denied"
        if p.dm_policy == "owner_only":
            return None if p.owner_id is not None and author_id == p.owner_id else "dm_not_owner"
        return None if author_id in p.dm_user_ids else "dm_not_allowlisted"

    def _tracked(self, channel_id: str) -> bool:
        room = self._rooms.peek(channel_id)
        return room is not None and room.tracked

    def _hear(self, room: Room[str]) -> None:
        if room.tracked:
            room.since_reply += 1

    # -------------------------------------------------------------- results

    def settle(self, channel_id: str, outcome: TurnOutcome, now: float) -> tuple[str, ...]:
        """Record a turn's outcome for its room at ``now`` (:attr:`TurnOutcome.answered` or not). Returns the ids an
        answer took out of the room's backlog: the room was answered meanwhile, so they get no catch-up turn (the
        shell closes them, ``absorbed``)."""
        self._rooms.expire(now)
        before = self.engagement(channel_id)
        event = RoomEvent.ANSWERED if outcome.answered else RoomEvent.DECLINED
        room = self._rooms.touch(channel_id, now, create=event is RoomEvent.ANSWERED)
        cleared: tuple[str, ...] = ()
        if event is RoomEvent.ANSWERED:
            assert room is not None
            room.tracked = True
            room.since_reply = 0
            cleared = self._rooms.take(room)
        after = self.engagement(channel_id)
        if after not in TRANSITIONS[before][event]:
            raise AssertionError(f"illegal engagement move {before} -{event}-> {after}")
        return cleared

    def seen(self, delivery_id: str) -> bool:
        return delivery_id in self.dedupe

    def remember(self, delivery_id: str, fingerprint: str, expires: float) -> None:
        """Restore one retained delivery after a restart, or note one found in history (until ``expires``)."""
        self.dedupe.add(delivery_id, fingerprint, expires)

    def restore_buffered(self, channel_id: str, message_id: str, now: float) -> tuple[str, ...]:
        """Put a journaled, still-unanswered buffered message back into its drifted room's backlog; returns the ids
        that fell out of it (as :attr:`Buffered.fell_out`)."""
        room = self._rooms.touch(channel_id, now, create=True)
        assert room is not None
        room.tracked = True
        room.since_reply = max(room.since_reply, self.policy.window)
        return self._rooms.buffer(room, message_id, BACKLOG_CAP)

    def forget(self, delivery_id: str, room: WireRoom) -> None:
        """Evict a delivery of ``room`` whose turn could not be run, so a re-delivery may try again (in the postgres
        profile the shard's remembered ids in the database let it go too, or the next gateway opening recalls it)."""
        self.dedupe.discard(delivery_id)
        if self.on_forget is not None:
            self.on_forget(delivery_id, room)

    def owner(self, owner_id: str) -> None:
        """Fill in the owner id (the application's owner) when none was configured."""
        if self.policy.owner_id is None:
            self.policy = dataclasses.replace(self.policy, owner_id=owner_id)

    # -------------------------------------------------------------- catch-up

    def catch_up(self) -> list[CatchUp]:
        """Every room's backlog, taken whole (one catch-up turn each); the backlogs are cleared."""
        return [CatchUp(cid, ids) for cid, ids in self._rooms.take_all()]
