"""Layout steps shared by both diagram kinds: title, bounds, final placement."""

from __future__ import annotations

import dataclasses
import math

from .errors import DiagramTooLarge
from .geom import curve_points, quad_control
from .metrics import LINE_HEIGHT, TITLE_PX, measure
from .scene import Arrow, Scene, Title

__all__ = ["MARGIN", "MAX_SIDE", "finish", "title_height"]

MARGIN = 40
MAX_SIDE = 12_000  # tldraw units (= PNG px at zoom 1)
TITLE_GAP = 24


def title_height(title: str) -> int:
    """Vertical space the title takes, including the gap below it."""
    return math.ceil(TITLE_PX * LINE_HEIGHT) + TITLE_GAP if title else 0


def arrow_bounds(arrow: Arrow) -> tuple[float, float, float, float]:
    """Bounding box of an arrow's curve and its label."""
    if arrow.via is not None:
        control = quad_control(arrow.start, arrow.end, arrow.via)
        pts = [arrow.start, arrow.end, *curve_points(arrow.start, control, arrow.end, 16)]
    else:
        pts = [arrow.start, arrow.end]
    lw, lh = arrow.label_size
    lx, ly = arrow.label_center
    if arrow.label:
        pts += [(lx - lw / 2, ly - lh / 2), (lx + lw / 2, ly + lh / 2)]
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    return (min(xs), min(ys), max(xs), max(ys))


def finish(scene: Scene, title: str) -> Scene:
    """Translate everything so the content starts at the margin, add the title, size the page."""
    rects: list[tuple[float, float, float, float]] = [(b.x, b.y, b.x + b.w, b.y + b.h) for b in scene.boxes]
    rects += [arrow_bounds(a) for a in scene.arrows]
    rects += [(ln.x, ln.top, ln.x, ln.bottom) for ln in scene.lifelines]
    min_x = math.floor(min(r[0] for r in rects))
    min_y = math.floor(min(r[1] for r in rects))
    max_x = math.ceil(max(r[2] for r in rects))
    max_y = math.ceil(max(r[3] for r in rects))
    dx = MARGIN - min_x
    dy = MARGIN + title_height(title) - min_y
    out = Scene(width=max_x + dx + MARGIN, height=max_y + dy + MARGIN)
    out.boxes = [dataclasses.replace(b, x=b.x + dx, y=b.y + dy) for b in scene.boxes]
    out.arrows = [_shift_arrow(a, dx, dy) for a in scene.arrows]
    out.lifelines = [
        dataclasses.replace(ln, x=ln.x + dx, top=ln.top + dy, bottom=ln.bottom + dy)
        for ln in scene.lifelines
    ]
    if title:
        width = measure(title, TITLE_PX, bold=True) + 8
        out.title = Title(text=title, x=MARGIN, y=MARGIN, w=width, px=TITLE_PX)
        out.width = max(out.width, MARGIN + width + MARGIN)
    if out.width > MAX_SIDE or out.height > MAX_SIDE:
        raise DiagramTooLarge(
            f"the laid-out diagram is {out.width}x{out.height}; at most {MAX_SIDE} per side"
        )
    return out


def _shift_arrow(arrow: Arrow, dx: int, dy: int) -> Arrow:
    return dataclasses.replace(
        arrow,
        start=(arrow.start[0] + dx, arrow.start[1] + dy),
        end=(arrow.end[0] + dx, arrow.end[1] + dy),
        label_center=(arrow.label_center[0] + dx, arrow.label_center[1] + dy),
        via=None if arrow.via is None else (arrow.via[0] + dx, arrow.via[1] + dy),
    )
