"""The secrets' values, in every form they are easily copied in, kept out of every text that leaves a process (pure).

Each process redacts the secrets *it holds*, at the point its text leaves it
(``docs/operations.md``, "Secrets never leave in words"):

- the service holds the Anthropic key: it redacts it from every tool result
  before the model (and the session tree) sees it, and from every text it
  hands the bridge (the reply, a text update, a tool card's host);
- the bridge holds the Discord token: it redacts it from every reply before
  it is cut into messages, and again from every message and edit it sends;
- every process redacts what it holds from its own log lines (the formatter's
  whole line, a traceback included).

The bridge never holds the Anthropic key and needs no copy or fingerprint of
it: every text it posts comes from the service, which redacted the key before
the text left. The service never holds the Discord token, yet a privileged
shell could read it: the bridge redacts it before anything is posted.

**The forms.** A secret is found as its exact value and as a copy a shell or a
model makes in one step (:class:`Forms`):

- hex of its bytes, lower or upper case;
- base64 of its bytes, standard or URL-safe alphabet, padded or not, at any
  of the three alignments it can have inside a longer encoded text (the
  characters fully determined by the secret's bytes at that alignment);
- URL-encoded (any of its characters as ``%XX``, either case);
- any of these with whitespace (spaces, tabs, line breaks) between any two
  characters: a value split into words or wrapped over lines (``base64``
  wraps at 76 columns).

A hex or base64 copy is replaced together with the rest of its run of
encoding characters (and a base64 copy's padding), so no stub of it is left.

**Fast.** The common text holds no secret, and is judged by C-speed substring
searches over three views of it: whitespace removed, that lower-cased (hex and
``%XX`` in either case), and with ``-``/``_`` read as ``+``/``/`` (URL-safe
base64); and, only when it holds a ``%``, that percent-decoded. Only a text in
which a form is found is rewritten, by one regular expression that allows
whitespace between any two characters of a form.

A value shorter than :data:`MIN_SECRET` characters is not redacted (it would
blank ordinary words); no real token or key is that short.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import unquote

from pydantic import SecretStr

REDACTED = "[redacted]"
MIN_SECRET = 8

_B64_RUN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_HEX_RUN = frozenset("0123456789abcdefABCDEF")
_GAP = r"\s*"
_ASCII_SPACE = {c: None for c in range(128) if chr(c).isspace()}


class _HasSecrets(Protocol):
    @property
    def discord_token(self) -> SecretStr | None: ...

    @property
    def anthropic_api_key(self) -> SecretStr | None: ...


def base64_cores(data: bytes) -> tuple[str, ...]:
    """The standard-alphabet base64 characters ``data`` fixes at each of its three alignments in a longer text.

    At alignment ``k`` the secret follows ``k`` unknown bytes: the characters that hold a bit of those bytes
    (none, two or three) are dropped, and so are those of a last group the following bytes would complete.
    """
    cores = []
    for k in range(3):
        whole = (k + len(data)) // 3 * 3  # the bytes of complete groups
        encoded = base64.b64encode((b"\0" * k + data)[:whole]).decode("ascii")
        cores.append(encoded[(0, 2, 3)[k]:])
    return tuple(c for c in cores if c)


@dataclass(frozen=True, slots=True)
class Forms:
    """One secret's forms as the fast searches look for them (:func:`forms`)."""

    exact: str  # without whitespace: the views searched have none, and a match may have any between characters
    hex: str  # lower case
    base64: tuple[str, ...]  # standard alphabet, one per alignment


def forms(secret: str) -> Forms:
    data = secret.encode("utf-8")
    return Forms("".join(secret.split()), binascii.hexlify(data).decode("ascii"), base64_cores(data))


def _spaced(units: Iterable[str]) -> str:
    """A pattern of ``units`` (each already a pattern) with whitespace allowed between any two."""
    return _GAP.join(units)


def _char(c: str) -> str:
    """One character of the secret: itself or its ``%XX`` (UTF-8 bytes, either case)."""
    escaped = "".join(f"%{b:02x}" for b in c.encode("utf-8"))
    return f"(?:{re.escape(c)}|(?i:{re.escape(escaped)}))"


_B64_CHAR = {"+": r"(?:[+\-]|%2[bB])", "/": r"(?:[/_]|%2[fF])"}


