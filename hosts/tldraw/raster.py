"""SVG to PNG with resvg-py, hermetically: no system fonts, DejaVu handed in.

resvg-py releases the GIL while it renders, so :func:`rasterize_async` runs it
in a worker thread and the host's event loop (heartbeats, other requests)
keeps going. The same SVG gives the same PNG bytes on every run.
"""

from __future__ import annotations

import asyncio
import logging

import resvg_py

from .errors import DiagramTooLarge, RenderFailed
from .metrics import FONT_BOLD, FONT_REGULAR

__all__ = ["MAX_PIXELS", "rasterize", "rasterize_async", "zoom_for"]

log = logging.getLogger(__name__)

MAX_PIXELS = 40_000_000
SMALL_SIDE = 1200  # diagrams this small are drawn at 1.5x for legibility


def zoom_for(width: int, height: int) -> float:
    """Render scale: 1.5 for small diagrams, 1 otherwise (tldraw units = px)."""
    return 1.5 if max(width, height) <= SMALL_SIDE else 1.0


def rasterize(svg: str, width: int, height: int) -> bytes:
    """PNG bytes of ``svg`` (whose size is ``width`` x ``height`` units)."""
    zoom = zoom_for(width, height)
    pixels = width * height * zoom * zoom
    if pixels > MAX_PIXELS:
        raise DiagramTooLarge(f"the picture would be {int(pixels)} pixels; at most {MAX_PIXELS}")
    fonts = [str(FONT_REGULAR), str(FONT_BOLD)]
    for path in (FONT_REGULAR, FONT_BOLD):
        if not path.is_file():
            raise RenderFailed(f"font file missing: {path.name}")
    try:
        png = resvg_py.svg_to_bytes(
            svg_string=svg,
            skip_system_fonts=True,
            font_files=fonts,
            zoom=zoom,
            background="#ffffff",
        )
    except ValueError as exc:
        log.warning("resvg refused the generated svg: %s", exc)
        raise RenderFailed("the rasterizer could not draw this diagram") from exc
    except BaseException as exc:  # a Rust panic surfaces as a BaseException subclass
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        log.error("resvg crashed on the generated svg", exc_info=True)
        raise RenderFailed("the rasterizer crashed on this diagram") from exc
    return bytes(png)


async def rasterize_async(svg: str, width: int, height: int) -> bytes:
    """:func:`rasterize` in a worker thread."""
    return await asyncio.to_thread(rasterize, svg, width, height)
