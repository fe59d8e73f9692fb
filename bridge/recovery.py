"""After a restart: finish what the journal says was left open, and ask Discord what it will not replay.

Two steps, both bounded:

1. :func:`resume_journal`, once at start, before the gateway connects: the
   de-duplication memory saved at the last compaction is read back and every
   journaled delivery is remembered on top of it; one without an outcome in
   the journal whose closing receipt was written all the same (the bridge
   died between the receipt and the journal line) is closed in the journal
   from that receipt, with no second receipt (:meth:`bridge.ledger.Ledger.from_receipt`);
   each other one without an outcome is run again by its id (the service is idempotent), oldest first,
   unless it is older than the recovery horizon, in which case it is closed
   as ``expired`` with a receipt instead of being answered late. Buffered
   messages go back into their room's catch-up backlog.
2. :func:`fetch_missed`, on every new gateway session (READY, not RESUME):
   for each room with a delivery admitted within the horizon, the channel
   history after the newest message the journal had seen there when the
   gateway went quiet, oldest first, through the normal admission path
   (which de-duplicates by id). Admitted guild rooms the journal never heard
   from are read from the horizon when the gateway says their newest message
   is inside it; a room whose newest message was already seen is not read.
   Rooms, pages and messages per recovery are capped by settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from bridge.inbound import Inbound
from bridge.journal_state import Entry
from bridge.port import PostError
from bridge.turns import Bridge
from clankie.protocol import Room, TurnOutcome

log = logging.getLogger(__name__)

PAGE = 100  # Discord's largest page of channel history
RECEIPT_ROUNDING = 0.001  # a receipt's time is rounded to the millisecond
DISCORD_EPOCH_MS = 1_420_070_400_000


def snowflake_at(wall: float) -> int:
    """The smallest Discord id that could have been made at ``wall`` (seconds since the epoch)."""
    return max(0, int(wall * 1000) - DISCORD_EPOCH_MS) << 22


@dataclass(frozen=True, slots=True)
class Limits:
    horizon: float  # seconds: older deliveries are closed as expired, not answered
    retention: float  # seconds: closed deliveries are remembered this long for de-duplication
    max_rooms: int
    max_pages: int  # per room
    max_messages: int  # per recovery, all rooms together


@dataclass(slots=True)
class Report:
    resumed: int = 0
    expired: int = 0
    restored: int = 0
    waiting: int = 0
    rooms: int = 0
    fetched: int = 0
    admitted: int = 0
    too_old: int = 0
    capped: int = 0
    failed_rooms: int = 0
    answered_before: int = 0
    closed_from_receipts: int = 0  # open in the journal, closed by a receipt written before the bridge died


def resume_journal(bridge: Bridge, limits: Limits, now: float, only: Callable[[Entry], bool] | None = None,
                   held_back: list[Entry] | None = None) -> Report:
    """Step 1: de-duplication restored, open deliveries resumed, expired or put back in a backlog. ``only``: the
    deliveries it keeps, and nothing saved is read back (the postgres profile's drain of a shard this tree took,
    :func:`drain_shard`). ``held_back``: the admitted ones are put there instead of resumed."""
    report = Report()
    state = bridge.journal.state
    saved = bridge.journal.read_seen() if only is None else None
    if saved is not None:
        try:
            log.info("journal: %d message ids remembered from the last compaction", bridge.ingress.dedupe.restore(saved))
        except ValueError as exc:
            log.warning("journal: the saved de-duplication memory is unreadable (%s); starting from the journal alone", exc)
    for entry in sorted(state.entries.values(), key=lambda e: e.at):
        if only is None or only(entry):
            bridge.ingress.remember(entry.delivery_id, entry.fingerprint, entry.at + limits.retention)
    unclosed = [e for e in state.open_entries() if only is None or only(e)]
    found = bridge.receipts.closings({d for e in unclosed for d in (e.delivery_id, *e.folds)},
                                     since=min((e.at for e in unclosed), default=now))
    # only a receipt written since the entry was admitted closes it (an older one closed an earlier life of that id)
    written = {d: r for d, r in found.items() if (e := state.entries.get(d)) is None or r.at >= e.at - RECEIPT_ROUNDING}
    for entry in unclosed:
        receipt = written.get(entry.delivery_id)
        if receipt is not None:
            bridge.ledger.from_receipt(entry, receipt, written, now)
            report.closed_from_receipts += 1
        elif now - entry.at > limits.horizon:
            expire(bridge, entry, now)
            report.expired += 1
        elif entry.submit is None and entry.waiting:
            bridge.requeue(entry)
            report.waiting += 1
        elif entry.submit is None:
            restore_buffered(bridge, entry)
            report.restored += 1
        elif held_back is not None:
            held_back.append(entry)
        else:
            bridge.resume(entry)
            report.resumed += 1
    bridge.drain_waiting()  # the resumed ones hold their slots already; what waited takes what is left, in order
    bridge.release_paced()  # what waited for its author's pace: fresh buckets let a minute's worth go, the rest wait
    if report.resumed or report.expired or report.restored or report.waiting or report.closed_from_receipts:
        log.info("journal: %d deliveries resumed, %d expired, %d buffered restored, %d waiting again, "
                 "%d closed from their receipts", report.resumed, report.expired, report.restored, report.waiting,
                 report.closed_from_receipts)
    return report


def drain_shard(bridge: Bridge, limits: Limits, now: float, shard: tuple[int, int],
                held_back: list[Entry] | None = None) -> Report:
    """The postgres profile: this tree took ``shard``'s lease (at start, or from a tree that died or was cut off).
    The shard's journal lines are read from the database (:meth:`bridge.journal.Journal.take`) and its open
    deliveries drained as at a restart (:func:`resume_journal`): an admitted one is submitted again by its id (this
    tree's service runs it; a service that has it already answers by the id), a waiting or buffered one waits again,
    one past the horizon is closed ``expired``; every delivery of the shard is remembered, so the read-back of the
    new session does not admit them again. Only the deliveries this bridge did not know are drained: the ones it
    knew (a shard lost and taken back in one life) are in its hands already, held, waiting or closed. With
    ``held_back`` (the shard was another tree's meanwhile, which may have answered a delivery and died before its
    close line) the admitted ones are put there, for :func:`resume_taken` once the gateway is up. Raises
    :class:`~clankie.store.journal_ports.JournalRefused` when the database did not answer the read."""
    new = bridge.journal.take(shard)
    report = resume_journal(bridge, limits, now, only=lambda entry: entry.delivery_id in new, held_back=held_back)
    log.info("journal: shard %d/%d taken: %d deliveries new to this bridge, %d resumed, %d held back, %d waiting "
             "again, %d buffered restored, %d expired", shard[0], shard[1], len(new), report.resumed,
             len(held_back) if held_back is not None else 0, report.waiting, report.restored, report.expired)
    return report


async def resume_taken(bridge: Bridge, limits: Limits, now: float, entries: list[Entry]) -> Report:
    """The admitted deliveries another tree left open in a shard this tree took (:func:`drain_shard`), once a gateway
    session is up: each room's history after its oldest is read (a page budget of the recovery's limits); one the
    bot already answered (its reply refers to it: the other tree posted, then died before its close line) is closed
    ``settled`` with that reply, never answered twice; every other one is submitted again by its id. A room whose
    history cannot be read has its deliveries submitted (answering twice is the lesser fault than never)."""
    report = Report()
    rooms: dict[str, list[Entry]] = {}
    for entry in entries:
        rooms.setdefault(entry.room.channel_id, []).append(entry)
    for waiting in rooms.values():
        room = waiting[0].room
        ids = [int(e.delivery_id) for e in waiting if e.delivery_id.isdigit()]
        replies: dict[str, list[str]] = {}
        if ids:
            try:
                found = await bridge.port.missed(room, str(min(ids) - 1), limits.max_pages * PAGE)
            except PostError as exc:
                log.warning("recovery: history of channel %s unavailable (%s); its taken deliveries run again",
                            room.channel_id, exc.code)
                found = []
            for inbound, _, _ in found:
                if inbound.from_self and inbound.refers_to:
                    replies.setdefault(inbound.refers_to, []).append(inbound.message_id)
        for entry in waiting:
            if not entry.open:  # closed meanwhile (a receipt, an expiry)
                continue
            posted = replies.get(entry.delivery_id)
            if posted:
                bridge.ledger.closed(entry.room, entry.delivery_id, TurnOutcome.SETTLED, now, folds=entry.folds,
                                     message_ids=tuple(posted))
                report.answered_before += 1
            else:
                bridge.resume(entry)
                report.resumed += 1
    if entries:
        log.info("recovery: %d deliveries taken from another tree resumed, %d found answered already",
                 report.resumed, report.answered_before)
    return report


def expire(bridge: Bridge, entry: Entry, now: float) -> None:
    """Close a journaled delivery older than the horizon, unanswered, with an ``expired`` receipt."""
    bridge.turns.count("expired")
    bridge.ledger.expired(entry.room, entry.delivery_id, now, folds=entry.folds)


def restore_buffered(bridge: Bridge, entry: Entry) -> None:
    """Put a journaled buffered message's id back where the catch-up timer will find it (its entry stays the one
    record of it); one that pushes the oldest out of a full backlog closes that one as at admission."""
    fell_out = bridge.ingress.restore_buffered(entry.room.channel_id, entry.delivery_id, bridge.clock.wall())
    bridge.fell_out(fell_out, entry.room)


def too_old(bridge: Bridge, inbound: Inbound, now: float, retention: float) -> None:
    """A message found in history that is older than the horizon: noted once, not answered."""
    bridge.turns.count("expired")
    bridge.ingress.remember(inbound.message_id, inbound.fingerprint, now + retention)
    bridge.receipts.record("expired", delivery_id=inbound.message_id, channel_id=inbound.channel_id,
                           guild_id=inbound.guild_id)


async def fetch_missed(bridge: Bridge, limits: Limits, now: float, quiet_since: float,
                       only: Callable[[Room], bool] | None = None) -> Report:
    """Step 2: what Discord sent while no gateway session was listening, admitted oldest first.

    ``quiet_since`` is when the gateway stopped handing us messages (the last
    disconnect, or the process start): each room is read after the newest
    message it had admitted by then. Messages this session already handed us
    are skipped by id. ``only`` keeps the rooms to read (a sharded bridge: those
    of the shards that started a new session; a resumed shard's gap was replayed).
    """
    report = Report()
    floor = snowflake_at(now - limits.horizon)
    marks: dict[str, tuple[Room, int]] = {}
    for cid, (room, newest) in bridge.journal.state.rooms_since(now - limits.horizon, quiet_since).items():
        if only is not None and not only(room):
            continue
        # a room first heard from after the gap began is read from the horizon (its gap has no known start)
        marks[cid] = (room, max(floor, int(newest)) if newest is not None else floor)
    # rooms the journal never heard from, whose newest message (as the gateway says) is inside the horizon
    latest: dict[str, int] = {}
    for room, last_id in bridge.port.active_rooms():
        latest[room.channel_id] = last_id
        if only is not None and not only(room):
            continue
        if last_id > floor and room.channel_id not in marks and bridge.ingress.room_admitted(room.guild_id, room.channel_id):
            marks[room.channel_id] = (room, floor)
    # a room whose newest message is one we have already seen has nothing to read
    wanted = [(room, mark) for cid, (room, mark) in marks.items() if latest.get(cid, mark + 1) > mark]
    ordered = sorted(wanted, key=lambda pair: latest.get(pair[0].channel_id, pair[1]), reverse=True)  # newest first
    if len(ordered) > limits.max_rooms:
        report.capped += len(ordered) - limits.max_rooms
        ordered = ordered[: limits.max_rooms]
    budget = limits.max_messages
    for room, mark in ordered:
        if budget <= 0:
            report.capped += 1
            continue
        want = min(budget, limits.max_pages * PAGE)
        try:
            found = await bridge.port.missed(room, str(mark), want)
        except PostError as exc:
            log.warning("recovery: history of channel %s unavailable (%s)", room.channel_id, exc.code)
            report.failed_rooms += 1
            continue
        report.rooms += 1
        report.fetched += len(found)
        budget -= len(found)
        if len(found) >= want:
            report.capped += 1
        # a message we had already answered (our reply is right there) was admitted before, even if the
        # journal lost its line to a power cut: never answer it twice
        answered = {i.refers_to for i, _, _ in found if i.from_self and i.refers_to}
        for inbound, msg_room, trigger in found:
            if bridge.ingress.seen(inbound.message_id):
                continue
            if inbound.message_id in answered:
                report.answered_before += 1
                bridge.ingress.remember(inbound.message_id, inbound.fingerprint, now + limits.retention)
                continue
            if now - trigger.at > limits.horizon:
                report.too_old += 1
                too_old(bridge, inbound, now, limits.retention)
                continue
            if bridge.on_message(inbound, msg_room, trigger) is not None:
                report.admitted += 1
    log.info("recovery: %d rooms read, %d messages fetched, %d admitted, %d older than the horizon, %d capped, %d rooms failed",
             report.rooms, report.fetched, report.admitted, report.too_old, report.capped, report.failed_rooms)
    return report
