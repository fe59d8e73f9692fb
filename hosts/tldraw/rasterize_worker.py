"""``python -m hosts.tldraw.rasterize_worker WIDTH HEIGHT``: SVG on stdin, PNG on stdout.

resvg-py 0.5.0 as installed here holds the GIL for the whole render (measured:
the main thread stalled 0.6-1.3 s during a 40-entity render in a worker
thread), so the async API rasterizes in this short-lived child process
instead. The child runs exactly :func:`hosts.tldraw.raster.rasterize`, so the
bytes are the same; a refusal is reported as exit status 3 (too large) or 4
(render failed) with the message on stderr.
"""

from __future__ import annotations

import sys

from .errors import DiagramTooLarge, RenderFailed
from .raster import rasterize

EXIT_TOO_LARGE = 3
EXIT_RENDER_FAILED = 4


def main(argv: list[str]) -> int:
    """Rasterize stdin to stdout; return the exit status."""
    width, height = int(argv[0]), int(argv[1])
    svg = sys.stdin.buffer.read().decode("utf-8")
    try:
        png = rasterize(svg, width, height)
    except DiagramTooLarge as exc:
        sys.stderr.write(str(exc))
        return EXIT_TOO_LARGE
    except RenderFailed as exc:
        sys.stderr.write(str(exc))
        return EXIT_RENDER_FAILED
    sys.stdout.buffer.write(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
