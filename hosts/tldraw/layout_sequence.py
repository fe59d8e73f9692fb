"""Deterministic sequence layout: participants in a row, messages top to bottom.

Participants are boxes along the top with dashed lifelines below. Gaps between
lifelines grow until every message label fits on its arrow with room for the
arrowhead. Each message gets its own row; a message to oneself is a small
loop to the right of the lifeline (a tldraw arrow with a ``bend``).
"""

from __future__ import annotations

import math

from .layout_common import finish
from .metrics import LABEL_PADDING, LABEL_PX, LINE_HEIGHT, line_pitch, measure
from .scene import Arrow, Box, Cell, Head, Lifeline, Scene, TextLine
from .schema_sequence import SequenceDiagram

__all__ = ["layout_sequence"]

MIN_BOX_W = 120
BOX_GAP = 60
ARROW_ROOM = 72  # arrowhead plus breathing space beside a label
ROW_GAP = 22
LOOP_H = 36
LOOP_BEND = -40.0
LOOP_LABEL_GAP = 10  # negative: the loop bulges to the right (+x) of a downward chord
FIRST_ROW = 36
TAIL = 36
STYLE: dict[str, tuple[Head, bool]] = {"sync": ("triangle", False), "async": ("arrow", False), "reply": ("arrow", True)}


def layout_sequence(diagram: SequenceDiagram) -> Scene:
    """Lay out a validated sequence diagram in tldraw units."""
    widths = [
        max(MIN_BOX_W, measure(name, bold=True) + 2 * LABEL_PADDING + 4)
        for name in diagram.participants
    ]
    box_h = math.ceil(line_pitch() + 2 * LABEL_PADDING)
    label_w = [measure(m.text) + 12 if m.text else 0 for m in diagram.messages]
    label_h = math.ceil(LABEL_PX * LINE_HEIGHT) + 4
    centres = _centres(diagram, widths, label_w)
    scene = Scene(width=0, height=0)
    for i, name in enumerate(diagram.participants):
        x = round(centres[i] - widths[i] / 2)
        baseline = box_h / 2 + 0.35 * LABEL_PX
        scene.boxes.append(
            Box(
                key=f"p{i}",
                x=x,
                y=0,
                w=widths[i],
                h=box_h,
                label=(TextLine(name, bold=True),),
                cells=(Cell(name, widths[i] / 2, baseline, bold=True, anchor="middle"),),
                align="middle",
                header=True,
            )
        )
    y: float = box_h + FIRST_ROW
    for j, message in enumerate(diagram.messages):
        head, dashed = STYLE[message.kind]
        x1, x2 = centres[message.source], centres[message.target]
        size = (label_w[j], label_h if message.text else 0)
        if message.source == message.target:
            top = y + max(0, label_h - LOOP_H) / 2
            arrow = Arrow(
                key=f"m{j}",
                start=(x1, top),
                end=(x1, top + LOOP_H),
                label=message.text,
                label_center=(x1 - LOOP_BEND + LOOP_LABEL_GAP + size[0] / 2, top + LOOP_H / 2),
                label_size=size,
                head_end=head,
                dashed=dashed,
                bend=LOOP_BEND,
                via=(x1 - LOOP_BEND, top + LOOP_H / 2),
            )
            y += max(LOOP_H, label_h) + ROW_GAP
        else:
            mid_y = y + label_h / 2
            arrow = Arrow(
                key=f"m{j}",
                start=(x1, mid_y),
                end=(x2, mid_y),
                label=message.text,
                label_center=((x1 + x2) / 2, mid_y),
                label_size=size,
                head_end=head,
                dashed=dashed,
            )
            y += label_h + ROW_GAP
        scene.arrows.append(arrow)
    bottom = y + TAIL
    for i, centre in enumerate(centres):
        scene.lifelines.append(Lifeline(key=f"l{i}", x=centre, top=box_h, bottom=bottom))
    return finish(scene, diagram.title)


def _centres(diagram: SequenceDiagram, widths: list[int], label_w: list[int]) -> list[float]:
    """Lifeline x positions: boxes apart, then widened until every label fits."""
    n = len(widths)
    gaps = [widths[i] / 2 + BOX_GAP + widths[i + 1] / 2 for i in range(n - 1)]
    spans = sorted(
        range(len(diagram.messages)),
        key=lambda j: (abs(diagram.messages[j].target - diagram.messages[j].source), j),
    )
    for j in spans:
        message = diagram.messages[j]
        lo, hi = sorted((message.source, message.target))
        if lo == hi:
            if lo < n - 1:  # the loop and its label must stay left of the next lifeline
                need = -LOOP_BEND + LOOP_LABEL_GAP + label_w[j] + BOX_GAP / 2
                gaps[lo] = max(gaps[lo], need)
            continue
        need = label_w[j] + ARROW_ROOM
        have = sum(gaps[lo:hi])
        if have < need:
            extra = (need - have) / (hi - lo)
            for k in range(lo, hi):
                gaps[k] += extra
    centres = [widths[0] / 2]
    for gap in gaps:
        centres.append(centres[-1] + math.ceil(gap))
    return [float(round(c)) for c in centres]
