"""The journal's stored lines: one typed record per kind, built by the writer and parsed once by the reader (pure).

Each line of ``<state>/bridge/journal.jsonl`` (:mod:`bridge.journal`) is one
JSON object, ``"v": 1``, whose ``op`` names its kind. Each kind is a
``TypedDict`` here, shaped exactly as the line is stored: the writer builds
one (:func:`admit_line`, :func:`wait_line`, :func:`close_line`, …) and the
appender writes it as it is, so the bytes on disk are the ones a bridge of
any earlier version wrote and reads back. Nested records (a ``TurnSubmit``, a
``Room``, a waiting message's ``Inbound`` and ``Trigger``) are kept in their
wire form (:data:`Wire`), validated by their own models where they are used.

The reader parses each object once, where it is read (:func:`parse_line`):
either a typed line or :class:`MalformedLine`, whose message says which line
kind and which field is wrong (never a value: the journal holds message
text). Where the lines are stored decides how a row becomes an object: the
file adapter (:func:`bridge.journal_files.decode`) numbers the rows, skips one
that is not JSON and keeps a torn last one if whole; :class:`bridge.journal.Journal`
then parses each, reporting and skipping a malformed one, never the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, NotRequired, TypedDict

from clankie.protocol import TurnOutcome

VERSION = 1
EXPIRED = "expired"  # closed unanswered: past the recovery horizon, or out of a full backlog (never a turn's outcome)
OUTCOMES: frozenset[str] = frozenset({*(o.value for o in TurnOutcome), EXPIRED})
"""What a ``close`` or ``closed`` line may say."""

Wire = dict[str, object]
"""A nested record's wire form (``to_wire()``), as stored; its own model validates it where it is used."""


class AdmitLine(TypedDict):
    """A delivery submitted as a turn: the exact ``TurnSubmit``, written before the submission goes out."""

    v: Literal[1]
    op: Literal["admit"]
    id: str
    at: float
    fp: str
    submit: Wire
    catch_up: NotRequired[Literal[True]]
    folds: NotRequired[list[str]]  # the waiting messages this turn answers too
    paced: NotRequired[str]  # it waited for its author's pace (only in compacted lines)


class WaitLine(TypedDict):
    """A message held for a catch-up turn (``buffer``) or waiting for a turn slot or its author's pace (``wait``)."""

    v: Literal[1]
    op: Literal["buffer", "wait"]
    id: str
    at: float
    fp: str
    room: Wire
    inbound: Wire
    trigger: Wire
    paced: NotRequired[str]  # its author's pace key


class CloseLine(TypedDict):
    """A delivery's one outcome (or ``expired``), with the ids of the messages posted for it."""

    v: Literal[1]
    op: Literal["close"]
    id: str
    at: float
    outcome: str  # one of OUTCOMES
    code: NotRequired[str]
    mids: NotRequired[list[str]]


class ClosedLine(TypedDict):
    """A closed delivery as compaction keeps it: enough for de-duplication and its room's newest id."""

    v: Literal[1]
    op: Literal["closed"]
    id: str
    at: float
    fp: str
    room: Wire
    outcome: str  # one of OUTCOMES
    replied: NotRequired[int]  # the newest message id posted for it
    closed_at: NotRequired[float]


class GapLine(TypedDict):
    """From ``since`` on, the gateway may have sent messages nobody heard."""

    v: Literal[1]
    op: Literal["gap"]
    since: float


class CaughtUpLine(TypedDict):
    """History has been read back for every gap that began by ``through``."""

    v: Literal[1]
    op: Literal["caught_up"]
    through: float


JournalLine = AdmitLine | WaitLine | CloseLine | ClosedLine | GapLine | CaughtUpLine
"""Every kind of stored line (``op`` tells them apart)."""


class MalformedLine(ValueError):
    """Raised when a journal line is not one of the kinds above: not a JSON object, another version, an unknown
    ``op``, or a field missing or of the wrong type. The message names the kind and the field, never a value. The
    reader skips the line and reads the rest."""


# ------------------------------------------------------------ writing


def admit_line(did: str, at: float, fp: str, submit: Wire, catching_up: bool, folds: tuple[str, ...],
               paced: str | None = None) -> AdmitLine:
    line: AdmitLine = {"v": 1, "op": "admit", "id": did, "at": at, "fp": fp, "submit": submit}
    if catching_up:
        line["catch_up"] = True
    if folds:
        line["folds"] = list(folds)
    if paced is not None:
        line["paced"] = paced
    return line


def wait_line(op: Literal["buffer", "wait"], did: str, at: float, fp: str, room: Wire, inbound: Wire, trigger: Wire,
              paced: str | None = None) -> WaitLine:
    line: WaitLine = {"v": 1, "op": op, "id": did, "at": at, "fp": fp, "room": room, "inbound": inbound,
                      "trigger": trigger}
    if paced is not None:
        line["paced"] = paced
    return line


