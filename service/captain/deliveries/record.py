"""One delivery record as the delivery log writes and reads it: a line's fields, and its reading into an index entry.

A line holds the delivery's whole current record (``delivery_id``,
``fingerprint``, ``accepted_at``, ``run``, ``crashed_runs``, ``result``, and
``tree`` while it names a run). :func:`fields` builds one; :func:`parse`
checks one read back and gives the :class:`Entry` the index keeps, never a
result's text. :func:`legacy_name` is the file name of the old
one-file-per-delivery format, still read at start-up. The segments, the
index and their bounds are :mod:`service.captain.deliveries.delivery_log`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)  # JSON, UTF-8 and shape errors alike


@dataclass(slots=True)
class Entry:
    """What the index keeps about one delivery: the rule's inputs and its latest line's place, never the text."""

    fingerprint: str
    accepted_at: float
    run: str | None
    crashed_runs: tuple[str, ...]
    settled: bool
    file: Path
    offset: int
    length: int
    tree: str | None = None  # the supervised tree of the process that ran ``run``


def legacy_name(delivery_id: str) -> str:
    """The file name the one-file-per-delivery format gave a delivery's record."""
    return hashlib.sha256(delivery_id.encode("utf-8")).hexdigest()[:40] + ".json"


def fields(delivery_id: str, fp: str, accepted_at: float, run: str | None, crashed_runs: tuple[str, ...],
           result: dict[str, Any] | None, tree: str | None = None) -> dict[str, Any]:
    """One line's record: everything about the delivery as it now stands (``tree`` only while it names a run)."""
    line = {"delivery_id": delivery_id, "fingerprint": fp, "accepted_at": accepted_at, "run": run,
            "crashed_runs": list(crashed_runs), "result": result}
    if tree is not None:
        line["tree"] = tree
    return line


def parse(data: Any, file: Path, offset: int, length: int) -> tuple[str, Entry]:
    """A record's delivery id and index entry; raises ValueError, KeyError, TypeError or AttributeError if malformed.

    Records from before runs were counted (``attempts``, no ``run``) read as
    never having joined a run; records from before trees were named (no
    ``tree``) name no tree, so their run is never charged. A result is only
    checked to be an object here; it is validated when it is read back.
    """
    did, fp, run, tree = data["delivery_id"], data["fingerprint"], data.get("run"), data.get("tree")
    crashed, result = data.get("crashed_runs", []), data.get("result")
    if not isinstance(did, str) or not isinstance(fp, str) or not all(v is None or isinstance(v, str) for v in (run, tree)):
        raise TypeError("ids must be strings")
    if not isinstance(crashed, list) or not all(isinstance(r, str) for r in crashed):
        raise TypeError("run ids must be strings")
    if not (result is None or isinstance(result, dict)):
        raise TypeError("a result is an object")
    accepted = float(data["accepted_at"])
    if not math.isfinite(accepted):
        raise ValueError("accepted_at is not a time")
    return did, Entry(fp, accepted, run, tuple(crashed), bool(result), file, offset, length, tree)
