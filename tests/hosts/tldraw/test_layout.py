"""Layout rules: boxes fit their text and never overlap; labels stay apart."""

from __future__ import annotations

import itertools

import pytest

from hosts.tldraw.engine import layout_er_spec, layout_sequence_spec
from hosts.tldraw.examples import er_example, sequence_example
from hosts.tldraw.layout_common import MARGIN
from hosts.tldraw.metrics import LABEL_PADDING, measure
from hosts.tldraw.scene import Scene


def _label_rects(scene: Scene) -> list[tuple[float, float, float, float]]:
    out = []
    for arrow in scene.arrows:
        if arrow.label:
            (cx, cy), (w, h) = arrow.label_center, arrow.label_size
            out.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
    return out


def _inside_page(scene: Scene) -> None:
    for box in scene.boxes:
        assert box.x >= MARGIN and box.y >= MARGIN
        assert box.x + box.w <= scene.width - MARGIN + 1
        assert box.y + box.h <= scene.height - MARGIN + 1


@pytest.mark.parametrize("count", [1, 5, 20, 40, 60])
def test_er_boxes_never_overlap(count: int) -> None:
    """No two entity boxes overlap, with a clear gap between them, at any size."""
    scene = layout_er_spec(er_example(count))
    assert len(scene.boxes) == count
    for a, b in itertools.combinations(scene.boxes, 2):
        assert not a.overlaps(b, margin=40), (a.key, b.key)
    _inside_page(scene)


def test_er_boxes_fit_their_label_with_tldraw_padding() -> None:
    """Every entity box is wide and tall enough for its tldraw label plus padding."""
    scene = layout_er_spec(er_example(12))
    for box in scene.boxes:
        widest = max(measure(line.text, bold=line.bold) for line in box.label)
        assert box.w >= widest + 2 * LABEL_PADDING
        assert box.h >= len(box.label) * 18 * 1.35 + 2 * LABEL_PADDING


def test_er_layout_is_deterministic() -> None:
    """Laying out the same request twice gives the same scene."""
    assert layout_er_spec(er_example(20)) == layout_er_spec(er_example(20))


def test_small_er_relations_avoid_other_boxes_and_labels() -> None:
    """In a small diagram every relation finds a route whose label clears boxes and labels."""
    scene = layout_er_spec(er_example(5))
    labels = _label_rects(scene)
    for a, b in itertools.combinations(labels, 2):
        assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
    for rect in labels:
        for box in scene.boxes:
            assert (rect[2] <= box.x or box.x + box.w <= rect[0]
                    or rect[3] <= box.y or box.y + box.h <= rect[1])


def test_parallel_relations_get_distinct_bends() -> None:
    """Two relations between the same pair of entities do not draw on top of each other."""
    spec = {
        "entities": [{"name": "users"}, {"name": "tickets"}],
        "relations": [
            {"from": "users", "to": "tickets", "cardinality": "one_to_many", "label": "opened"},
            {"from": "tickets", "to": "users", "cardinality": "many_to_one", "label": "assignee"},
        ],
    }
    first, second = layout_er_spec(spec).arrows
    assert first.label_center != second.label_center


def test_sequence_boxes_and_labels_never_overlap() -> None:
    """Participants sit in one row without overlap and message labels never collide."""
    scene = layout_sequence_spec(sequence_example())
    for a, b in itertools.combinations(scene.boxes, 2):
        assert not a.overlaps(b, margin=20)
    labels = _label_rects(scene)
    for la, lb in itertools.combinations(labels, 2):
        assert la[2] <= lb[0] or lb[2] <= la[0] or la[3] <= lb[1] or lb[3] <= la[1]
    _inside_page(scene)


def test_sequence_messages_run_top_to_bottom_and_labels_fit_their_arrow() -> None:
    """Each message is below the previous one and its label fits between its lifelines."""
    spec = {
        "participants": [{"name": "A"}, {"name": "B"}, {"name": "C"}],
        "messages": [
            {"from": "A", "to": "B", "text": "a rather long message label that needs room"},
            {"from": "B", "to": "C", "text": "short"},
            {"from": "C", "to": "A", "text": "reply across two gaps", "kind": "reply"},
        ],
    }
    scene = layout_sequence_spec(spec)
    ys = [arrow.start[1] for arrow in scene.arrows]
    assert ys == sorted(ys) and len(set(ys)) == len(ys)
    for arrow in scene.arrows:
        assert abs(arrow.end[0] - arrow.start[0]) >= arrow.label_size[0] + 40
    assert [line.x for line in scene.lifelines] == [a.start[0] for a in scene.arrows[:2]] + [
        scene.arrows[2].start[0]
    ]
