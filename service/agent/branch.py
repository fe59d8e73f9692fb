"""One session segment's branch: its path from the records its store read, the part the next request needs, a dead run's tail.

A segment (a file, or rows: :mod:`clankie.store.lane_ports`) is one branch: its path runs from the last entry back
along ``parent_id``; entries off that path (a tail cut by :func:`unfinished_tail`'s caller, half a line a crash tore)
are ignored. Everything here is pure: reading the records is the store's job.
"""

from __future__ import annotations

import logging
from typing import Any

from clankie.errors import ClankieError
from clankie.store.lane_ports import TreeUnreadable
from service.agent.transcript import Entry

log = logging.getLogger(__name__)

RUN_END = "run_end"  # the custom entry the agent writes as a run ends, whatever the outcome


class SessionCorrupt(ClankieError, TreeUnreadable):
    """Raised when a session file has no readable header: it is not a session tree."""


def last_model(entries: list[Entry]) -> str | None:
    for entry in reversed(entries):
        if entry["type"] == "model_change":
            return str(entry["model"])
    return None


def live_branch(entries: list[Entry]) -> list[Entry]:
    """The entries the next request needs: from the last compaction's first kept entry on."""
    for index in range(len(entries) - 1, -1, -1):
        if entries[index]["type"] == "compaction":
            kept = entries[index].get("first_kept_id")
            start = next((i for i in range(index) if entries[i]["id"] == kept), index)
            return entries[start:]
    return entries


def unfinished_tail(entries: list[Entry]) -> int | None:
    """Where the messages of a run that never ended begin in ``entries`` (a branch), or None if there are none.

    Every run ends with a ``run_end`` entry, whatever its outcome, and a lane
    runs one run at a time, so a message after the last ``run_end`` belongs to
    a run whose process died before it ended. Returns the index just after
    that ``run_end`` (0 if the branch has none).
    """
    start = next((i + 1 for i in range(len(entries) - 1, -1, -1) if _is_run_end(entries[i])), 0)
    if any(e["type"] == "message" for e in entries[start:]):
        return start
    return None


def _is_run_end(entry: Entry) -> bool:
    return entry["type"] == "custom" and entry.get("custom_type") == RUN_END


def branch_of(records: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], list[Entry]]:
    """The header and the root→leaf path of segment ``name``'s ``records`` (as its store read them, header first; a
    segment is one branch, branches elsewhere are ignored). Raises :class:`SessionCorrupt` without a header."""
    if not records or records[0].get("type") != "session":
        raise SessionCorrupt(f"{name} has no session header")
    entries = [e for e in records[1:] if isinstance(e.get("id"), str) and isinstance(e.get("type"), str)]
    if len(entries) < len(records) - 1:
        log.warning("session %s: skipping %d lines without an id or type", name, len(records) - 1 - len(entries))
    by_id = {e["id"]: e for e in entries}
    branch: list[Entry] = []
    current = entries[-1]["id"] if entries else None
    while current is not None:
        entry = by_id.pop(current, None)  # popped: a cycle cannot loop
        if entry is None:  # its line was unreadable, or it is in the previous file: the path starts after it
            break
        branch.append(entry)
        current = entry.get("parent_id")
    branch.reverse()
    return records[0], branch
