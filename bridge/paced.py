"""Messages waiting for their author's pace, per person and room (pure: no I/O, no clock).

A message whose author has spent their turns for the minute (:mod:`bridge.fairness`)
is not dropped: it waits for its author's bucket, journaled like any waiting
message (``wait``, with its pace key: :mod:`bridge.journal`), and only its id is
held here, under its author and its room. A person's messages in one room are
one *waiting turn*: a later message of theirs in that room folds into it. While
a person has anything waiting, each new message of theirs waits too (it never
jumps ahead of their earlier ones, even once the bucket has a token). When
the person's bucket (and the room's) has a token again, their oldest waiting
turn is let go (:meth:`PacedTurns.release`, which spends the token): the shell
hands its ids to the turn-slot queue (:mod:`bridge.waiting`), which joins them
into one turn, the newest triggering it, and sleeps until
:meth:`PacedTurns.next_release`.

Bounded by settings: a person holds at most ``per_person`` waiting turns
(``CLANKIE_USER_PACED_MINUTES`` of their pace: a minute's worth by default), and a
waiting turn at most ``per_turn`` messages (what one turn carries:
:data:`bridge.waiting.MAX_JOIN`). Past either, :meth:`PacedTurns.admits` says no
and admission refuses the message ``rate_limited``, as it did every message over
the pace before. So a spammer still starts at most the pace's runs, and what
they can leave waiting is ``per_person * per_turn`` ids. Messages restored from
the journal after a restart are taken whatever the bounds (they were admitted).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from bridge.fairness import Fairness


class PacedTurns:
    """Each person's waiting turns (room → message ids, oldest first), people in the order they first waited."""

    def __init__(self, per_person: int, per_turn: int, fairness: Fairness) -> None:
        self.per_person = per_person
        self.per_turn = per_turn
        self.fairness = fairness  # the buckets a waiting turn needs a token from before it goes
        self._people: OrderedDict[str, OrderedDict[str, list[str]]] = OrderedDict()
        self._count = 0

    def holds(self, person: str) -> bool:
        """Whether ``person`` has messages waiting (a new one of theirs waits behind them, whatever their bucket)."""
        return person in self._people

    def admits(self, person: str, channel_id: str) -> bool:
        """Whether one more message of ``person`` in this room may wait: it folds into their waiting turn there while
        that has room, or opens a new waiting turn while they hold fewer than ``per_person``."""
        turns = self._people.get(person)
        if turns is None:
            return self.per_person > 0
        ids = turns.get(channel_id)
        if ids is not None:
            return len(ids) < self.per_turn
        return len(turns) < self.per_person

    def add(self, person: str, channel_id: str, message_id: str) -> bool:
        """Hold one message (call after :meth:`admits`, or for one restored from the journal); True when it opened a
        new waiting turn, False when it folded into one."""
        turns = self._people.setdefault(person, OrderedDict())
        ids = turns.get(channel_id)
        self._count += 1
        if ids is None:
            turns[channel_id] = [message_id]
            return True
        ids.append(message_id)
        return False

    def heads(self) -> Iterator[tuple[str, str]]:
        """Each person's oldest waiting turn, as (person, room)."""
        for person, turns in self._people.items():
            yield person, next(iter(turns))

    def head(self, person: str) -> str | None:
        """The room of ``person``'s oldest waiting turn (None: they have none)."""
        turns = self._people.get(person)
        return next(iter(turns)) if turns else None

    def pop(self, person: str) -> tuple[str, list[str]]:
        """Let ``person``'s oldest waiting turn go: its room and its message ids, oldest first."""
        turns = self._people[person]
        channel_id, ids = turns.popitem(last=False)
        if not turns:
            del self._people[person]
        self._count -= len(ids)
        return channel_id, ids

    def release(self, now: float) -> list[tuple[str, list[str]]]:
        """The waiting turns whose authors' pace lets them start now, each as (room, message ids oldest first); their
        tokens are spent. A person's turns go oldest first; one whose room's bucket is empty holds theirs back."""
        out: list[tuple[str, list[str]]] = []
        ready = [(person, cid) for person, cid in self.heads() if self.fairness.ready(person, cid, now)]
        while ready:
            person, cid = ready.pop(0)
            self.fairness.start(person, cid, now)
            out.append(self.pop(person))
            following = self.head(person)
            if following is not None and self.fairness.ready(person, following, now):
                ready.append((person, following))
        return out

    def next_release(self, now: float) -> float | None:
        """When the earliest waiting turn's pace lets it start (None: nothing waits for its pace)."""
        return min((self.fairness.ready_at(person, cid, now) for person, cid in self.heads()), default=None)

    def __len__(self) -> int:
        """Messages waiting for their author's pace."""
        return self._count

    @property
    def people(self) -> int:
        return len(self._people)
