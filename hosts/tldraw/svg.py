"""Write a scene as a self-contained SVG document.

Every piece of text goes through XML escaping; nothing refers outside the
document (no ``href``, ``<image>``, ``<style>`` or ``<script>``). Text uses
DejaVu Sans, which the rasterizer is handed explicitly. Columns are separate
``<text>`` elements at measured positions, so no whitespace has to survive.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape, quoteattr

from .geom import Point, quad_control
from .metrics import LABEL_PX, LINE_HEIGHT
from .scene import Arrow, Box, Head, Scene

__all__ = ["scene_to_svg"]

FONT = "DejaVu Sans, sans-serif"
INK = "#1d1d1d"
MUTED = "#6b6f76"
ACCENT = "#b45309"
LINE = "#2f3a4a"
BOX_FILL = "#ffffff"
HEADER_FILL = "#e8eef8"
LIFELINE = "#9aa3ad"
TONES = {"ink": INK, "muted": MUTED, "accent": ACCENT}
HEAD_LEN = 14


def _n(value: float) -> str:
    """A coordinate with at most two decimals and no trailing noise."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def scene_to_svg(scene: Scene) -> str:
    """The whole picture as an SVG string (same geometry as the .tldr)."""
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{scene.width}" height="{scene.height}" '
        f'viewBox="0 0 {scene.width} {scene.height}">',
        f'<rect width="{scene.width}" height="{scene.height}" fill="#ffffff"/>',
    ]
    if scene.title:
        t = scene.title
        base = t.y + t.px * LINE_HEIGHT / 2 + 0.35 * t.px
        out.append(_text(t.text, t.x, base, t.px, bold=True, fill=INK))
    for line in scene.lifelines:
        out.append(
            f'<line x1="{_n(line.x)}" y1="{_n(line.top)}" x2="{_n(line.x)}" '
            f'y2="{_n(line.bottom)}" stroke="{LIFELINE}" stroke-width="2" '
            'stroke-dasharray="8 6"/>'
        )
    for box in scene.boxes:
        out.extend(_box(box))
    for arrow in scene.arrows:
        out.extend(_arrow(arrow))
    for arrow in scene.arrows:
        out.extend(_label(arrow))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _text(text: str, x: float, baseline: float, px: int, *, bold: bool, fill: str,
          anchor: str = "start") -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (
        f'<text x="{_n(x)}" y="{_n(baseline)}" font-family={quoteattr(FONT)} '
        f'font-size="{px}"{weight} fill="{fill}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _box(box: Box) -> list[str]:
    out = [
        f'<rect x="{box.x}" y="{box.y}" width="{box.w}" height="{box.h}" rx="8" '
        f'fill="{BOX_FILL}" stroke="{LINE}" stroke-width="2"/>'
    ]
    if box.header:
        band = box.divider_y if box.divider_y is not None else box.h - 2
        out.append(
            f'<rect x="{box.x + 1}" y="{box.y + 1}" width="{box.w - 2}" '
            f'height="{_n(band)}" rx="7" fill="{HEADER_FILL}"/>'
        )
        if box.divider_y is not None:  # square off the band's lower corners
            out.append(
                f'<rect x="{box.x + 1}" y="{_n(box.y + band - 8)}" width="{box.w - 2}" '
                f'height="8" fill="{HEADER_FILL}"/>'
            )
    if box.divider_y is not None:
        y = box.y + box.divider_y
        out.append(
            f'<line x1="{box.x}" y1="{_n(y)}" x2="{box.x + box.w}" y2="{_n(y)}" '
            f'stroke="{LINE}" stroke-width="1.5"/>'
        )
    for cell in box.cells:
        out.append(
            _text(cell.text, box.x + cell.x, box.y + cell.baseline, LABEL_PX,
                  bold=cell.bold, fill=TONES[cell.tone], anchor=cell.anchor)
        )
    return out


def _arrow(arrow: Arrow) -> list[str]:
    dash = ' stroke-dasharray="10 7"' if arrow.dashed else ""
    s, e = arrow.start, arrow.end
    if arrow.via is not None:
        c = quad_control(s, e, arrow.via)
        path = f"M{_n(s[0])},{_n(s[1])} Q{_n(c[0])},{_n(c[1])} {_n(e[0])},{_n(e[1])}"
        start_dir, end_dir = c, c
    else:
        path = f"M{_n(s[0])},{_n(s[1])} L{_n(e[0])},{_n(e[1])}"
        start_dir, end_dir = e, s
    out = [f'<path d="{path}" fill="none" stroke="{LINE}" stroke-width="2"{dash}/>']
    out += _head(arrow.head_start, s, start_dir)
    out += _head(arrow.head_end, e, end_dir)
    return out


def _head(kind: Head, tip: Point, toward: Point) -> list[str]:
    """An arrowhead at ``tip``; ``toward`` is any point back along the line."""
    if kind == "none":
        return []
    dx, dy = toward[0] - tip[0], toward[1] - tip[1]
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length  # unit vector pointing back along the line
    px, py = -uy, ux
    base = (tip[0] + ux * HEAD_LEN, tip[1] + uy * HEAD_LEN)
    half = HEAD_LEN * 0.5
    left = (base[0] + px * half, base[1] + py * half)
    right = (base[0] - px * half, base[1] - py * half)
    stroke = f'stroke="{LINE}" stroke-width="2"'
    if kind == "triangle":
        return [f'<path d="M{_pt(tip)} L{_pt(left)} L{_pt(right)} Z" fill="{LINE}" {stroke}/>']
    if kind == "arrow":
        return [f'<path d="M{_pt(left)} L{_pt(tip)} L{_pt(right)}" fill="none" {stroke}/>']
    if kind == "bar":
        a = (tip[0] + ux * 10 + px * 9, tip[1] + uy * 10 + py * 9)
        b = (tip[0] + ux * 10 - px * 9, tip[1] + uy * 10 - py * 9)
        return [f'<path d="M{_pt(a)} L{_pt(b)}" fill="none" {stroke}/>']
    # crow's foot: three prongs from a point on the line out to the box edge
    root = (tip[0] + ux * 16, tip[1] + uy * 16)
    fan_l = (tip[0] + px * 10, tip[1] + py * 10)
    fan_r = (tip[0] - px * 10, tip[1] - py * 10)
    return [
        f'<path d="M{_pt(fan_l)} L{_pt(root)} L{_pt(fan_r)} M{_pt(root)} L{_pt(tip)}" '
        f'fill="none" {stroke}/>'
    ]


def _pt(p: Point) -> str:
    return f"{_n(p[0])},{_n(p[1])}"


def _label(arrow: Arrow) -> list[str]:
    if not arrow.label:
        return []
    (cx, cy), (w, h) = arrow.label_center, arrow.label_size
    baseline = cy + 0.35 * LABEL_PX
    return [
        f'<rect x="{_n(cx - w / 2)}" y="{_n(cy - h / 2)}" width="{w}" height="{h}" rx="4" '
        'fill="#ffffff" fill-opacity="0.92"/>',
        _text(arrow.label, cx, baseline, LABEL_PX, bold=False, fill=INK, anchor="middle"),
    ]
