"""One Discord message as the bridge keeps it: the record, its fingerprint and its wire form (pure).

The shell (:mod:`bridge.discord_client`) builds an :class:`Inbound` from a
``discord.Message``; admission (:mod:`bridge.admission`) decides on it, the
journal stores it in its wire form (:meth:`Inbound.to_wire`), and recovery and
the turn packer read it back (:meth:`Inbound.from_wire`). The fingerprint is
what de-duplication and the journal compare to tell a re-delivery from a
different message under the same id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Inbound:
    """One Discord message, reduced to what admission needs."""

    message_id: str
    channel_id: str
    guild_id: str | None
    author_id: str
    text: str = ""
    author_is_bot: bool = False
    from_self: bool = False
    mentions_bot: bool = False
    replies_to_bot: bool = False  # a reply to one of his messages
    attachment_ids: tuple[str, ...] = ()
    readable_attachments: int = 0
    refers_to: str | None = None  # the message this one replies to (recovery reads our own replies by it)

    @property
    def fingerprint(self) -> str:
        """A stable digest of what makes this message this message (kept for de-duplication and journaled)."""
        body = [self.message_id, self.guild_id, self.channel_id, self.author_id, self.text, list(self.attachment_ids)]
        return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode("utf-8")).hexdigest()[:32]

    def to_wire(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, object]) -> Inbound:
        fields = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        ids = fields.get("attachment_ids", ())
        fields["attachment_ids"] = tuple(str(a) for a in ids) if isinstance(ids, (list, tuple)) else ()
        return cls(**fields)  # type: ignore[arg-type]  # wire values: the journal wrote them from an Inbound
