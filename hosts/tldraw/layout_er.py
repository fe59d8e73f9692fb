"""Deterministic ER layout: entities on a grid, relations as routed arrows.

Entities are ordered breadth-first from the most connected one, so related
entities tend to sit side by side, then placed row by row on a grid whose
columns and rows are as wide and tall as their largest box. A relation is a
straight arrow between box centres unless that line would cross another box
or retrace a parallel relation; then it bends (tldraw ``bend``), trying
alternating sides at growing distances and keeping the first clear route.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

from .er_boxes import entity_box
from .geom import Point, bend_midpoint, box_exit, center, curve_points, inside, quad_control
from .layout_common import finish
from .metrics import LABEL_PX, LINE_HEIGHT, measure
from .scene import Arrow, Box, Head, Scene
from .schema_er import ErDiagram

__all__ = ["layout_er"]

V_GAP = 120
MIN_H_GAP, MAX_H_GAP = 160, 360
BENDS = (0, 60, -60, 120, -120, 180, -180, 240, -240)
CLEARANCE = 10
SAMPLES = 40
Rect = tuple[float, float, float, float]
NOTATION = {
    "one_to_one": ("1:1", "bar", "bar"),
    "one_to_many": ("1:N", "bar", "crow"),
    "many_to_one": ("N:1", "crow", "bar"),
    "many_to_many": ("N:M", "crow", "crow"),
}


def layout_er(diagram: ErDiagram) -> Scene:
    """Lay out a validated ER diagram in tldraw units."""
    n = len(diagram.entities)
    sized = [entity_box(f"e{i}", e) for i, e in enumerate(diagram.entities)]
    labels = [_label_text(r.label, r.cardinality) for r in diagram.relations]
    widest = max((measure(t) for t in labels), default=0)
    h_gap = min(MAX_H_GAP, max(MIN_H_GAP, widest + 60))
    edges = [(r.source, r.target) for r in diagram.relations]
    boxes = _grid(sized, _slots(_order(n, edges), edges), h_gap)
    scene = Scene(width=0, height=0, boxes=[boxes[i] for i in range(n)])
    used: dict[tuple[int, int], set[float]] = {}
    label_rects: list[Rect] = []
    height = math.ceil(LABEL_PX * LINE_HEIGHT) + 4
    for j, relation in enumerate(diagram.relations):
        pair = (min(relation.source, relation.target), max(relation.source, relation.target))
        taken = used.setdefault(pair, set())
        _, head_a, head_b = NOTATION[relation.cardinality]
        size = (measure(labels[j]) + 12, height)
        flip = relation.source > relation.target
        arrow = _route(
            f"r{j}", boxes[relation.source], boxes[relation.target], boxes, taken, flip,
            size, label_rects,
        )
        taken.add(-arrow.bend if flip else arrow.bend)
        label_rects.append(_label_rect(arrow.label_center, size))
        scene.arrows.append(
            dataclasses.replace(
                arrow,
                label=labels[j],
                label_size=size,
                head_start=_head(head_a),
                head_end=_head(head_b),
            )
        )
    return finish(scene, diagram.title)


def _label_text(label: str, cardinality: str) -> str:
    notation = NOTATION[cardinality][0]
    return f"{label} ({notation})" if label else notation


def _head(name: str) -> Head:
    return "bar" if name == "bar" else "crow"


def _order(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Breadth-first order from the most connected entity, ties by input order."""
    neighbours: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    degree = [len(s) for s in neighbours]
    seen: set[int] = set()
    order: list[int] = []
    while len(order) < n:
        seed = min((i for i in range(n) if i not in seen), key=lambda i: (-degree[i], i))
        queue = deque([seed])
        seen.add(seed)
        while queue:
            node = queue.popleft()
            order.append(node)
            for nxt in sorted(neighbours[node] - seen, key=lambda i: (-degree[i], i)):
                seen.add(nxt)
                queue.append(nxt)
    return order


