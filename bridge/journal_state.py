"""The journal's pure state: entries folded from its lines, and the lines that rebuild them (:mod:`bridge.journal`).

:class:`JournalState` folds each line into an :class:`Entry` and answers what
recovery needs; :func:`entry_lines` is the inverse, used by compaction. No
I/O, no clock: time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.packing import pack, unpack
from clankie.protocol import Room, TurnOutcome, TurnSubmit

EXPIRED = "expired"  # closed unanswered: past the recovery horizon, or out of a full backlog (never a turn's outcome)
OUTCOMES: frozenset[str] = frozenset({*(o.value for o in TurnOutcome), EXPIRED})
"""What a ``close`` line may say; any other line is skipped as unreadable."""


@dataclass(slots=True)
class Entry:
    """What the journal knows about one delivery."""

    delivery_id: str
    at: float  # wall time it was admitted
    fingerprint: str
    room: Room
    submit: dict[str, Any] | None = None  # the TurnSubmit on the wire; None while only buffered
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

    def payload(self) -> dict[str, Any] | None:
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

    def apply(self, line: dict[str, Any]) -> None:
        """Fold one line in; a line that does not make sense is counted and ignored."""
        try:
            self._apply(line)
        except (KeyError, TypeError, ValueError, AssertionError):
            self.skipped += 1

    def _apply(self, line: dict[str, Any]) -> None:
        op = line["op"]
        if op == "gap":
            self.gaps = sorted({*self.gaps, float(line["since"])})
            return
        if op == "caught_up":
            through = float(line["through"])
            self.gaps = [g for g in self.gaps if g > through]
            return
        did = str(line["id"])
        if op == "admit":
            submit = line["submit"]
            room = self._room(submit["room"])
            entry = self.entries.get(did)
            if entry is None or not entry.open:  # a closed one admitted again (its turn could not run) is new
                entry = Entry(did, float(line["at"]), str(line["fp"]), room)
            entry.submit, entry.buffered = submit, None
            entry.paced = entry.paced or line.get("paced")
            entry.catching_up = bool(line.get("catch_up", False))
            entry.folds = tuple(str(f) for f in line.get("folds", ()))
            self.entries[did] = entry
            for fold in entry.folds:
                if fold in self.entries:
                    self.entries[fold].folded_into = did
        elif op in ("buffer", "wait"):
            room = self._room(line["room"])
            self.entries[did] = Entry(did, float(line["at"]), str(line["fp"]), room,
                                      buffered=pack(did, room, {"inbound": line["inbound"], "trigger": line["trigger"]}),
                                      waiting=op == "wait", paced=line.get("paced"))
        elif op == "close":
            outcome = str(line["outcome"])
            if outcome not in OUTCOMES:
                raise ValueError(outcome)
            entry = self.entries[did]
            entry.outcome = outcome
            entry.closed_at = float(line.get("at", 0.0))
            entry.replied = max((int(m) for m in line.get("mids", ()) if str(m).isdigit()), default=0)
            entry.submit = entry.buffered = None  # its text is never read again: let it go now, not at compaction
        elif op == "closed":  # a compacted closed entry: enough for de-duplication and the room's last id
            room = self._room(line["room"])
            self.entries[did] = Entry(did, float(line["at"]), str(line["fp"]), room, outcome=str(line["outcome"]),
                                      replied=int(line.get("replied", 0)), closed_at=float(line.get("closed_at", 0.0)))
        else:
            raise ValueError(op)

    def _room(self, wire: dict[str, Any]) -> Room:
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

    def compacted(self, since: float) -> list[dict[str, Any]]:
        """The lines that rebuild :meth:`retained` exactly (folds after the entries they fold)."""
        keep = self.retained(since)
        lines: list[dict[str, Any]] = [{"v": 1, "op": "gap", "since": g} for g in self.gaps]
        for e in sorted(keep, key=lambda e: e.submit is not None):
            lines.extend(entry_lines(e))
        return lines

    def forget_before(self, since: float) -> None:
        for did in [d for d, e in self.entries.items() if not e.open and e.at < since]:
            del self.entries[did]
        self._rooms = {e.room: e.room for e in self.entries.values()}


def entry_lines(e: Entry) -> list[dict[str, Any]]:
    """The shortest lines that rebuild one entry."""
    if not e.open:
        line: dict[str, Any] = {"v": 1, "op": "closed", "id": e.delivery_id, "at": e.at, "fp": e.fingerprint,
                                "room": e.room.to_wire(), "outcome": e.outcome}
        if e.replied:
            line["replied"], line["closed_at"] = e.replied, e.closed_at
        return [line]
    if e.submit is None:
        payload = e.payload()
        assert payload is not None
        line = {"v": 1, "op": "wait" if e.waiting else "buffer", "id": e.delivery_id, "at": e.at, "fp": e.fingerprint,
                "room": e.room.to_wire(), **payload}
        if e.paced is not None:
            line["paced"] = e.paced
        return [line]
    return [admit_line(e.delivery_id, e.at, e.fingerprint, e.submit, e.catching_up, e.folds, e.paced)]


def admit_line(did: str, at: float, fp: str, submit: dict[str, Any], catching_up: bool,
               folds: tuple[str, ...], paced: str | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {"v": 1, "op": "admit", "id": did, "at": at, "fp": fp, "submit": submit}
    if catching_up:
        line["catch_up"] = True
    if folds:
        line["folds"] = list(folds)
    if paced is not None:
        line["paced"] = paced
    return line
