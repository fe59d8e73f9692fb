"""When refusal reactions cannot keep up, a refused message's room gets one notice instead (pure).

A message refused for backpressure (``journal_full``) shows the failure
reaction on itself (:mod:`bridge.reaction`), so its author knows to send it
again. Reactions in flight are bounded (``bridge.turns.MAX_REFUSAL_REACTIONS``);
past the bound a refusal would reach its author with no sign at all. So the
bridge then posts :data:`NOTICE` in the room, as a reply to the refused
message: at most one per room per :data:`NOTICE_INTERVAL`, and a refusal in
that room within the interval is covered by the notice already posted (which
says messages sent here in the next few minutes may not be taken).

:class:`NoticeGate` decides; the bridge posts and counts
(``clankie_refusal_signs_total{code,sign}``, :data:`SIGNS`). It remembers
at most :data:`MAX_NOTICE_ROOMS` rooms at once (those noticed within the
interval); past that a refusal gets no sign, and is counted ``none``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

NOTICE = (
    "\u26a0\ufe0f I can't take more messages right now: too many are already waiting. "
    "Anything sent here in the next few minutes may not be answered; please send it again in a few minutes."
)
"""The one templated notice (no content of anyone's)."""
NOTICE_INTERVAL = 300.0
"""Seconds a room's notice covers: at most one notice per room in this long."""
MAX_NOTICE_ROOMS = 64
"""Rooms remembered as noticed at once (and notices in flight at most)."""

Sign = Literal["reaction", "notice", "covered", "none"]
SIGNS: tuple[Sign, ...] = ("reaction", "notice", "covered", "none")
"""How a refused message reached its author: its own reaction, a room notice replying to it (counted once posted), a
notice in its room within the interval, or nothing (notices at their bound too, or the notice's post failed)."""


class NoticeGate:
    """Which refused messages get a room notice: the first in a room per interval (pure: ``now`` comes in)."""

    def __init__(self, interval: float = NOTICE_INTERVAL, max_rooms: int = MAX_NOTICE_ROOMS) -> None:
        if interval <= 0 or max_rooms < 1:
            raise ValueError("a notice gate needs a positive interval and at least one room")
        self.interval = interval
        self.max_rooms = max_rooms
        self._noticed: OrderedDict[str, float] = OrderedDict()  # room -> when its notice went out, oldest first

    def __len__(self) -> int:
        return len(self._noticed)

    def decide(self, channel_id: str, now: float) -> Literal["notice", "covered", "none"]:
        """``notice`` (post one; the room is covered from ``now``), ``covered`` (one went out within the interval)
        or ``none`` (the gate already remembers :attr:`max_rooms` rooms)."""
        while self._noticed and now - next(iter(self._noticed.values())) >= self.interval:
            self._noticed.popitem(last=False)
        if channel_id in self._noticed:
            return "covered"
        if len(self._noticed) >= self.max_rooms:
            return "none"
        self._noticed[channel_id] = now
        return "notice"

    def failed(self, channel_id: str) -> None:
        """The room's notice was not posted and may be later: the next refusal there may try again."""
        self._noticed.pop(channel_id, None)
