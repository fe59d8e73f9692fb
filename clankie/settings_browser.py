"""The settings of a browser host run outside the tree: one group of :class:`clankie.settings.Settings`.

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``). What
they do: ``docs/operations.md``, "The browser in its own unit".

Both units read the same values: the tree (``clankie.service``) dials
``CLANKIE_BROWSER_SOCKET`` and reads screenshots under
``CLANKIE_BROWSER_ARTIFACTS``; the browser unit (``clankie-browser.service``)
serves that socket (systemd's, when it hands one over) and writes there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

BrowserHostMode = Literal["child", "external"]
EXTERNAL_SOCKET = Path("/run/clankie-browser/browser.sock")
EXTERNAL_ARTIFACTS = Path("/run/clankie-browser/artifacts")
_USER = re.compile(r"[a-z_][a-z0-9_.-]*\$?|[0-9]+")  # a POSIX-ish user name or a numeric uid


class BrowserUnitSettings(BaseModel):
    """Where the browser host runs and how the tree reaches it (docs/operations.md, "The browser in its own unit")."""

    # child: the supervisor runs and watches it; external: its own systemd unit and user, dialled at browser_socket
    browser_host: BrowserHostMode = "child"  # who runs the browser host: child, or external (its own unit)
    browser_socket: Path = EXTERNAL_SOCKET  # external: the host's socket (the tree dials it; the host binds it if systemd hands none)
    browser_artifacts: Path = EXTERNAL_ARTIFACTS  # external: where the host writes screenshots for the tree to verify and copy
    # a name or a uid; blank: the host's own uid (a host started by hand beside the tree, as the tests do)
    browser_client_uid: str = Field(default="", max_length=64)  # external host: the only uid it serves (the tree's)
    browser_artifacts_keep: int = Field(default=64, ge=4, le=100_000)  # external host: screenshots kept; past it the oldest go

    @field_validator("browser_socket", "browser_artifacts", mode="after")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError(f"must be an absolute path, not {str(value)!r}")
        return value

    @field_validator("browser_client_uid", mode="after")
    @classmethod
    def _user(cls, value: str) -> str:
        value = value.strip()
        if value and not _USER.fullmatch(value):
            raise ValueError(f"must be a user name or a numeric uid, not {value!r}")
        return value
