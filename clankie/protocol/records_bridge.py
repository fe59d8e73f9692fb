"""Records between the bridge and the service (``turn.submit``, ``history``, ``typing``, ``tool``, ``text_update``)."""

from __future__ import annotations

from typing import Literal, assert_never

from pydantic import Field, model_validator

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


class TurnSettled(Record):
    """The turn answered: its reply text and the refs of its media."""

    text: str = ""
    media: tuple[str, ...] = ()


class TurnSilent(Record):
    """The captain chose not to answer."""


class TurnAbsorbed(Record):
    """The message was folded into another turn's answer."""


class TurnFailed(Record):
    """The turn failed with a wire code (``clankie.protocol.Code``)."""

    code: str


TurnKind = TurnSettled | TurnSilent | TurnAbsorbed | TurnFailed


class TurnResult(Record):
    """How a turn ended: a tagged union on ``outcome``, flat on the wire.

    ``text``/``media`` only for ``settled``; ``code`` only (and always) for ``failed``.
    Consumers branch on :attr:`kind` with ``match`` (one typed record per outcome) and
    ``assert_never``, so a fifth outcome fails the type check where it is not handled.
    """

    outcome: Outcome
    turn_id: str | None = None
    text: str = ""
    media: tuple[str, ...] = ()
    code: str | None = None

    @model_validator(mode="after")
    def _fields_fit_the_outcome(self) -> TurnResult:
        if (self.outcome == "failed") != (self.code is not None):
            raise ValueError("code is set exactly when the outcome is failed")
        if self.outcome != "settled" and (self.text or self.media):
            raise ValueError("only a settled turn carries text or media")
        return self

    @property
    def kind(self) -> TurnKind:
        match self.outcome:
            case "settled":
                return TurnSettled(text=self.text, media=self.media)
            case "silent":
                return TurnSilent()
            case "absorbed":
                return TurnAbsorbed()
            case "failed":
                return TurnFailed(code=self.code or "")
            case unreachable:
                assert_never(unreachable)

    @classmethod
    def of(cls, kind: TurnKind, turn_id: str | None = None) -> TurnResult:
        """The wire record for one kind."""
        match kind:
            case TurnSettled(text=text, media=media):
                return cls(outcome="settled", turn_id=turn_id, text=text, media=media)
            case TurnSilent():
                return cls(outcome="silent", turn_id=turn_id)
            case TurnAbsorbed():
                return cls(outcome="absorbed", turn_id=turn_id)
            case TurnFailed(code=code):
                return cls(outcome="failed", turn_id=turn_id, code=code)
            case unreachable:
                assert_never(unreachable)


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
