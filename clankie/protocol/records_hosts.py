"""Records between the service and the hosts (browser, tldraw)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from clankie.protocol.base import Record


class Viewport(Record):
    width: int = Field(default=1280, ge=200, le=2560)
    height: int = Field(default=800, ge=200, le=4096)


class ScreenshotRequest(Record):
    url: str = Field(min_length=1, max_length=2048)
    full_page: bool = False
    viewport: Viewport | None = None


class Artifact(Record):
    """A governed artifact written under the attachment root (ARCHITECTURE §6)."""

    ref: str
    sha256: str
    size: int
    mime: str = "image/png"
    extra_refs: tuple[str, ...] = ()


class DiagramRequest(Record):
    """``draw_er_diagram`` / ``draw_sequence_diagram``: described content, never code."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    spec: dict[str, Any]
