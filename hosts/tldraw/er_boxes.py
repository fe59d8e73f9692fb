"""Size an entity box from its text with tldraw's label metrics.

The ``.tldr`` label is one paragraph per line: the entity name in bold, then
``name: type (PK)`` per field. The SVG draws the same box with three columns
(key tag, name, type). The box is as wide as the wider of the two.
"""

from __future__ import annotations

import math

from .metrics import LABEL_PADDING, LABEL_PX, line_pitch, measure
from .scene import Box, Cell, TextLine
from .schema_er import Entity, Field

__all__ = ["KEY_TAGS", "entity_box"]

KEY_TAGS = {"pk": "PK", "fk": "FK", "pk_fk": "PK FK", "uk": "UK"}
MIN_WIDTH = 140
SLACK = 4  # tldraw's own wrap slack (notes §1.3)
COLUMN_GAP = 14
HEADER_BASELINE = 28  # SVG title baseline below the top edge
HEADER_RULE = 42  # SVG divider below the top edge


def field_line(field: Field) -> str:
    """The field as one line of the tldraw label."""
    text = f"{field.name}: {field.type}" if field.type else field.name
    return f"{text} ({KEY_TAGS[field.key]})" if field.key else text


def entity_box(key: str, entity: Entity) -> Box:
    """A box at the origin, sized to fit the entity in both outputs."""
    label = (TextLine(entity.name, bold=True), *(TextLine(field_line(f)) for f in entity.fields))
    tldr_w = max(measure(line.text, bold=line.bold) for line in label) + 2 * LABEL_PADDING + SLACK
    tags = [KEY_TAGS[f.key] if f.key else "" for f in entity.fields]
    tag_w = max((measure(t, bold=True) for t in tags), default=0)
    tag_col = tag_w + COLUMN_GAP if tag_w else 0
    name_w = max((measure(f.name) for f in entity.fields), default=0)
    type_w = max((measure(f.type) for f in entity.fields), default=0)
    svg_w = 2 * LABEL_PADDING + tag_col + name_w + (COLUMN_GAP + type_w if type_w else 0)
    w = max(MIN_WIDTH, tldr_w, svg_w)
    pitch = line_pitch()
    h = math.ceil(len(label) * pitch + 2 * LABEL_PADDING)
    title_baseline = HEADER_BASELINE if entity.fields else h / 2 + 0.35 * LABEL_PX
    cells = [Cell(entity.name, LABEL_PADDING, title_baseline, bold=True)]
    for row, (field, tag) in enumerate(zip(entity.fields, tags, strict=True), start=1):
        baseline = LABEL_PADDING + row * pitch + pitch / 2 + 0.35 * LABEL_PX
        if tag:
            cells.append(Cell(tag, LABEL_PADDING, baseline, bold=True, tone="accent"))
        cells.append(Cell(field.name, LABEL_PADDING + tag_col, baseline))
        if field.type:
            x = LABEL_PADDING + tag_col + name_w + COLUMN_GAP
            cells.append(Cell(field.type, x, baseline, tone="muted"))
    return Box(
        key=key,
        x=0,
        y=0,
        w=w,
        h=h,
        label=label,
        cells=tuple(cells),
        align="start",
        divider_y=HEADER_RULE if entity.fields else None,
        header=True,
    )
