"""The secrets' exact values, kept out of every text that leaves a process (pure).

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

A value shorter than :data:`MIN_SECRET` characters is not redacted (it would
blank ordinary words); no real token or key is that short.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from pydantic import SecretStr

REDACTED = "[redacted]"
MIN_SECRET = 8


class _HasSecrets(Protocol):
    @property
    def discord_token(self) -> SecretStr | None: ...

    @property
    def anthropic_api_key(self) -> SecretStr | None: ...


class Redactor:
    """Replaces every exact occurrence of a secret with :data:`REDACTED`."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = {s.strip() for s in secrets if len(s.strip()) >= MIN_SECRET}
        # longest first: a secret that contains another is replaced whole
        self._secrets = tuple(sorted(kept, key=len, reverse=True))

    @classmethod
    def of(cls, settings: _HasSecrets) -> Redactor:
        """The secrets this process's settings hold (a child holds only those the supervisor handed it)."""
        values = [settings.discord_token, settings.anthropic_api_key]
        secret_of = getattr(settings, "route_secret", None)  # a fallback model route's secret, where this process holds one
        if secret_of is not None:
            values += [secret_of(r.name) for r in getattr(settings, "model_routes", ())]
        return cls(v.get_secret_value() for v in values if v is not None)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def found(self, text: str) -> bool:
        """Whether ``text`` holds any secret's exact value."""
        return any(secret in text for secret in self._secrets)


NOTHING = Redactor()
"""Redacts nothing: a process that holds no secret."""
