"""The engine's public API: one function per tool, request dict in, files out.

``render_er(spec)`` and ``render_sequence(spec)`` validate, lay out once, and
write that layout three ways: PNG (for Discord), SVG, and a ``.tldr``
document that opens in tldraw. They are synchronous and CPU-bound; the host
calls the ``*_async`` forms, which lay out in a worker thread and rasterize in
a child process (resvg-py holds the GIL; see :mod:`hosts.tldraw.raster`).

Every failure is a :class:`~hosts.tldraw.errors.DiagramError` whose ``code``
is ``diagram_invalid``, ``diagram_too_large`` or ``render_failed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import DiagramError, DiagramInvalid, DiagramTooLarge, RenderFailed
from .layout_er import layout_er
from .layout_sequence import layout_sequence
from .raster import rasterize, rasterize_async
from .scene import Scene
from .schema_er import parse_er
from .schema_sequence import parse_sequence
from .svg import scene_to_svg
from .tldr import scene_to_tldr

__all__ = [
    "DiagramError",
    "DiagramInvalid",
    "DiagramTooLarge",
    "RenderFailed",
    "Rendered",
    "layout_er_spec",
    "layout_sequence_spec",
    "render_er",
    "render_er_async",
    "render_sequence",
    "render_sequence_async",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rendered:
    """One diagram, three ways; all derived from the same layout."""

    png: bytes
    svg: str
    tldr: str


def layout_er_spec(spec: object) -> Scene:
    """Validate an ER request and lay it out (no rendering)."""
    return layout_er(parse_er(spec))


def layout_sequence_spec(spec: object) -> Scene:
    """Validate a sequence request and lay it out (no rendering)."""
    return layout_sequence(parse_sequence(spec))


def render_er(spec: object) -> Rendered:
    """Render a ``draw_er_diagram`` request."""
    return _render("er", layout_er_spec, spec)


def render_sequence(spec: object) -> Rendered:
    """Render a ``draw_sequence_diagram`` request."""
    return _render("sequence", layout_sequence_spec, spec)


async def render_er_async(spec: object, *, isolate: bool = True) -> Rendered:
    """:func:`render_er` without blocking the event loop."""
    return await _render_async("er", layout_er_spec, spec, isolate)


async def render_sequence_async(spec: object, *, isolate: bool = True) -> Rendered:
    """:func:`render_sequence` without blocking the event loop."""
    return await _render_async("sequence", layout_sequence_spec, spec, isolate)


def _emit(lay_out: Callable[[object], Scene], spec: object) -> tuple[Scene, str, str]:
    scene = lay_out(spec)
    return scene, scene_to_svg(scene), scene_to_tldr(scene)


async def _render_async(
    kind: str, lay_out: Callable[[object], Scene], spec: object, isolate: bool
) -> Rendered:
    try:
        scene, svg, tldr = await asyncio.to_thread(_emit, lay_out, spec)
        png = await rasterize_async(svg, scene.width, scene.height, isolate=isolate)
    except DiagramError as exc:
        log.info("%s diagram refused: %s", kind, exc.code)
        raise
    return Rendered(png=png, svg=svg, tldr=tldr)


def _render(kind: str, lay_out: Callable[[object], Scene], spec: object) -> Rendered:
    started = time.perf_counter()
    try:
        scene, svg, tldr = _emit(lay_out, spec)
        png = rasterize(svg, scene.width, scene.height)
    except DiagramError as exc:
        log.info("%s diagram refused: %s", kind, exc.code)
        raise
    log.debug(
        "%s diagram %dx%d rendered in %.0f ms (%d png bytes)",
        kind,
        scene.width,
        scene.height,
        (time.perf_counter() - started) * 1000,
        len(png),
    )
    return Rendered(png=png, svg=svg, tldr=tldr)
