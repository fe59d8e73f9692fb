"""The laid-out diagram in tldraw units: one scene feeds the SVG and the .tldr.

Coordinates are page coordinates with y pointing down, rounded to integers
where they position shapes. ``key`` values are content-derived and stable
(``e3``, ``r7``, ``p1``, ``m12``); the emitters turn them into record ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Arrow", "Box", "Cell", "Head", "Lifeline", "Scene", "TextLine", "Title"]

Head = Literal["none", "arrow", "triangle", "bar", "crow"]
Anchor = Literal["start", "middle", "end"]


@dataclass(frozen=True, slots=True)
class TextLine:
    """One paragraph of a tldraw rich-text label."""

    text: str
    bold: bool = False


@dataclass(frozen=True, slots=True)
class Cell:
    """One SVG ``<text>`` run; ``x`` and ``baseline`` are relative to its box."""

    text: str
    x: float
    baseline: float
    bold: bool = False
    anchor: Anchor = "start"
    tone: Literal["ink", "muted", "accent"] = "ink"


@dataclass(frozen=True, slots=True)
class Box:
    """A rectangle with a label (entity or participant)."""

    key: str
    x: int
    y: int
    w: int
    h: int
    label: tuple[TextLine, ...]
    cells: tuple[Cell, ...]
    align: Literal["start", "middle"] = "start"
    divider_y: float | None = None
    header: bool = False

    def overlaps(self, other: Box, margin: float = 0.0) -> bool:
        """True if the two rectangles, grown by ``margin``, intersect."""
        return not (
            self.x + self.w + margin <= other.x
            or other.x + other.w + margin <= self.x
            or self.y + self.h + margin <= other.y
            or other.y + other.h + margin <= self.y
        )


@dataclass(frozen=True, slots=True)
class Arrow:
    """A straight or bent arrow.

    A bent arrow passes through ``via`` halfway; ``bend`` is the layout's own
    offset (tldraw's sign convention) and the .tldr bend is recomputed from
    ``via`` against the stored end points.
    """

    key: str
    start: tuple[float, float]
    end: tuple[float, float]
    label: str
    label_center: tuple[float, float]
    label_size: tuple[int, int]
    head_start: Head = "none"
    head_end: Head = "arrow"
    dashed: bool = False
    bend: float = 0.0
    via: tuple[float, float] | None = None
    bound: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Lifeline:
    """A dashed vertical line under a participant."""

    key: str
    x: float
    top: float
    bottom: float


@dataclass(frozen=True, slots=True)
class Title:
    """The diagram's heading, drawn as a tldraw text shape."""

    text: str
    x: int
    y: int
    w: int
    px: int


@dataclass(slots=True)
class Scene:
    """Everything both emitters need; width and height include the margin."""

    width: int
    height: int
    title: Title | None = None
    boxes: list[Box] = field(default_factory=list)
    arrows: list[Arrow] = field(default_factory=list)
    lifelines: list[Lifeline] = field(default_factory=list)
