"""The rasterizer's failures are logged as codes and sizes, never the diagram's words."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hosts.tldraw import raster
from hosts.tldraw.errors import RenderFailed

LABEL = "PatientDiagnosisSecret"
# resvg quotes an unknown entity's name in its error text: a label that reaches its parser reaches its errors
BAD_SVG = f'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><text>&{LABEL};</text></svg>'


def test_a_refused_svg_is_logged_without_its_labels(caplog: pytest.LogCaptureFixture) -> None:
    """When resvg refuses a diagram in-process, the log says so without quoting the diagram's text."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RenderFailed):
        raster.rasterize(BAD_SVG, 10, 10)
    assert "resvg refused" in caplog.text
    assert LABEL not in caplog.text


def test_a_failed_rasterizer_child_is_logged_without_its_stderr(caplog: pytest.LogCaptureFixture) -> None:
    """When the rasterizer child fails, the host logs its exit status and stderr length, not the stderr text."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RenderFailed):
        asyncio.run(raster.rasterize_async(BAD_SVG, 10, 10))
    assert "rasterizer child exited 4" in caplog.text
    assert LABEL not in caplog.text
