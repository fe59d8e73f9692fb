"""Splitting a reply into Discord-sized messages (pure).

Discord refuses message content over 2,000 characters. Upstream cut the reply
at 1,997 characters and added an ellipsis; here nothing is dropped. A long
reply is cut at the last line break in the window, else at the last
whitespace, else hard; a code fence left open at a cut is closed at the end
of that message and reopened (with its language tag) at the start of the
next, so every message renders on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DISCORD_LIMIT = 2000
FENCE = "```"
CLOSE = "\n" + FENCE
_LANG = re.compile(r"^[A-Za-z0-9_+.#-]{0,16}$")
PICTURE_NOTE = "(I couldn't attach the picture, so it's just my words this time.)"


@dataclass(frozen=True, slots=True)
class Piece:
    """One message: ``prefix + body + suffix``; bodies in order rebuild the text exactly."""

    prefix: str
    body: str
    suffix: str

    @property
    def content(self) -> str:
        return self.prefix + self.body + self.suffix


Mark = tuple[int, int, "str | None"]


def _fence_opens(text: str) -> list[Mark]:
    """For each fence line: (start, end, reopen line if it opens a block, else None)."""
    marks: list[Mark] = []
    open_line: str | None = None
    offset = 0
    for line in _lines(text):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            if open_line is None:
                lang = stripped[len(FENCE) :].strip()
                open_line = FENCE + (lang if _LANG.match(lang) else "")
                marks.append((offset, offset + len(line), open_line))
            else:
                open_line = None
                marks.append((offset, offset + len(line), None))
        offset += len(line)
    return marks


def _lines(text: str) -> list[str]:
    """Lines as Discord sees them: split on ``\n`` only, newline kept."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _looks_like_fence(text: str, at: int) -> bool:
    """Would a message starting at ``at`` begin with a fence it did not have in the text?"""
    if at == 0 or text[at - 1] == "\n":
        return False
    j = at
    while j < len(text) and text[j] in " \t":
        j += 1
    return text.startswith(FENCE, j)


def _open_at(marks: list[Mark], offset: int) -> str | None:
    """The fence block open just before ``offset`` (fence lines starting before it count)."""
    state: str | None = None
    for start, _end, opened in marks:
        if start >= offset:
            break
        state = opened
    return state


def _cut(window: str) -> int:
    """Where to end a window: after a line break, else after whitespace, else hard."""
    half = len(window) // 2
    nl = window.rfind("\n")
    if nl >= half:
        return nl + 1
    for i in range(len(window) - 1, half - 1, -1):
        if window[i].isspace():
            return i + 1
    return len(window)


def _outside_fence_line(marks: list[Mark], pos: int, end: int) -> int:
    """Never end a message inside a fence line: back up to the line's start when possible."""
    for start, stop, _opened in marks:
        if start < end < stop and start > pos:
            return start
    return end


def pieces(text: str, limit: int = DISCORD_LIMIT) -> list[Piece]:
    """Split ``text`` into pieces whose contents fit ``limit``; bodies join back to ``text``."""
    if limit < 64:
        raise ValueError("limit too small to carry fence markers")
    marks = _fence_opens(text)
    out: list[Piece] = []
    pos = 0
    while pos < len(text):
        reopen = _open_at(marks, pos)
        prefix = reopen + "\n" if reopen else ""
        rest = len(text) - pos
        tail_open = _open_at(marks, len(text))
        if len(prefix) + rest + (len(CLOSE) if tail_open else 0) <= limit:
            out.append(Piece(prefix, text[pos:], CLOSE if tail_open else ""))
            break
        budget = limit - len(prefix) - len(CLOSE)
        cut = _cut(text[pos : pos + budget])
        end = _outside_fence_line(marks, pos, pos + cut)
        while end > pos + 1 and _looks_like_fence(text, end):
            end -= 1
        out.append(Piece(prefix, text[pos:end], CLOSE if _open_at(marks, end) else ""))
        pos = end
    return out


def split_reply(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """The messages to post for ``text``, each ≤ ``limit`` characters; whitespace-only ones dropped."""
    return [p.content for p in pieces(text, limit) if p.body.strip()]


def with_picture_note(text: str) -> str:
    """Words first, then the note that the picture could not be attached."""
    words = text.rstrip()
    return f"{words}\n\n{PICTURE_NOTE}" if words else PICTURE_NOTE
