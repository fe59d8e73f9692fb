"""The secrets' exact values are replaced wherever they appear; a log line never carries one."""

from __future__ import annotations

import io
import logging

from pydantic import SecretStr

from clankie import logs
from clankie.redact import MIN_SECRET, NOTHING, REDACTED, Redactor
from clankie.settings import load

TOKEN = "MTA5.fake-discord-token.xyz"
KEY = "sk-ant-api03-" + "k" * 40


def test_every_occurrence_of_every_secret_is_replaced() -> None:
    """Both secrets, several times, glued to other text: each becomes the marker, the rest is untouched."""
    redact = Redactor([TOKEN, KEY])
    assert redact(f"a{TOKEN}b {KEY}\n{KEY}") == f"a{REDACTED}b {REDACTED}\n{REDACTED}"
    assert redact("nothing secret here") == "nothing secret here"
    assert redact.found(f"x{KEY}x") and not redact.found(KEY[:-1])


def test_a_secret_containing_another_is_replaced_whole() -> None:
    """Longest first: the longer secret is not left half-redacted around the shorter one."""
    redact = Redactor(["abcdefgh", "abcdefgh-and-more"])
    assert redact("abcdefgh-and-more") == REDACTED


def test_short_or_empty_values_redact_nothing() -> None:
    """A value under MIN_SECRET characters would blank ordinary words: it is not a secret worth a marker."""
    redact = Redactor(["", "   ", "x" * (MIN_SECRET - 1)])
    assert not redact and redact("xxxxxxx") == "xxxxxxx"
    assert not NOTHING


def test_of_settings_takes_the_secrets_this_process_holds(env: dict[str, str]) -> None:
    """The Discord token and the Anthropic key from settings; a child without them redacts nothing."""
    settings = load({**env, "DISCORD_TOKEN": TOKEN, "ANTHROPIC_API_KEY": KEY})
    assert Redactor.of(settings)(f"{TOKEN}/{KEY}") == f"{REDACTED}/{REDACTED}"
    assert not Redactor.of(settings.model_copy(update={"discord_token": None, "anthropic_api_key": SecretStr("")}))


def test_log_lines_and_tracebacks_never_carry_a_secret() -> None:
    """The formatter redacts the whole line: the message, its arguments and an exception's traceback."""
    stream = io.StringIO()
    logs.configure("test", "INFO", journald=False, redact=Redactor([KEY]))
    root = logging.getLogger()
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]  # configure() installs a StreamHandler
    log = logging.getLogger("test.redact")
    log.info("calling with %s", KEY)
    try:
        raise ValueError(f"bad key {KEY}")
    except ValueError:
        log.exception("failed")
    out = stream.getvalue()
    assert KEY not in out
    assert out.count(REDACTED) == 2 and "ValueError: bad key [redacted]" in out
