"""Small strict readers for plain-dict requests, with path-naming errors.

Every reader takes the value and a dotted ``path`` (``entities[2].name``) so a
refusal says exactly what was wrong where. Nothing here evaluates, formats or
interpolates request content into code; values are only inspected.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import DiagramInvalid, DiagramTooLarge

__all__ = [
    "read_bool",
    "read_choice",
    "read_list",
    "read_mapping",
    "read_text",
]

_WHITESPACE_RUN = re.compile(r"\s+")


def read_mapping(
    value: object, path: str, *, required: Sequence[str], optional: Sequence[str] = ()
) -> Mapping[str, Any]:
    """Return ``value`` as a mapping with exactly the allowed string keys."""
    if not isinstance(value, Mapping):
        raise DiagramInvalid(f"{path}: expected an object, got {_kind(value)}")
    allowed = set(required) | set(optional)
    for key in value:
        if not isinstance(key, str):
            raise DiagramInvalid(f"{path}: keys must be strings, got {_kind(key)}")
        if key not in allowed:
            names = ", ".join(sorted(allowed))
            raise DiagramInvalid(f"{path}: unknown key {key[:40]!r} (allowed: {names})")
    for key in required:
        if key not in value:
            raise DiagramInvalid(f"{path}: missing required key {key!r}")
    return value


def read_list(value: object, path: str, *, min_items: int, max_items: int) -> list[object]:
    """Return ``value`` as a list whose length is within the bounds."""
    if not isinstance(value, list | tuple):
        raise DiagramInvalid(f"{path}: expected a list, got {_kind(value)}")
    if len(value) < min_items:
        raise DiagramInvalid(f"{path}: needs at least {min_items} item(s), got {len(value)}")
    if len(value) > max_items:
        raise DiagramTooLarge(f"{path}: at most {max_items} items allowed, got {len(value)}")
    return list(value)


def read_text(value: object, path: str, *, max_chars: int, allow_empty: bool = False) -> str:
    """Return a one-line label: whitespace runs folded, no control characters.

    Control characters (including tab and newline), U+FFFE/U+FFFF and lone
    surrogates are refused: XML 1.0 cannot carry most of them, and a label is
    one line by contract.
    """
    if not isinstance(value, str):
        raise DiagramInvalid(f"{path}: expected a string, got {_kind(value)}")
    if len(value) > max_chars * 4:
        # Refuse absurd inputs before scanning them character by character.
        raise DiagramTooLarge(f"{path}: at most {max_chars} characters allowed")
    for position, char in enumerate(value):
        if char in "\t\n\r":
            continue  # folded to a space below
        if _forbidden(char):
            raise DiagramInvalid(
                f"{path}: forbidden character U+{ord(char):04X} at position {position}"
            )
    text = _WHITESPACE_RUN.sub(" ", value).strip()
    if not text and not allow_empty:
        raise DiagramInvalid(f"{path}: must not be empty")
    if len(text) > max_chars:
        raise DiagramTooLarge(f"{path}: at most {max_chars} characters allowed, got {len(text)}")
    return text


def read_choice(value: object, path: str, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices`` (exact, case-sensitive)."""
    if not isinstance(value, str) or value not in choices:
        shown = repr(value[:40]) if isinstance(value, str) else _kind(value)
        raise DiagramInvalid(f"{path}: expected one of {', '.join(choices)}; got {shown}")
    return value


def read_bool(value: object, path: str) -> bool:
    """Return ``value`` if it is a real boolean."""
    if not isinstance(value, bool):
        raise DiagramInvalid(f"{path}: expected true or false, got {_kind(value)}")
    return value


def _forbidden(char: str) -> bool:
    code = ord(char)
    if code in (0xFFFE, 0xFFFF) or 0xD800 <= code <= 0xDFFF:
        return True
    return unicodedata.category(char) == "Cc"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string"}.get(
        type(value), type(value).__name__
    )