Kind = Literal["x", "h", "b"]
"""A form's kind: ``x`` the value itself (spaced, URL-encoded), ``h`` hex, ``b`` base64."""


def _pattern(f: Forms, kind: Kind) -> str:
    """One secret's forms of one kind, whitespace allowed between any two characters."""
    if kind == "x":
        return _spaced(_char(c) for c in f.exact)
    if kind == "h":
        return "(?i:" + _spaced(f.hex) + ")"
    return "|".join(_spaced(_B64_CHAR.get(c, c) for c in core) for core in f.base64)


class Redactor:
    """Replaces every occurrence of a secret, in any of its forms (module docstring), with :data:`REDACTED`."""

    __slots__ = ("_forms", "_patterns", "_secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = {s.strip() for s in secrets if len(s.strip()) >= MIN_SECRET}
        # longest first: a secret that contains another is replaced whole
        self._secrets = tuple(sorted(kept, key=len, reverse=True))
        self._forms = tuple(forms(s) for s in self._secrets)
        self._patterns: dict[tuple[int, Kind], re.Pattern[str]] = {}  # each compiled at the first text holding it

    @classmethod
    def of(cls, settings: _HasSecrets) -> Redactor:
        """The secrets this process's settings hold (a child holds only those the supervisor handed it)."""
        values = [settings.discord_token, settings.anthropic_api_key]
        secret_of = getattr(settings, "route_secret", None)  # a fallback model route's secret, where this process holds one
        if secret_of is not None:
            values += [secret_of(r.name) for r in getattr(settings, "model_routes", ())]
        password_of = getattr(settings, "postgres_password", None)  # the PostgreSQL DSN's password (CLANKIE_STORE=postgres)
        if password_of is not None:
            values.append(password_of())
        return cls(v.get_secret_value() for v in values if v is not None)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __call__(self, text: str) -> str:
        hits = self._hits(text)
        return self._rewrite(text, hits) if hits else text

    def found(self, text: str) -> bool:
        """Whether ``text`` holds any secret in any of its forms."""
        return bool(self._hits(text))

    def _hits(self, text: str) -> list[tuple[int, Kind]]:
        """Which secrets' forms of which kinds ``text`` holds, by substring searches over its flat views."""
        if not self._forms:
            return []
        # translate is the faster way for ASCII text (str.split's whitespace there is exactly _ASCII_SPACE)
        flat = text.translate(_ASCII_SPACE) if text.isascii() else "".join(text.split())
        lower = flat.lower()
        alphabet = flat.replace("-", "+").replace("_", "/")
        decoded = unquote(flat) if "%" in flat else ""
        hits: list[tuple[int, Kind]] = []
        for i, f in enumerate(self._forms):
            if f.exact in flat or (decoded and f.exact in decoded):
                hits.append((i, "x"))
            if f.hex in lower:
                hits.append((i, "h"))
            if any(core in alphabet or (decoded and core in decoded) for core in f.base64):
                hits.append((i, "b"))
        return hits

    def _rewrite(self, text: str, hits: list[tuple[int, Kind]]) -> str:
        spans: list[tuple[int, int, Kind]] = []
        for i, kind in hits:
            pattern = self._patterns.get((i, kind))
            if pattern is None:
                pattern = self._patterns[(i, kind)] = re.compile(_pattern(self._forms[i], kind))
            spans.extend((m.start(), m.end(), kind) for m in pattern.finditer(text))
        out: list[str] = []
        done = 0  # text[:done] is written to out
        for start, end, kind in sorted(spans, key=lambda span: (span[0], -span[1])):
            if kind != "x":  # an encoded copy: its whole run of encoding characters goes
                run = _B64_RUN if kind == "b" else _HEX_RUN
                while start > done and text[start - 1] in run:
                    start -= 1
                while end < len(text) and text[end] in run:
                    end += 1
                if kind == "b":
                    while end < len(text) and text[end] == "=":
                        end += 1
            if end <= done:  # inside what an earlier copy took
                continue
            out.append(text[done:max(start, done)])
            out.append(REDACTED)
            done = end
        out.append(text[done:])
        return "".join(out)


NOTHING = Redactor()
"""Redacts nothing: a process that holds no secret."""
