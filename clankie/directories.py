"""Where the tree's directories are: state, runtime and attachments, read from an environment mapping.

Each reader takes the mapping (default: this process's environment) and
returns an absolute path; none raises for an unset or blank variable. They
need no settings, so ``clankiectl`` finds the runtime directory and a child
reports its own attachment root without loading any; :func:`clankie.settings.load`
fills the settings' three paths from them.

:func:`discord_attachment_root` is the **only** place the attachment root
is derived. Every process calls it; none computes the path on its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from clankie.paths import process_environment


def trimmed(env: Mapping[str, str], name: str) -> str | None:
    """The variable ``name`` in ``env``, stripped; ``None`` when it is unset or blank."""
    value = env.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return process_environment() if env is None else env


def _home(env: Mapping[str, str]) -> Path:
    home = trimmed(env, "HOME")
    if home:
        return Path(home)
    try:
        return Path.home()
    except (KeyError, RuntimeError):  # no HOME and no passwd entry
        return Path("/")


def _ours_or_systemds(e: Mapping[str, str], ours: str, systemds: str) -> str | None:
    """Our variable if set and not blank, else the first directory systemd lists in its own (``A:B`` for several)."""
    value = trimmed(e, ours)
    if value is None:
        listed = trimmed(e, systemds)
        value = listed.split(":")[0] if listed else None
    return value


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``CLANKIE_STATE``, else systemd's ``$STATE_DIRECTORY``, else ``~/.clankie``; absolute."""
    e = _env(env)
    value = _ours_or_systemds(e, "CLANKIE_STATE", "STATE_DIRECTORY")
    path = Path(value) if value else _home(e) / ".clankie"
    return Path(os.path.abspath(path.expanduser()))


def discord_attachment_root(env: Mapping[str, str] | None = None) -> Path:
    """The one attachment root: the override if set and not blank, else ``<state>/attachments``.

    Never raises for unset or blank variables and always returns an absolute
    path. A relative override is resolved against the current directory; the
    supervisor resolves it once and hands children the absolute path, so no
    two processes can read it differently.
    """
    e = _env(env)
    override = trimmed(e, "CLANKIE_DISCORD_ATTACHMENT_ROOT")
    if override is not None:
        return Path(os.path.abspath(Path(override).expanduser()))
    return state_dir(e) / "attachments"


def runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """``CLANKIE_RUNTIME_DIR``, ``$RUNTIME_DIRECTORY``, ``$XDG_RUNTIME_DIR/clankie``, else ``<state>/run``."""
    e = _env(env)
    value = _ours_or_systemds(e, "CLANKIE_RUNTIME_DIR", "RUNTIME_DIRECTORY")
    if value is None:
        xdg = trimmed(e, "XDG_RUNTIME_DIR")
        value = str(Path(xdg) / "clankie") if xdg else None
    path = Path(value) if value else state_dir(e) / "run"
    return Path(os.path.abspath(path.expanduser()))
