"""The secrets' exact values are replaced wherever they appear; a log line never carries one."""

from __future__ import annotations

import base64
import io
import logging
import urllib.parse

import pytest
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


# a token whose base64 holds "+" or "/" at every alignment, and whose URL-encoding differs from it
ODD = "MTA5ODc2.Gx7~yZ.q-Z9_wv8kLm0pYt3rS5uV?>"


def _encoded_copies(secret: str) -> dict[str, str]:
    """The copies a shell or a model makes of ``secret`` in one step, each as it would appear in a reply."""
    data = secret.encode()
    copies = {
        "hex": data.hex(),
        "HEX": data.hex().upper(),
        "url-encoded": urllib.parse.quote(secret, safe=""),
        "every byte %XX": "".join(f"%{b:02X}" for b in data),
        "every byte %xx": "".join(f"%{b:02x}" for b in data),
        "spaced": " ".join(secret[i:i + 5] for i in range(0, len(secret), 5)),
        "line-split": "\n".join(secret[i:i + 11] for i in range(0, len(secret), 11)),
        "hex, spaced": " ".join(data.hex()[i:i + 4] for i in range(0, len(data.hex()), 4)),
    }
    for k, prefix in enumerate((b"", b"x", b"xy")):  # the three alignments inside a longer encoded text
        for suffix in (b"", b"!", b"!?"):
            blob = prefix + data + suffix
            std, safe = base64.b64encode(blob).decode(), base64.urlsafe_b64encode(blob).decode()
            copies[f"base64 at {k}, {len(suffix)} after"] = std
            copies[f"base64 at {k}, {len(suffix)} after, unpadded"] = std.rstrip("=")
            copies[f"urlsafe base64 at {k}, {len(suffix)} after"] = safe
            copies[f"urlsafe base64 at {k}, {len(suffix)} after, unpadded"] = safe.rstrip("=")
    long = base64.b64encode(b"a header the secret follows, " + data + b" and a long tail " * 4).decode()
    copies["base64 wrapped at 76 columns"] = "\n".join(long[i:i + 76] for i in range(0, len(long), 76))
    copies["base64, URL-encoded"] = urllib.parse.quote(base64.b64encode(data).decode(), safe="")
    return copies


# every form of each secret that differs from it (a key of URL-safe characters URL-encodes to itself)
COPIES = [(s, form) for s in (KEY, TOKEN, ODD) for form, copy in sorted(_encoded_copies(s).items()) if copy != s]


@pytest.mark.parametrize(("secret", "form"), COPIES)
def test_each_encoded_copy_of_a_secret_is_redacted(secret: str, form: str) -> None:
    """Hex (either case), base64 (standard and URL-safe, padded or not, each alignment, wrapped), URL-encoded,
    spaced and line-split copies are all found and replaced; the words around them stay."""
    copy = _encoded_copies(secret)[form]
    redact = Redactor([secret, "an-unrelated-secret-value"])
    text = f"here it is: {copy}\nthat's all"
    assert redact.found(text)
    out = redact(text)
    assert out.startswith("here it is: ") and out.endswith("\nthat's all") and REDACTED in out
    assert copy not in out and not redact.found(out)
    flat = "".join(out.split())
    assert secret not in flat and secret.encode().hex() not in flat.lower()
    if "wrapped" not in form:  # (a wrapped blob's other lines are its header and tail, not the secret)
        for chunk in (copy.replace("\n", "")[i:i + 16] for i in range(0, len(copy) - 16, 8)):
            assert chunk not in flat  # no stretch of the copy is left beside the marker


def test_the_odd_token_exercises_the_urlsafe_and_percent_forms() -> None:
    """The test's token has '+' or '/' in its base64 at every alignment and characters URL-encoding changes, so
    the URL-safe and URL-encoded copies differ from the plain ones."""
    for prefix in (b"", b"x", b"xy"):
        blob = prefix + ODD.encode()
        assert base64.b64encode(blob) != base64.urlsafe_b64encode(blob)
    assert urllib.parse.quote(ODD, safe="") != ODD


@pytest.mark.parametrize("text", [
    "nothing secret here, just words and numbers 0123456789",
    base64.b64encode(b"some other blob of bytes " * 8).decode(),
    (b"unrelated " * 10).hex(),
    urllib.parse.quote("a query?with=odd&chars/and%more", safe=""),
    "MTA5ODc2.Gx7~yZ.q-Z9_wv8kLm0pYt3rS5u",  # the token cut short
    base64.b64encode(ODD[:20].encode()).decode(),  # half of it, encoded
    "MTA5 ODc2 .Gx7 ~yZ. q-Z9 _wv8 kLm0 pYt3 rS5u Wv?>",  # one character differs
])
def test_unrelated_strings_and_near_misses_are_left_alone(text: str) -> None:
    """Text that holds no secret in any form comes back unchanged (a partial or altered copy is not a copy)."""
    redact = Redactor([KEY, TOKEN, ODD])
    assert not redact.found(text) and redact(text) == text


def test_a_secret_with_whitespace_inside_is_found_as_it_is_and_spaced_otherwise() -> None:
    """A value holding a space (a passphrase) is found exactly, and with its whitespace changed."""
    redact = Redactor(["correct horse battery staple"])
    assert redact("pw: correct horse battery staple.") == f"pw: {REDACTED}."
    assert redact("pw: correct\nhorse  battery\tstaple.") == f"pw: {REDACTED}."


def test_text_around_many_copies_stays_and_each_copy_goes() -> None:
    """Several copies in several forms in one text: each replaced, the words between them kept in order."""
    redact = Redactor([ODD])
    data = ODD.encode()
    text = f"a {data.hex()} b {base64.b64encode(data).decode()} c {ODD} d"
    assert redact(text) == f"a {REDACTED} b {REDACTED} c {REDACTED} d"
