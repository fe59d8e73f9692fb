"""Records between the bridge and the service (``turn.submit``, ``history``, ``typing``, ``tool``, ``text_update``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clankie.protocol.base import Record


class Room(Record):
    """A Discord text room: a guild channel, or a DM channel (``guild_id`` None)."""

    guild_id: str | None = Field(default=None, max_length=32)
    channel_id: str = Field(min_length=1, max_length=32)
    name: str = Field(default="", max_length=200)
    trusted: bool = False


class Author(Record):
    id: str = Field(min_length=1, max_length=32)
    name: str = Field(default="", max_length=200)
    is_bot: bool = False
    is_system_actor: bool = False


class ImageAttachment(Record):
    """An image a person attached; the service may fetch or skip it."""

    url: str = Field(max_length=2048)
    filename: str = Field(default="", max_length=256)
    content_type: str = Field(default="", max_length=100)
    size: int = Field(default=0, ge=0)


class Trigger(Record):
    message_id: str = Field(min_length=1, max_length=32)
    author: Author
    text: str = Field(max_length=8000)
    attachments: tuple[ImageAttachment, ...] = Field(default=(), max_length=10)
    unprompted: bool = False
    at: float = 0.0


class TurnSubmit(Record):
    """``turn.submit``: one admitted message becomes one turn (idempotent by delivery id)."""

    delivery_id: str = Field(min_length=1, max_length=128)
    room: Room
    trigger: Trigger
    # A catch-up turn answers a drifted room's buffered messages at once: the
    # trigger is the newest, these are the ones before it (oldest first).
    backlog: tuple[HistoryMessage, ...] = Field(default=(), max_length=50)


Outcome = Literal["settled", "silent", "absorbed", "failed"]


class TurnResult(Record):
    """How a turn ended. ``text``/``media`` only for ``settled``; ``code`` only for ``failed``."""

    outcome: Outcome
    turn_id: str | None = None
    text: str = ""
    media: tuple[str, ...] = ()
    code: str | None = None


class HistoryRequest(Record):
    """``history`` (service -> bridge): recent messages of a room, for a cold lane."""

    delivery_id: str = Field(max_length=128)
    room: Room
    before_message_id: str | None = None
    limit: int = Field(default=10, ge=0, le=50)


class HistoryMessage(Record):
    id: str
    author_id: str
    author_name: str = ""
    is_bot: bool = False
    is_self: bool = False
    text: str = ""
    at: float = 0.0
    # images the message carried (bridge-filtered like Trigger.attachments); the captain fetches only a backlog's
    attachments: tuple[ImageAttachment, ...] = Field(default=(), max_length=10)


class HistoryReply(Record):
    messages: tuple[HistoryMessage, ...] = ()


class TypingSignal(Record):
    """``typing`` (service -> bridge): content-free; light the delivery being held."""

    delivery_id: str = Field(max_length=128)


class ToolActivity(Record):
    """``tool`` (service -> bridge): content-free; one of the run owner's tool calls started or ended.

    Carries the tool's name and, for tools that open an address, its host name only: never arguments,
    never model text. The bridge turns it into the tool-activity card (docs/bridge.md).
    """

    delivery_id: str = Field(max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    tool: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    host: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.-]{1,253}$")
    active: bool = True  # False: this call ended


class TextUpdate(Record):
    """``text_update`` (service -> bridge): one short mid-turn message, threaded, no media."""

    delivery_id: str = Field(max_length=128)
    text: str = Field(min_length=1, max_length=600)


class TextUpdateReply(Record):
    message_id: str | None = None