def _slots(order: list[int], edges: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Give each entity a grid slot (row, col) next to its already placed neighbours.

    The first entity of a component takes the middle free slot (the first, for
    later components); every other one takes the free slot closest to its
    placed neighbours, ties going to the earlier slot in row-major order.
    """
    n = len(order)
    cols = max(1, math.ceil(math.sqrt(n * 1.3)))
    rows = math.ceil(n / cols) + 2
    neighbours: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    free = [(r, c) for r in range(rows) for c in range(cols)]
    placed: dict[int, tuple[int, int]] = {}
    for idx in order:
        anchors = [placed[j] for j in sorted(neighbours[idx]) if j in placed]
        if anchors:
            slot = min(free, key=lambda rc: _distance(rc, anchors))
        elif not placed:
            slot = (rows // 2 - 1 if rows > 2 else 0, (cols - 1) // 2)
        else:
            slot = free[0]
        free.remove(slot)
        placed[idx] = slot
    return placed


def _distance(slot: tuple[int, int], anchors: list[tuple[int, int]]) -> float:
    total = 0.0
    for r, c in anchors:
        dr, dc = abs(slot[0] - r), abs(slot[1] - c)
        total += max(dr, dc) + 0.25 * min(dr, dc) + 0.01 * dr
    return total


def _grid(sized: list[Box], slots: dict[int, tuple[int, int]], h_gap: int) -> dict[int, Box]:
    """Place boxes in their slots; empty rows and columns collapse away."""
    used_rows = sorted({r for r, _ in slots.values()})
    used_cols = sorted({c for _, c in slots.values()})
    row_of = {r: i for i, r in enumerate(used_rows)}
    col_of = {c: i for i, c in enumerate(used_cols)}
    col_w = [0] * len(used_cols)
    row_h = [0] * len(used_rows)
    for idx, (r, c) in slots.items():
        col_w[col_of[c]] = max(col_w[col_of[c]], sized[idx].w)
        row_h[row_of[r]] = max(row_h[row_of[r]], sized[idx].h)
    col_x = [sum(col_w[:c]) + c * h_gap for c in range(len(col_w))]
    row_y = [sum(row_h[:r]) + r * V_GAP for r in range(len(row_h))]
    placed: dict[int, Box] = {}
    for idx, (r, c) in sorted(slots.items()):
        box = sized[idx]
        col = col_of[c]
        x = col_x[col] + (col_w[col] - box.w) // 2
        placed[idx] = dataclasses.replace(box, x=x, y=row_y[row_of[r]])
    return placed


def _route(
    key: str,
    a: Box,
    b: Box,
    boxes: dict[int, Box],
    taken: set[float],
    flip: bool,
    label_size: tuple[int, int],
    label_rects: list[Rect],
) -> Arrow:
    """The first bend that clears every other box and label (or the least bad one)."""
    others = [box for box in boxes.values() if box.key not in (a.key, b.key)]
    ca, cb = center(a), center(b)
    best: tuple[int, Arrow] | None = None
    for bend in BENDS:
        if (-bend if flip else bend) in taken:
            continue
        arrow = _arrow(key, a, b, ca, cb, bend)
        hits = _hits(arrow, others)
        label = _label_rect(arrow.label_center, label_size)
        hits += sum(_rects_meet(label, rect) for rect in label_rects)
        hits += sum(_rects_meet(label, (x.x, x.y, x.x + x.w, x.y + x.h)) for x in boxes.values())
        if hits == 0:
            return arrow
        if best is None or hits < best[0]:
            best = (hits, arrow)
    if best is None:  # every bend taken by parallel relations: widen further
        return _arrow(key, a, b, ca, cb, 300.0 + 60 * len(taken))
    return best[1]


def _label_rect(centre: Point, size: tuple[int, int]) -> Rect:
    return (centre[0] - size[0] / 2, centre[1] - size[1] / 2,
            centre[0] + size[0] / 2, centre[1] + size[1] / 2)


def _rects_meet(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _arrow(key: str, a: Box, b: Box, ca: Point, cb: Point, bend: float) -> Arrow:
    through = bend_midpoint(ca, cb, bend)
    start = box_exit(a, through if bend else cb)
    end = box_exit(b, through if bend else ca)
    return Arrow(
        key=key,
        start=start,
        end=end,
        label="",
        label_center=through,
        label_size=(0, 0),
        bend=float(bend),
        via=through if bend else None,
        bound=(a.key, b.key),
    )


def _hits(arrow: Arrow, others: list[Box]) -> int:
    through = arrow.label_center  # the curve's midpoint, where the label sits
    control = quad_control(arrow.start, arrow.end, through)
    points = curve_points(arrow.start, control, arrow.end, SAMPLES)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    lo_x, hi_x, lo_y, hi_y = min(xs), max(xs), min(ys), max(ys)
    hits = 0
    for box in others:
        if box.x > hi_x + CLEARANCE or box.x + box.w < lo_x - CLEARANCE:
            continue
        if box.y > hi_y + CLEARANCE or box.y + box.h < lo_y - CLEARANCE:
            continue
        if any(inside(box, p, CLEARANCE) for p in points):
            hits += 1
    return hits
