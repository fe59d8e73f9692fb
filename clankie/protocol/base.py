"""Base of every wire record, and the records every connection shares."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    """Base of every wire record: frozen, no unknown keys.

    Each record builds its validator and serializer on first use, not at import (``defer_build``): a process uses a
    few of the 55 (a host, a fixture child: its hello and heartbeat), and building all of them was ~40 ms of every
    process's start. :func:`build_records` builds them all at once where the first message must not pay for it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def to_wire(self) -> dict[str, Any]:
        """The record as plain msgpack-able data (what ``model_dump`` gives, minus its overhead)."""
        wire: dict[str, Any] = self.__pydantic_serializer__.to_python(self)
        return wire


class Empty(Record):
    """A request or reply with nothing to say."""


class Hello(Record):
    """First message on every connection. A supervised child also says which
    attachment root it derived, so the supervisor can prove writers and readers agree."""

    role: str = Field(min_length=1, max_length=32)
    pid: int = Field(ge=0)
    protocol: int
    attachment_root: str | None = Field(default=None, max_length=4096)


def build_records() -> None:
    """Build every record's validator and serializer now (a warm start: its first message then builds nothing)."""
    pending: list[type[Record]] = [Record]
    while pending:
        cls = pending.pop()
        cls.model_rebuild()
        pending.extend(cls.__subclasses__())
