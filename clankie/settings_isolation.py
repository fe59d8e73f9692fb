"""The settings that keep what renders the web apart: one group of :class:`clankie.settings.Settings`.

A group is a plain pydantic model whose fields :class:`~clankie.settings.Settings`
inherits; it is never built on its own. The comment after a field is its
description in ``docs/settings-reference.md`` (``scripts/gen-docs``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

BrowserSandbox = Literal["require", "off"]


class IsolationSettings(BaseModel):
    """Chromium's own sandbox and the browser host's user (docs/hosts.md, "Sandbox and user")."""

    # require: Chromium runs in its namespace + seccomp sandbox, or every screenshot is refused browser_sandbox_unavailable
    browser_sandbox: BrowserSandbox = "require"  # Chromium's own sandbox: require, or off (explicit tests only)
    # a name or a uid; no_new_privs; the hand-over of its socket is then required
    browser_user: str = Field(default="nobody", min_length=1, max_length=64)  # tree run as root: the browser's user (root: none)
