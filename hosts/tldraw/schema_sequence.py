"""The ``draw_sequence_diagram`` request: strict schema, limits, typed result.

Request shape (plain dict, as decoded from msgpack)::

    {"title"?: str,
     "participants": [{"name": str}],
     "messages": [{"from": str, "to": str, "text"?: str,
                   "kind"?: "sync" | "async" | "reply"}]}

Messages are drawn top to bottom in list order; ``kind`` defaults to sync.
A message from a participant to itself is drawn as a loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import read_choice, read_list, read_mapping, read_text
from .errors import DiagramInvalid

__all__ = ["MESSAGE_KINDS", "Message", "SequenceDiagram", "SequenceLimits", "parse_sequence"]

MESSAGE_KINDS = ("sync", "async", "reply")


@dataclass(frozen=True, slots=True)
class SequenceLimits:
    """Size limits for one sequence request (counts and characters)."""

    participants: int = 16
    messages: int = 120
    name_chars: int = 48
    text_chars: int = 120
    title_chars: int = 120


@dataclass(frozen=True, slots=True)
class Message:
    """One arrow, by participant index."""

    source: int
    target: int
    text: str
    kind: str


@dataclass(frozen=True, slots=True)
class SequenceDiagram:
    """A validated sequence request."""

    title: str
    participants: tuple[str, ...]
    messages: tuple[Message, ...]


def parse_sequence(spec: object, limits: SequenceLimits | None = None) -> SequenceDiagram:
    """Validate ``spec`` and return the typed diagram, or raise a refusal."""
    lim = limits or SequenceLimits()
    top = read_mapping(spec, "request", required=("participants", "messages"), optional=("title",))
    title = read_text(top.get("title", ""), "title", max_chars=lim.title_chars, allow_empty=True)
    raw_parts = read_list(
        top["participants"], "participants", min_items=1, max_items=lim.participants
    )
    names: list[str] = []
    for i, raw in enumerate(raw_parts):
        path = f"participants[{i}]"
        item = read_mapping(raw, path, required=("name",))
        name = read_text(item["name"], f"{path}.name", max_chars=lim.name_chars)
        if name in names:
            raise DiagramInvalid(f"{path}.name: duplicate participant {name!r}")
        names.append(name)
    index = {name: i for i, name in enumerate(names)}
    raw_messages = read_list(top["messages"], "messages", min_items=1, max_items=lim.messages)
    messages = tuple(
        _message(raw, f"messages[{i}]", lim, index) for i, raw in enumerate(raw_messages)
    )
    return SequenceDiagram(title=title, participants=tuple(names), messages=messages)


def _message(raw: object, path: str, lim: SequenceLimits, index: dict[str, int]) -> Message:
    item = read_mapping(raw, path, required=("from", "to"), optional=("text", "kind"))
    ends: list[int] = []
    for end in ("from", "to"):
        name = read_text(item[end], f"{path}.{end}", max_chars=lim.name_chars)
        if name not in index:
            raise DiagramInvalid(f"{path}.{end}: no participant named {name!r}")
        ends.append(index[name])
    text = read_text(item.get("text", ""), f"{path}.text", max_chars=lim.text_chars, allow_empty=True)
    kind = read_choice(item.get("kind", "sync"), f"{path}.kind", MESSAGE_KINDS)
    return Message(source=ends[0], target=ends[1], text=text, kind=kind)
