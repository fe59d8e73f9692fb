"""Plane geometry for routing arrows between boxes (pure, float math only)."""

from __future__ import annotations

import math

from .scene import Box

__all__ = ["Point", "bend_midpoint", "box_exit", "curve_points", "quad_control"]

Point = tuple[float, float]


def center(box: Box) -> Point:
    """Centre of a box."""
    return (box.x + box.w / 2, box.y + box.h / 2)


def bend_midpoint(a: Point, b: Point, bend: float) -> Point:
    """Point the arrow passes through halfway, tldraw style.

    tldraw offsets the middle handle from the chord midpoint by ``bend`` along
    ``(-u.y, u.x)``, where ``u`` is the unit vector from start to end.
    """
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    return ((a[0] + b[0]) / 2 - uy * bend, (a[1] + b[1]) / 2 + ux * bend)


def box_exit(box: Box, toward: Point, gap: float = 0.0) -> Point:
    """Where a ray from the box centre toward ``toward`` leaves the box (plus ``gap``)."""
    cx, cy = center(box)
    dx, dy = toward[0] - cx, toward[1] - cy
    if dx == 0 and dy == 0:
        return (cx, cy)
    scales = []
    if dx:
        scales.append((box.w / 2) / abs(dx))
    if dy:
        scales.append((box.h / 2) / abs(dy))
    scale = min(scales)
    length = math.hypot(dx, dy)
    scale += gap / length
    return (cx + dx * scale, cy + dy * scale)


def quad_control(start: Point, end: Point, through: Point) -> Point:
    """Control point of the quadratic Bezier from start to end passing ``through`` at t=1/2."""
    return (
        2 * through[0] - (start[0] + end[0]) / 2,
        2 * through[1] - (start[1] + end[1]) / 2,
    )


def curve_points(start: Point, control: Point, end: Point, samples: int) -> list[Point]:
    """Points of the quadratic Bezier at ``samples`` interior parameters."""
    out = []
    for i in range(1, samples + 1):
        t = i / (samples + 1)
        s = 1 - t
        out.append(
            (
                s * s * start[0] + 2 * s * t * control[0] + t * t * end[0],
                s * s * start[1] + 2 * s * t * control[1] + t * t * end[1],
            )
        )
    return out


def inside(box: Box, point: Point, margin: float) -> bool:
    """True if ``point`` lies within the box grown by ``margin``."""
    return (
        box.x - margin <= point[0] <= box.x + box.w + margin
        and box.y - margin <= point[1] <= box.y + box.h + margin
    )