def close_line(did: str, outcome: str, at: float, code: str | None = None, message_ids: tuple[str, ...] = ()) -> CloseLine:
    line: CloseLine = {"v": 1, "op": "close", "id": did, "at": at, "outcome": outcome}
    if code:
        line["code"] = code
    if message_ids:
        line["mids"] = list(message_ids)
    return line


def closed_line(did: str, at: float, fp: str, room: Wire, outcome: str, replied: int, closed_at: float) -> ClosedLine:
    line: ClosedLine = {"v": 1, "op": "closed", "id": did, "at": at, "fp": fp, "room": room, "outcome": outcome}
    if replied:
        line["replied"], line["closed_at"] = replied, closed_at
    return line


def gap_line(since: float) -> GapLine:
    return {"v": 1, "op": "gap", "since": since}


def caught_up_line(through: float) -> CaughtUpLine:
    return {"v": 1, "op": "caught_up", "through": through}


# ------------------------------------------------------------ reading


def parse_line(raw: object) -> JournalLine:
    """One stored object as its typed line; :class:`MalformedLine` if it is none of them."""
    if not isinstance(raw, dict):
        raise MalformedLine("not a JSON object")
    if raw.get("v") != VERSION:
        raise MalformedLine(f"not a version {VERSION} line")
    op = raw.get("op")
    parse = _PARSERS.get(op) if isinstance(op, str) else None
    if parse is None:
        raise MalformedLine("no known op")
    return parse(_Fields(str(op), raw))


class _Fields:
    """One raw line's fields, each taken as the type its kind stores (a wrong one is a :class:`MalformedLine`)."""

    def __init__(self, op: str, raw: Mapping[str, object]) -> None:
        self.op = op
        self.raw = raw

    def _bad(self, key: str, what: str) -> MalformedLine:
        return MalformedLine(f"{self.op} line: {key} {what}")

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def id(self, key: str = "id") -> str:
        value = self.raw.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise self._bad(key, "is not an id")

    def text(self, key: str) -> str:
        value = self.raw.get(key)
        if not isinstance(value, str):
            raise self._bad(key, "is not a string")
        return value

    def number(self, key: str) -> float:
        value = self.raw.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise self._bad(key, "is not a number")

    def count(self, key: str) -> int:
        value = self.raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise self._bad(key, "is not a count")

    def wire(self, key: str) -> Wire:
        value = self.raw.get(key)
        if not isinstance(value, dict):
            raise self._bad(key, "is not an object")
        return value

    def ids(self, key: str) -> list[str]:
        value = self.raw.get(key)
        if not isinstance(value, list):
            raise self._bad(key, "is not a list")
        out: list[str] = []
        for item in value:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, int) and not isinstance(item, bool):
                out.append(str(item))
            else:
                raise self._bad(key, "holds something that is not an id")
        return out

    def outcome(self) -> str:
        value = self.text("outcome")
        if value not in OUTCOMES:
            raise self._bad("outcome", "is not an outcome")
        return value


def _admit(f: _Fields) -> AdmitLine:
    submit = f.wire("submit")
    if not isinstance(submit.get("room"), dict):
        raise MalformedLine("admit line: submit has no room")
    line = admit_line(f.id(), f.number("at"), f.text("fp"), submit, catching_up=f.raw.get("catch_up") is True,
                      folds=tuple(f.ids("folds")) if f.has("folds") else (),
                      paced=f.text("paced") if f.has("paced") else None)
    return line


def _wait(f: _Fields) -> WaitLine:
    op: Literal["buffer", "wait"] = "wait" if f.op == "wait" else "buffer"
    return wait_line(op, f.id(), f.number("at"), f.text("fp"), f.wire("room"), f.wire("inbound"), f.wire("trigger"),
                     paced=f.text("paced") if f.has("paced") else None)


def _close(f: _Fields) -> CloseLine:
    return close_line(f.id(), f.outcome(), f.number("at") if f.has("at") else 0.0,
                      code=f.text("code") if f.has("code") else None,
                      message_ids=tuple(f.ids("mids")) if f.has("mids") else ())


def _closed(f: _Fields) -> ClosedLine:
    return closed_line(f.id(), f.number("at"), f.text("fp"), f.wire("room"), f.outcome(),
                       f.count("replied") if f.has("replied") else 0,
                       f.number("closed_at") if f.has("closed_at") else 0.0)


def _gap(f: _Fields) -> GapLine:
    return gap_line(f.number("since"))


def _caught_up(f: _Fields) -> CaughtUpLine:
    return caught_up_line(f.number("through"))


_PARSERS: dict[str, Callable[[_Fields], JournalLine]] = {
    "admit": _admit, "buffer": _wait, "wait": _wait, "close": _close, "closed": _closed, "gap": _gap,
    "caught_up": _caught_up,
}
