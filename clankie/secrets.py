"""How a secret travels from the supervisor to the one child that needs it.

The supervisor alone reads the secrets (``DISCORD_TOKEN`` /
``ANTHROPIC_API_KEY`` or the systemd credentials in
``$CREDENTIALS_DIRECTORY``). It hands a child only the secrets its spec
names, on a one-shot pipe: the JSON is written and the write end closed
before the spawn, the child inherits the read end as ``CLANKIE_SECRETS_FD``,
reads it to EOF and closes it in its ``main``. So a secret is never in any
child's environment (``/proc/<pid>/environ``), and a host, Chromium or Node
process never holds one at all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from clankie.errors import ConfigError

SECRETS_FD_ENV = "CLANKIE_SECRETS_FD"

VARIABLE = {"discord_token": "DISCORD_TOKEN", "anthropic_api_key": "ANTHROPIC_API_KEY", "postgres_dsn": "CLANKIE_POSTGRES_DSN"}
"""Secret field -> the environment variable an operator may set for it."""

SECRET_VARIABLES = frozenset(
    {*VARIABLE.values(), "CLANKIE_DISCORD_TOKEN", "CLANKIE_ANTHROPIC_API_KEY", "CREDENTIALS_DIRECTORY", SECRETS_FD_ENV}
)
"""Variables that never reach a child's environment (the supervisor's own handover fd included)."""

ROUTE_PREFIX = "route:"
"""A handed-over field ``route:NAME`` is a fallback model route's secret, held in variable or credential ``NAME``
(``CLANKIE_MODEL_ROUTES``); the child that gets the model key gets these too."""

MAX_HANDOVER = 16384
"""Far below a pipe's 64 KiB buffer, so writing before the spawn can never block."""


def hand_over(values: Mapping[str, str]) -> int:
    """A pipe read end (close-on-exec, caller makes it inheritable for one spawn) that yields ``values``."""
    unknown = {k for k in values if k not in VARIABLE and not k.startswith(ROUTE_PREFIX)}
    if unknown:
        raise ValueError(f"not a secret: {sorted(unknown)}")
    data = json.dumps(dict(values)).encode("utf-8")
    if len(data) > MAX_HANDOVER:
        raise ConfigError(f"the secrets are over {MAX_HANDOVER} bytes; is a credential file the wrong one?")
    read_end, write_end = os.pipe()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def receive(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with the handed-over secrets merged in, as the usual variable names.

    The copy lives only in this process's memory (``os.environ`` is not
    touched); the fd is read to EOF and closed. Without ``CLANKIE_SECRETS_FD``
    the copy is ``env`` as it was (a process started by hand).
    """
    out = {k: v for k, v in env.items() if k != SECRETS_FD_ENV}
    raw = env.get(SECRETS_FD_ENV, "")
    if not raw.isdigit():
        return out
    fd = int(raw)
    chunks: list[bytes] = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            if sum(map(len, chunks)) > MAX_HANDOVER:
                raise ConfigError("the supervisor handed over more than a secret's worth of bytes")
    except OSError as exc:
        raise ConfigError(f"cannot read the secrets the supervisor handed over: {exc.strerror}") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        values = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        raise ConfigError("the secrets the supervisor handed over are not readable") from None
    if not isinstance(values, dict):
        raise ConfigError("the secrets the supervisor handed over are not readable")
    for field, value in values.items():
        if not isinstance(value, str) or not value:
            continue
        if field in VARIABLE:
            out[VARIABLE[field]] = value
        elif field.startswith(ROUTE_PREFIX) and field != ROUTE_PREFIX:
            out[field.removeprefix(ROUTE_PREFIX)] = value
    return out
