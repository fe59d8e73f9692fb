"""What a user message carries: text plus optional images, as API content blocks.

Messages are kept as plain JSON-able dicts in the Anthropic wire shape, because
they are written to the session tree and sent to the API unchanged.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clankie.errors import ClankieError

Message = dict[str, Any]
"""One conversation message in the Anthropic shape: ``{"role", "content": [blocks]}``."""

Block = dict[str, Any]
"""One content block (``text``, ``image``, ``tool_use``, ``tool_result``, ``thinking`` …)."""

IMAGE_MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


class UnsupportedImage(ClankieError, ValueError):
    """Raised when an attachment path is not an image type the model accepts (the caller's fault)."""


@dataclass(frozen=True, kw_only=True)
class UserMessage:
    """One inbound message: its text and the local image files that ride with it."""

    text: str
    images: tuple[Path, ...] = field(default=())

    def blocks(self) -> list[Block]:
        """The content blocks for this message: images first, then the text."""
        out: list[Block] = [image_block(path) for path in self.images]
        if self.text or not out:
            out.append({"type": "text", "text": self.text})
        return out


def image_block(path: Path) -> Block:
    """A base64 image block read from ``path``; the media type comes from the suffix."""
    media_type = IMAGE_MEDIA_TYPES.get(path.suffix.lower())
    if media_type is None:
        raise UnsupportedImage(f"not an image type the model accepts: {path.suffix!r}")
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def as_user_message(message: UserMessage | str) -> UserMessage:
    """Accept a bare string where a :class:`UserMessage` is expected."""
    return UserMessage(text=message) if isinstance(message, str) else message


def text_of(content: list[Block]) -> str:
    """The concatenated text blocks of an assistant message."""
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def tool_uses(content: list[Block]) -> list[Block]:
    """The ``tool_use`` blocks of an assistant message, in source order."""
    return [b for b in content if b.get("type") == "tool_use"]
