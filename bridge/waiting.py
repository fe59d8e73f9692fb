"""Admitted messages waiting for a turn slot (pure: no I/O, no clock).

When ``CLANKIE_DISCORD_MAX_TURNS`` turns are held, admission says
:class:`bridge.admission.Waiting` instead of refusing: the message is
journaled (``wait``, with its payload, in :mod:`bridge.journal`) and only its
id is queued here, under its room. When a slot frees, the room at the front
goes whole: everything waiting in it joins into one turn (the newest message
triggers it, the older ones are its context, as a catch-up backlog is), and
the room goes to the back if more arrives later. Rooms are served in the order
their first waiting message arrived, so the oldest wait is served first and
one busy room never starves the rest: a room gets one turn per pass, however
many of its messages wait.

A turn carries at most :data:`MAX_JOIN` of them (the trigger and the 50 a
``TurnSubmit`` backlog holds): a room with more waiting takes its oldest
``MAX_JOIN`` as one turn and goes to the back of the queue with the rest.

Bounded by the journal's size on disk (admission refuses ``journal_full`` at
``CLANKIE_DISCORD_JOURNAL_MAX_BYTES``), not by a count of its own; what it
holds per message is the message id. The message's one record is its journal
entry; :func:`joined` builds the turn from the entries, for a room whose
messages waited for a slot and for a room's catch-up backlog alike.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.journal_state import Entry
from clankie.protocol import HistoryMessage, Trigger, TurnSubmit

MAX_JOIN = 1 + 50
"""Waiting messages one turn takes: its trigger and a full ``TurnSubmit.backlog`` (at most 50)."""


class WaitQueue:
    """Message ids waiting for a turn, per room; rooms in the order their oldest waiting message came."""

    def __init__(self) -> None:
        self._rooms: OrderedDict[str, list[str]] = OrderedDict()
        self._count = 0

    def add(self, channel_id: str, message_id: str) -> None:
        """Queue one message behind whatever waits in its room (a new room goes to the back)."""
        self._rooms.setdefault(channel_id, []).append(message_id)
        self._count += 1

    def take(self, limit: int = MAX_JOIN) -> tuple[str, list[str]] | None:
        """The room at the front and its waiting message ids, oldest first, at most ``limit`` of them; a room with
        more goes to the back with the rest (None if nothing waits)."""
        if not self._rooms:
            return None
        channel_id, ids = self._rooms.popitem(last=False)
        taken, rest = ids[:limit], ids[limit:]
        if rest:
            self._rooms[channel_id] = rest
        self._count -= len(taken)
        return channel_id, taken

    def waits(self, channel_id: str) -> bool:
        """Whether the room has messages waiting (a new one must wait behind them)."""
        return channel_id in self._rooms

    def __len__(self) -> int:
        return self._count

    @property
    def rooms(self) -> int:
        return len(self._rooms)


@dataclass(frozen=True, slots=True)
class Joined:
    """One turn built from messages that waited: what the shell holds it as (:class:`bridge.held.Held`)."""

    submit: TurnSubmit
    fingerprint: str  # the trigger's, as its journal entry has it
    catching_up: bool
    folds: tuple[str, ...]  # the older messages, answered by this turn too


def joined(entries: Sequence[Entry], *, catching_up: bool = False) -> Joined | None:
    """One turn for a room's messages that waited (for a slot, or in a backlog for its catch-up turn), from their
    journal entries, oldest first; closed or already submitted ones are left out (None: nothing is left).

    The newest triggers it and the older ones are its backlog and its folds (their outcome follows the turn's).
    A catch-up turn is unprompted; one of messages that waited for a slot is prompted if any of them was
    addressed. Each payload is unpacked here, once, as the turn is built: nothing else holds it meanwhile.
    """
    taken = [(e, p) for e in entries if e.open and e.submit is None and (p := e.payload()) is not None]
    if not taken:
        return None
    triggers = [Trigger.model_validate(payload["trigger"]) for _, payload in taken]
    unprompted = catching_up or all(t.unprompted for t in triggers)
    trigger = triggers[-1]
    if trigger.unprompted != unprompted:
        trigger = trigger.model_copy(update={"unprompted": unprompted})
    backlog = tuple(HistoryMessage(id=t.message_id, author_id=t.author.id, author_name=t.author.name,
                                   is_bot=t.author.is_bot, text=t.text, at=t.at, attachments=t.attachments)
                    for t in triggers[:-1])
    newest = taken[-1][0]
    submit = TurnSubmit(delivery_id=newest.delivery_id, room=newest.room, trigger=trigger, backlog=backlog)
    return Joined(submit, newest.fingerprint, catching_up, tuple(e.delivery_id for e, _ in taken[:-1]))
