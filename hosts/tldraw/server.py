"""The tldraw host process: diagram requests in, governed artifacts out.

Serves ``draw_er_diagram`` and ``draw_sequence_diagram`` (``DiagramRequest{spec}``)
for the host runtime. The engine (:mod:`hosts.tldraw.engine`) validates the
described content and renders one layout three ways; this module writes the
PNG under ``<root>/tldraw/`` and the SVG and ``.tldr`` beside it, returning the
PNG as the artifact with the other two in ``extra_refs`` (SVG first).

Engine refusals keep their codes (``diagram_invalid``, ``diagram_too_large``,
``render_failed``); a render that outlives its deadline is ``render_failed``.
Rendering goes through the engine's async API (the rasterizer runs off the
event loop), at most :data:`CONCURRENCY` at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from clankie.clock import Clock
from clankie.errors import RemoteError
from clankie.protocol import Artifact, Code, DiagramRequest
from clankie.router import Route
from clankie.settings import Settings
from hosts.runtime import write_artifact

from .engine import DiagramError, Rendered, render_er_async, render_sequence_async

log = logging.getLogger(__name__)

CONCURRENCY = 2
DEADLINE = 30.0

Renderer = Callable[[object], Awaitable[Rendered]]
METHODS = ("draw_er_diagram", "draw_sequence_diagram")


class TldrawHost:
    """Serves the two diagram tools (see :class:`hosts.runtime.Host`)."""

    name: str = "tldraw"
    deadlines: Mapping[str, float] = MappingProxyType({method: DEADLINE for method in METHODS})
    timeout_code: str = Code.RENDER_FAILED

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.rendered = 0
        self.last_ms: float | None = None
        self._slots: asyncio.Semaphore | None = None

    def routes(self) -> dict[str, Route]:
        """One typed handler per method of the ``tldraw`` role."""
        return {"draw_er_diagram": self.draw_er_diagram, "draw_sequence_diagram": self.draw_sequence_diagram}

    async def start(self) -> None:
        self._slots = asyncio.Semaphore(CONCURRENCY)

    def health(self) -> dict[str, Any]:
        return {"rendered": self.rendered, "last_render_ms": self.last_ms}

    def detail(self) -> str:
        return f"tldraw ready, {self.rendered} rendered"

    async def close(self) -> None:
        return None


    async def draw_er_diagram(self, params: DiagramRequest) -> Artifact:
        return await self._draw("draw_er_diagram", render_er_async, params)

    async def draw_sequence_diagram(self, params: DiagramRequest) -> Artifact:
        return await self._draw("draw_sequence_diagram", render_sequence_async, params)

    async def _draw(self, method: str, render: Renderer, params: DiagramRequest) -> Artifact:
        """Render under the concurrency bound, then write the PNG with the SVG and ``.tldr`` beside it."""
        assert self._slots is not None, "start() runs before the socket serves"
        async with self._slots:
            started = self.clock.monotonic()
            try:
                out = await render(params.spec)
            except DiagramError as exc:
                raise RemoteError(exc.code, exc.message) from None
            self.last_ms = round((self.clock.monotonic() - started) * 1000, 1)
        root = self.settings.attachment_root
        svg = await write_artifact(root, "tldraw", out.svg.encode("utf-8"), "svg")
        tldr = await write_artifact(root, "tldraw", out.tldr.encode("utf-8"), "tldr")
        png = await write_artifact(root, "tldraw", out.png, "png", extra_refs=(svg.ref, tldr.ref))
        self.rendered += 1
        log.info("%s rendered: %d png bytes in %.0f ms", method, png.size, self.last_ms)
        return png
