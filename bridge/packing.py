"""A waiting message as the journal's state holds it in memory: only what its entry does not already say (pure).

A message waiting for a turn slot or a catch-up is journaled whole (``inbound``
and ``trigger`` as the wire has them, :mod:`bridge.journal`) and held in memory
until its turn is built. Most of that payload repeats itself or its entry: the
message id, the room and the author's id appear two or three times, the text
twice, and most flags are at their defaults. :func:`pack` leaves out every
value that :func:`unpack` can put back exactly: a value equal to its entry's
(id, room), to the trigger's (author, text), or to the field's default. What is
left is one compact JSON line; at a crowd of thousands waiting, it is what
memory holds per message (issue 25: an index entry, not the turn).

The journal file is not changed by this: it keeps the whole payload, and
:func:`unpack` gives back the same dicts the line had, up to fields at their
defaults, which read back as the same :class:`~bridge.inbound.Inbound` and
:class:`~clankie.protocol.Trigger`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TypedDict

from bridge.inbound import Inbound
from bridge.journal_lines import Wire
from clankie.protocol import Author, Room, Trigger


class Payload(TypedDict):
    """A waiting message as its journal line stores it: its ``Inbound`` and its ``Trigger``, each in wire form."""

    inbound: Wire
    trigger: Wire


_INBOUND_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Inbound) if f.default is not dataclasses.MISSING}
_TRIGGER_DEFAULTS = {name: f.default for name, f in Trigger.model_fields.items() if not f.is_required() and f.default_factory is None}
_AUTHOR_DEFAULTS = {name: f.default for name, f in Author.model_fields.items() if not f.is_required() and f.default_factory is None}


def _same(value: object, default: object) -> bool:
    """Equal, with a list and a tuple of the same items alike (the wire writes a tuple as a list)."""
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    return type(value) is type(default) and bool(value == default)


def _without(data: Mapping[str, object], given: Mapping[str, object]) -> Wire:
    """``data`` without the keys whose value ``given`` already holds."""
    return {k: v for k, v in data.items() if not (k in given and _same(v, given[k]))}


def pack(delivery_id: str, room: Room, payload: Payload) -> bytes:
    """The waiting message ``payload`` (``inbound``, ``trigger``) of the entry ``delivery_id`` in ``room``, compact."""
    trigger = dict(payload["trigger"])
    inbound = payload["inbound"]
    author = trigger.get("author")
    if isinstance(author, dict):
        trigger["author"] = _without(author, _AUTHOR_DEFAULTS)
    out = {"i": _without(inbound, {**_INBOUND_DEFAULTS, **_known(delivery_id, room, trigger)}),
           "t": _without(trigger, {**_TRIGGER_DEFAULTS, "message_id": delivery_id})}
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def unpack(delivery_id: str, room: Room, packed: bytes) -> Payload:
    """The payload :func:`pack` was given, as the wire spells it (``inbound``, ``trigger``)."""
    data = json.loads(packed)
    trigger: Wire = {"message_id": delivery_id, **data["t"]}
    author = trigger.get("author")
    if isinstance(author, dict):
        trigger["author"] = {**_wire(_AUTHOR_DEFAULTS), **author}
    inbound = {**_wire(_INBOUND_DEFAULTS), **_known(delivery_id, room, trigger), **data["i"]}
    return {"inbound": inbound, "trigger": {**_wire(_TRIGGER_DEFAULTS), **trigger}}


def _known(delivery_id: str, room: Room, trigger: Mapping[str, object]) -> Wire:
    """The inbound values its entry and trigger already hold (a value kept because it differs wins over these)."""
    author = trigger.get("author")
    return {"message_id": delivery_id, "channel_id": room.channel_id, "guild_id": room.guild_id,
            "author_id": author.get("id") if isinstance(author, dict) else None, "text": trigger.get("text")}


def _wire(defaults: Mapping[str, object]) -> Wire:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
