"""Write a scene as a ``.tldr`` document (tldraw's JSON file format, version 1).

Records are written in the current tldraw format (rich text, separate
binding records) and the schema declares, for each record type emitted, the
lowest migration version whose record shape matches what is written, so
tldraw 4.0 and later read the file without upgrading anything. Ids and index
keys derive from the layout keys; keys are sorted, so the same scene always
gives the same bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .scene import Arrow, Box, Head, Lifeline, Scene, TextLine, Title

__all__ = ["SEQUENCES", "index_key", "scene_to_tldr"]

Record = dict[str, Any]

SEQUENCES = {
    "com.tldraw.store": 4,
    "com.tldraw.document": 2,
    "com.tldraw.page": 1,
    "com.tldraw.shape": 4,
    "com.tldraw.shape.geo": 10,  # AddRichText; 11 only allows richText attrs, which we omit
    "com.tldraw.shape.arrow": 7,  # AddRichText
    "com.tldraw.shape.line": 5,  # AddScale
    "com.tldraw.shape.text": 3,  # AddRichText
    "com.tldraw.binding.arrow": 1,
}
PAGE_ID = "page:page"
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
HEADS: dict[Head, str] = {
    "none": "none",
    "arrow": "arrow",
    "triangle": "triangle",
    "bar": "bar",
    "crow": "inverted",
}


def index_key(i: int) -> str:
    """The i-th (0-based) fractional-index key: a1..az, then b00..bzz, then c000..."""
    if i < 61:
        return "a" + DIGITS[i + 1]
    i -= 61
    for head, width in (("b", 2), ("c", 3), ("d", 4)):
        if i < 62**width:
            digits = []
            for _ in range(width):
                i, rem = divmod(i, 62)
                digits.append(DIGITS[rem])
            return head + "".join(reversed(digits))
        i -= 62**width
    raise ValueError("index out of range")


def scene_to_tldr(scene: Scene) -> str:
    """The scene as a .tldr JSON string."""
    records: list[Record] = [
        {"id": "document:document", "typeName": "document", "gridSize": 10, "name": "", "meta": {}},
        {"id": PAGE_ID, "typeName": "page", "name": "Diagram", "index": "a1", "meta": {}},
    ]
    shapes: list[Record] = []
    if scene.title:
        shapes.append(_title(scene.title))
    shapes += [_lifeline(line) for line in scene.lifelines]
    shapes += [_geo(box) for box in scene.boxes]
    bindings: list[Record] = []
    for arrow in scene.arrows:
        shapes.append(_arrow(arrow))
        bindings += _bindings(arrow)
    for i, shape in enumerate(shapes):
        shape["index"] = index_key(i)
    document = {
        "tldrawFileFormatVersion": 1,
        "schema": {"schemaVersion": 2, "sequences": SEQUENCES},
        "records": records + shapes + bindings,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rich_text(lines: tuple[TextLine, ...]) -> Record:
    """TipTap document: one paragraph per line, bold as a mark."""
    paragraphs: list[Record] = []
    for line in lines:
        if not line.text:
            paragraphs.append({"type": "paragraph"})
            continue
        node: Record = {"type": "text", "text": line.text}
        if line.bold:
            node["marks"] = [{"type": "bold"}]
        paragraphs.append({"type": "paragraph", "content": [node]})
    return {"type": "doc", "content": paragraphs or [{"type": "paragraph"}]}


def _shape(key: str, kind: str, x: float, y: float, props: Record) -> Record:
    return {
        "id": f"shape:{key}",
        "typeName": "shape",
        "type": kind,
        "x": _num(x),
        "y": _num(y),
        "rotation": 0,
        "parentId": PAGE_ID,
        "isLocked": False,
        "opacity": 1,
        "meta": {},
        "props": props,
    }


def _geo(box: Box) -> Record:
    return _shape(
        box.key,
        "geo",
        box.x,
        box.y,
        {
            "geo": "rectangle",
            "w": box.w,
            "h": box.h,
            "growY": 0,
            "scale": 1,
            "url": "",
            "color": "blue",
            "labelColor": "black",
            "fill": "semi",
            "dash": "solid",
            "size": "s",
            "font": "sans",
            "align": box.align,
            "verticalAlign": "start" if box.align == "start" else "middle",
            "richText": rich_text(box.label),
        },
    )


def _arrow(arrow: Arrow) -> Record:
    sx, sy = arrow.start
    ex, ey = arrow.end
    return _shape(
        arrow.key,
        "arrow",
        sx,
        sy,
        {
            "kind": "arc",
            "color": "black",
            "labelColor": "black",
            "fill": "none",
            "dash": "dashed" if arrow.dashed else "solid",
            "size": "s",
            "font": "sans",
            "arrowheadStart": HEADS[arrow.head_start],
            "arrowheadEnd": HEADS[arrow.head_end],
            "start": {"x": 0, "y": 0},
            "end": {"x": _num(ex - sx), "y": _num(ey - sy)},
            "bend": _num(_chord_bend(arrow)),
            "richText": rich_text((TextLine(arrow.label),) if arrow.label else ()),
            "labelPosition": 0.5,
            "scale": 1,
            "elbowMidPoint": 0.5,
        },
    )


def _chord_bend(arrow: Arrow) -> float:
    """tldraw's bend for this arrow: offset of the curve's midpoint from the chord's."""
    if arrow.via is None:
        return 0.0
    (sx, sy), (ex, ey) = arrow.start, arrow.end
    length = math.hypot(ex - sx, ey - sy) or 1.0
    ux, uy = (ex - sx) / length, (ey - sy) / length
    mx, my = arrow.via[0] - (sx + ex) / 2, arrow.via[1] - (sy + ey) / 2
    return mx * -uy + my * ux


def _bindings(arrow: Arrow) -> list[Record]:
    if arrow.bound is None:
        return []
    out = []
    for terminal, target in zip(("start", "end"), arrow.bound, strict=True):
        out.append(
            {
                "id": f"binding:{arrow.key}-{terminal}",
                "typeName": "binding",
                "type": "arrow",
                "fromId": f"shape:{arrow.key}",
                "toId": f"shape:{target}",
                "meta": {},
                "props": {
                    "terminal": terminal,
                    "normalizedAnchor": {"x": 0.5, "y": 0.5},
                    "isExact": False,
                    "isPrecise": False,
                    "snap": "none",
                },
            }
        )
    return out


def _lifeline(line: Lifeline) -> Record:
    length = line.bottom - line.top
    points = {
        "a1": {"id": "a1", "index": "a1", "x": 0, "y": 0},
        "a2": {"id": "a2", "index": "a2", "x": 0, "y": _num(length)},
    }
    return _shape(
        line.key,
        "line",
        line.x,
        line.top,
        {"color": "grey", "dash": "dashed", "size": "s", "spline": "line", "points": points, "scale": 1},
    )


def _title(title: Title) -> Record:
    return _shape(
        "title",
        "text",
        title.x,
        title.y,
        {
            "color": "black",
            "size": "m",
            "font": "sans",
            "textAlign": "start",
            "w": title.w,
            "richText": rich_text((TextLine(title.text, bold=True),)),
            "scale": 1,
            "autoSize": True,
        },
    )


def _num(value: float) -> float | int:
    """Round to 2 decimals; whole numbers become ints so the JSON stays tidy."""
    rounded = round(value, 2)
    return int(rounded) if rounded == int(rounded) else rounded
