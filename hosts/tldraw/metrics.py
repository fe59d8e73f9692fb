"""Text metrics in tldraw units, measured with DejaVu Sans through Pillow.

tldraw draws geo labels at 18 px (size ``s``) with line height 1.35 and 16 px
padding per side; its sans font (IBM Plex Sans Medium) is 0.92-0.94x as wide
as DejaVu Sans, so measuring with DejaVu gives boxes that fit both the
``.tldr`` document and our own SVG, which is drawn with DejaVu.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from PIL import ImageFont

__all__ = [
    "FONT_BOLD",
    "FONT_REGULAR",
    "LABEL_PADDING",
    "LABEL_PX",
    "LINE_HEIGHT",
    "TITLE_PX",
    "line_pitch",
    "measure",
]

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONT_REGULAR = FONT_DIR / "DejaVuSans.ttf"
FONT_BOLD = FONT_DIR / "DejaVuSans-Bold.ttf"

LABEL_PX = 18  # tldraw geo label / arrow label, size "s"
TITLE_PX = 24  # tldraw text shape, size "m"
LINE_HEIGHT = 1.35
LABEL_PADDING = 16


@functools.lru_cache(maxsize=8)
def _font(px: int, bold: bool) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONT_BOLD if bold else FONT_REGULAR), px)


@functools.lru_cache(maxsize=4096)
def measure(text: str, px: int = LABEL_PX, bold: bool = False) -> int:
    """Advance width of one line in px, kerned (raqm), rounded up."""
    if not text:
        return 0
    return math.ceil(_font(px, bold).getlength(text))


def line_pitch(px: int = LABEL_PX) -> float:
    """Distance between baselines of consecutive lines."""
    return px * LINE_HEIGHT
