"""The journal's pure state: entries folded from its lines, and the lines that rebuild them (:mod:`bridge.journal`).

:class:`JournalState` folds each typed line (:mod:`bridge.journal_lines`) into
an :class:`Entry` and answers what recovery needs; :func:`entry_lines` is the
inverse, used by compaction. A raw object is parsed once, at
:meth:`JournalState.read`; a line that is malformed, or that names a delivery
the state does not hold, is counted and skipped with its reason, and the
other lines still fold. No I/O, no clock: time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.journal_lines import (
    EXPIRED,
    JournalLine,
    MalformedLine,
    Wire,
    admit_line,
    closed_line,
    gap_line,
    parse_line,
    wait_line,
)
from bridge.packing import Payload, pack, unpack
from clankie.protocol import Room, TurnSubmit

__all__ = ["EXPIRED", "Entry", "JournalState", "admit_line", "entry_lines"]

MAX_REASONS = 8
"""Reasons for skipped lines kept for the log (the count is kept whole)."""


@dataclass(slots=True)
class Entry:
    """What the journal knows about one delivery."""

    delivery_id: str
    at: float  # wall time it was admitted
    fingerprint: str
    room: Room
    submit: Wire | None = None  # the TurnSubmit on the wire; None while only buffered
    # while waiting for a catch-up or a slot: its payload packed (bridge.packing), read when its turn is built
    buffered: bytes | None = None
    waiting: bool = False  # buffered for a turn slot (``wait``), not for a catch-up (``buffer``)
    paced: str | None = None  # waited for its author's pace (bridge.paced): their pace key; it wore the ⏳
    catching_up: bool = False
    folds: tuple[str, ...] = ()
    folded_into: str | None = None
    outcome: str | None = None
    replied: int = 0  # the newest message id posted for it (0: none)
    closed_at: float = 0.0

    @property
    def open(self) -> bool:
        return self.outcome is None

    def turn(self) -> TurnSubmit:
        assert self.submit is not None
        return TurnSubmit.model_validate(self.submit)

    def payload(self) -> Payload | None:
        """The buffered message (``inbound``, ``trigger``) as the journal line had it; None if it is not waiting."""
        return unpack(self.delivery_id, self.room, self.buffered) if self.buffered is not None else None


def _message_order(delivery_id: str) -> int:
    return int(delivery_id) if delivery_id.isdigit() else 0


class JournalState:
    """Entries by delivery id, folded from journal lines (pure: no I/O, time passed in)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._rooms: dict[Room, Room] = {}  # one object per room, shared by its entries
        self.gaps: list[float] = []  # starts of the gaps not yet read back, oldest first
        self.skipped = 0
        self.reasons: list[str] = []  # why the first MAX_REASONS skipped lines were skipped (for the log)

    def read(self, raw: object) -> None:
        """Parse one stored object (:func:`bridge.journal_lines.parse_line`) and fold it in; one that is malformed
        is counted and skipped (:attr:`skipped`, :attr:`reasons`)."""
        try:
            line = parse_line(raw)
        except MalformedLine as exc:
            self.skip(str(exc))
            return
        self.apply(line)

    def skip(self, reason: str) -> None:
        """Count one line that was not folded in, and keep why (the first few reasons)."""
        self.skipped += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(reason)

    def apply(self, line: JournalLine) -> None:
        """Fold one typed line in; one that names a delivery the state does not hold (a close of an unknown id) or a
        room its model refuses is counted and skipped."""
        try:
            self._apply(line)
        except _Inconsistent as exc:
            self.skip(f"{line['op']} line: {exc}")
        except ValueError:  # a nested record its model refuses (a pydantic ValidationError)
            self.skip(f"{line['op']} line: room is not a room")

    def _apply(self, line: JournalLine) -> None:
        if line["op"] == "gap":
            self.gaps = sorted({*self.gaps, line["since"]})
        elif line["op"] == "caught_up":
            through = line["through"]
            self.gaps = [g for g in self.gaps if g > through]
        elif line["op"] == "admit":
            did, submit = line["id"], line["submit"]
            room_wire = submit["room"]
            assert isinstance(room_wire, dict)  # parse_line checked it
            room = self._room(room_wire)
            entry = self.entries.get(did)
            if entry is None or not entry.open:  # a closed one admitted again (its turn could not run) is new
                entry = Entry(did, line["at"], line["fp"], room)
            entry.submit, entry.buffered = submit, None
            entry.paced = entry.paced or line.get("paced")
            entry.catching_up = line.get("catch_up", False)
            entry.folds = tuple(line.get("folds", ()))
            self.entries[did] = entry
            for fold in entry.folds:
                if fold in self.entries:
                    self.entries[fold].folded_into = did
        elif line["op"] == "buffer" or line["op"] == "wait":
            did = line["id"]
            room = self._room(line["room"])
            self.entries[did] = Entry(did, line["at"], line["fp"], room,
                                      buffered=pack(did, room, {"inbound": line["inbound"], "trigger": line["trigger"]}),
                                      waiting=line["op"] == "wait", paced=line.get("paced"))
        elif line["op"] == "close":
            entry = self.entries.get(line["id"])
            if entry is None:
                raise _Inconsistent("closes a delivery the journal does not hold")
            entry.outcome = line["outcome"]
            entry.closed_at = line["at"]
            entry.replied = max((int(m) for m in line.get("mids", ()) if m.isdigit()), default=0)
            entry.submit = entry.buffered = None  # its text is never read again: let it go now, not at compaction
        else:  # closed: a compacted closed entry, enough for de-duplication and the room's last id
            did = line["id"]
            self.entries[did] = Entry(did, line["at"], line["fp"], self._room(line["room"]), outcome=line["outcome"],
                                      replied=line.get("replied", 0), closed_at=line.get("closed_at", 0.0))

    def _room(self, wire: Wire) -> Room:
        room = Room.model_validate(wire)
        return self._rooms.setdefault(room, room)

    # ------------------------------------------------------------ queries

    def quiet_since(self) -> float | None:
        """When the oldest gap not yet read back began (None: nothing is known to be missing)."""
        return self.gaps[0] if self.gaps else None

    def open_entries(self) -> list[Entry]:
        """Deliveries without an outcome that are not folded into another one, oldest first."""
        found = [e for e in self.entries.values() if e.open and e.folded_into is None]
        return sorted(found, key=lambda e: (e.at, _message_order(e.delivery_id)))

    def rooms_since(self, since: float, before: float) -> dict[str, tuple[Room, str | None]]:
        """Rooms with a delivery admitted at or after ``since``, each with the newest message it had
        admitted (or posted) by ``before`` (when the gateway went quiet; None if none): channel → (room, id)."""
        rooms: dict[str, Room] = {}
        newest: dict[str, int] = {}
        for e in self.entries.values():
            cid = e.room.channel_id
            if e.at >= since:
                rooms[cid] = e.room
            if e.at <= before and e.delivery_id.isdigit():
                replied = e.replied if e.closed_at <= before else 0  # a reply posted after the gap began is no mark
                newest[cid] = max(newest.get(cid, 0), int(e.delivery_id), replied)
        return {cid: (room, str(newest[cid]) if cid in newest else None) for cid, room in rooms.items()}

    def retained(self, since: float) -> list[Entry]:
        """Every entry worth keeping: open ones, and closed ones admitted at or after ``since``."""
        return [e for e in self.entries.values() if e.open or e.at >= since]

    def compacted(self, since: float) -> list[JournalLine]:
        """The lines that rebuild :meth:`retained` exactly (folds after the entries they fold)."""
        keep = self.retained(since)
        lines: list[JournalLine] = [gap_line(g) for g in self.gaps]
        for e in sorted(keep, key=lambda e: e.submit is not None):
            lines.extend(entry_lines(e))
        return lines

    def forget_before(self, since: float) -> None:
        for did in [d for d, e in self.entries.items() if not e.open and e.at < since]:
            del self.entries[did]
        self._rooms = {e.room: e.room for e in self.entries.values()}


def entry_lines(e: Entry) -> list[JournalLine]:
    """The shortest lines that rebuild one entry."""
    if e.outcome is not None:
        return [closed_line(e.delivery_id, e.at, e.fingerprint, e.room.to_wire(), e.outcome, e.replied, e.closed_at)]
    if e.submit is None:
        payload = e.payload()
        assert payload is not None
        return [wait_line("wait" if e.waiting else "buffer", e.delivery_id, e.at, e.fingerprint, e.room.to_wire(),
                          payload["inbound"], payload["trigger"], e.paced)]
    return [admit_line(e.delivery_id, e.at, e.fingerprint, e.submit, e.catching_up, e.folds, e.paced)]


class _Inconsistent(Exception):
    """A well-formed line the state cannot fold (it names a delivery the state does not hold)."""
