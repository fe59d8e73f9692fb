"""Records between the bridge and the service (``turn.submit``, ``history``, ``typing``, ``tool``, ``text_update``)."""

from __future__ import annotations

import enum
from typing import assert_never

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


class TurnOutcome(enum.StrEnum):
    """How a turn ended. The value is the wire string (``TurnResult.outcome``, journal and receipt lines).

    The predicates are the one place that says what each outcome means for the room; code reads them
    (or ``match``es on the member with ``assert_never``) and never compares outcome strings.
    """

    SETTLED = "settled"  # the turn answered with a reply of its own
    SILENT = "silent"  # the captain chose not to answer
    ABSORBED = "absorbed"  # folded into another turn's answer (a steered message, a catch-up's fold)
    FAILED = "failed"  # the turn could not be run or finished; ``TurnResult.code`` says why

    @property
    def answered(self) -> bool:
        """The room got an answer to this message: ``settled``, or ``absorbed`` into a turn that answered.

        Engagement resets on it (:meth:`bridge.admission.Ingress.settle`), and a message folded into the
        turn is closed with :attr:`folded`."""
        match self:
            case TurnOutcome.SETTLED | TurnOutcome.ABSORBED:
                return True
            case TurnOutcome.SILENT | TurnOutcome.FAILED:
                return False
            case unreachable:
                assert_never(unreachable)

    @property
    def visible(self) -> bool:
        """The turn posts something in the room itself: only ``settled``, whose reply the bridge delivers.

        ``absorbed`` is answered by another turn's post, ``silent`` posts nothing, and ``failed`` posts
        nothing either (an addressed failure gets the failure reaction on its trigger,
        :mod:`bridge.reaction`, which is not a message)."""
        match self:
            case TurnOutcome.SETTLED:
                return True
            case TurnOutcome.SILENT | TurnOutcome.ABSORBED | TurnOutcome.FAILED:
                return False
            case unreachable:
                assert_never(unreachable)

    @property
    def folded(self) -> TurnOutcome:
        """The outcome of a buffered message this turn folded in: ``absorbed`` when the turn answered, else the
        turn's own (a fold of a silent turn is silent, of a failed one failed)."""
        return TurnOutcome.ABSORBED if self.answered else self


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
    """How a turn ended: a tagged union on ``outcome`` (a :class:`TurnOutcome`), flat on the wire.

    ``text``/``media`` only for ``settled``; ``code`` always for ``failed``, and on ``settled`` or ``absorbed``
    only to say why an answer was cut short (``captain_run_budget_exceeded``: the run stopped at a run cap and
    its words so far are the reply), never on ``silent``. Producers build one
    through its kind's constructor (:meth:`settled`, :meth:`silent`, :meth:`absorbed`, :meth:`failed`), which
    cannot mix the fields up; consumers read :attr:`outcome`'s predicates, or branch with ``match`` on it or
    on :attr:`kind` (one typed record per outcome, when the branch needs the kind's fields) and
    ``assert_never``, so a fifth outcome fails the type check where it is not handled.
    """

    outcome: TurnOutcome
    turn_id: str | None = None
    text: str = ""
    media: tuple[str, ...] = ()
    code: str | None = None

    @model_validator(mode="after")
    def _fields_fit_the_outcome(self) -> TurnResult:
        if self.outcome is TurnOutcome.FAILED and self.code is None:
            raise ValueError("a failed outcome carries a code")
        if self.outcome is TurnOutcome.SILENT and self.code is not None:
            raise ValueError("a silent outcome carries no code")
        if self.outcome is not TurnOutcome.SETTLED and (self.text or self.media):
            raise ValueError("only a settled turn carries text or media")
        return self

    @classmethod
    def settled(cls, text: str, media: tuple[str, ...] = (), *, turn_id: str | None = None,
                code: str | None = None) -> TurnResult:
        """The turn answered with ``text`` and the refs of its ``media``; ``code`` if the answer was cut short."""
        return cls(outcome=TurnOutcome.SETTLED, turn_id=turn_id, text=text, media=media, code=code)

    @classmethod
    def silent(cls, *, turn_id: str | None = None) -> TurnResult:
        """The captain chose not to answer."""
        return cls(outcome=TurnOutcome.SILENT, turn_id=turn_id)

    @classmethod
    def absorbed(cls, *, turn_id: str | None = None, code: str | None = None) -> TurnResult:
        """The message was folded into another turn's answer; ``code`` if that answer was cut short."""
        return cls(outcome=TurnOutcome.ABSORBED, turn_id=turn_id, code=code)

    @classmethod
    def failed(cls, code: str, *, turn_id: str | None = None) -> TurnResult:
        """The turn failed with a wire ``code`` (``clankie.protocol.Code``)."""
        return cls(outcome=TurnOutcome.FAILED, turn_id=turn_id, code=code)

    @property
    def kind(self) -> TurnKind:
        match self.outcome:
            case TurnOutcome.SETTLED:
                return TurnSettled(text=self.text, media=self.media)
            case TurnOutcome.SILENT:
                return TurnSilent()
            case TurnOutcome.ABSORBED:
                return TurnAbsorbed()
            case TurnOutcome.FAILED:
                return TurnFailed(code=self.code or "")
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
