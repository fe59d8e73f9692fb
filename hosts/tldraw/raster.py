"""SVG to PNG with resvg-py, hermetically: no system fonts, DejaVu handed in.

The same SVG gives the same PNG bytes on every run. :func:`rasterize` is
synchronous. :func:`rasterize_async` keeps the caller's event loop live: by
default it renders in a short-lived child process, because resvg-py 0.5.0
turned out to hold the GIL for the whole render on this machine (a worker
thread alone stalled the loop 0.6-1.3 s at 40 entities); ``isolate=False``
uses a worker thread instead.
"""

from __future__ import annotations

import asyncio
import logging
import sys

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
    except ValueError as exc:  # its text can quote the svg, i.e. diagram labels: log the kind only
        log.warning("resvg refused the generated svg (%s, %d chars)", type(exc).__name__, len(svg))
        raise RenderFailed("the rasterizer could not draw this diagram") from exc
    except BaseException as exc:  # a Rust panic surfaces as a BaseException subclass
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        log.error("resvg crashed on the generated svg (%s, %d chars)", type(exc).__name__, len(svg))
        raise RenderFailed("the rasterizer crashed on this diagram") from exc
    return bytes(png)


async def rasterize_async(svg: str, width: int, height: int, *, isolate: bool = True) -> bytes:
    """:func:`rasterize` off the event loop: in a child process, or a worker thread."""
    if not isolate:
        return await asyncio.to_thread(rasterize, svg, width, height)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hosts.tldraw.rasterize_worker",
        str(width),
        str(height),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        png, err = await proc.communicate(svg.encode("utf-8"))
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    message = err.decode("utf-8", "replace")[:300]
    if proc.returncode == 0:
        return png
    if proc.returncode == 3:
        raise DiagramTooLarge(message)
    # The child's stderr can echo the svg (diagram labels): log its length, never its text.
    log.warning("rasterizer child exited %s (%d bytes of stderr)", proc.returncode, len(err))
    raise RenderFailed(message if proc.returncode == 4 else "the rasterizer process failed")
