"""Rendering: determinism, PNG validity, self-contained SVG, refusals, async."""

from __future__ import annotations

import asyncio
import io
import json
import re
from unittest import mock

import pytest
from PIL import Image

from hosts.tldraw import raster
from hosts.tldraw.engine import (
    RenderFailed,
    render_er,
    render_er_async,
    render_sequence,
    render_sequence_async,
)
from hosts.tldraw.errors import DiagramInvalid, DiagramTooLarge
from hosts.tldraw.examples import er_example, sequence_example


def test_er_png_is_byte_identical_across_runs() -> None:
    """The same ER request gives the same PNG, SVG and .tldr bytes twice."""
    first, second = render_er(er_example(8)), render_er(er_example(8))
    assert first.png == second.png
    assert first.svg == second.svg
    assert first.tldr == second.tldr


def test_sequence_png_is_byte_identical_across_runs() -> None:
    """The same sequence request gives the same PNG bytes twice."""
    assert render_sequence(sequence_example()).png == render_sequence(sequence_example()).png


def test_png_has_the_svg_size_times_zoom() -> None:
    """The PNG decodes and its size is the SVG's size times the chosen zoom."""
    rendered = render_er(er_example(5))
    width = int(re.search(r'width="(\d+)"', rendered.svg).group(1))  # type: ignore[union-attr]  # the renderer always writes width; a None here fails the test anyway
    height = int(re.search(r'height="(\d+)"', rendered.svg).group(1))  # type: ignore[union-attr]  # the renderer always writes height; a None here fails the test anyway
    zoom = raster.zoom_for(width, height)
    with Image.open(io.BytesIO(rendered.png)) as image:
        assert image.format == "PNG"
        assert image.size == (round(width * zoom), round(height * zoom))


@pytest.mark.parametrize("render", [lambda: render_er(er_example(6)),
                                    lambda: render_sequence(sequence_example())])
def test_svg_refers_to_nothing_outside(render: object) -> None:
    """The SVG has no href, image, style, script or foreign object: nothing external."""
    svg = render().svg  # type: ignore[operator]  # typed object above; each parametrized value is a zero-argument renderer
    lowered = svg.lower()
    for needle in ("href", "<image", "<style", "<script", "<foreignobject", "url(", "@import"):
        assert needle not in lowered
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')


def test_hostile_text_is_escaped_in_svg_and_tldr() -> None:
    """Markup in labels is escaped in the SVG and stays plain text in the .tldr."""
    name = '<script>alert("x")</script> & ]]> \'q\''
    rendered = render_er({"entities": [{"name": name, "fields": [{"name": "a&b", "type": "<t>"}]}]})
    assert "<script>" not in rendered.svg
    assert "&lt;script&gt;" in rendered.svg
    assert "a&amp;b" in rendered.svg and "&lt;t&gt;" in rendered.svg
    texts = json.dumps(json.loads(rendered.tldr))
    assert json.dumps(name)[1:-1] in texts


def test_rasterizer_failure_is_render_failed() -> None:
    """A ValueError from resvg becomes RenderFailed with code render_failed."""
    with mock.patch("hosts.tldraw.raster.resvg_py.svg_to_bytes", side_effect=ValueError("boom")):
        with pytest.raises(RenderFailed) as info:
            render_er(er_example(2))
    assert info.value.code == "render_failed"
    assert isinstance(info.value.__cause__, ValueError)


def test_invalid_svg_is_render_failed() -> None:
    """Feeding the rasterizer broken XML is reported as render_failed, not a crash."""
    with pytest.raises(RenderFailed):
        raster.rasterize("<svg", 10, 10)


def test_oversized_picture_is_too_large() -> None:
    """A canvas above the pixel budget is refused before rasterizing."""
    with pytest.raises(DiagramTooLarge):
        raster.rasterize("<svg/>", 9000, 9000)


def test_async_render_keeps_the_event_loop_live() -> None:
    """The async forms rasterize in a child process, so the loop keeps ticking meanwhile."""

    async def main() -> tuple[int, bytes, bytes]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        er = await render_er_async(er_example(20))
        seq = await render_sequence_async(sequence_example())
        done.set()
        await task
        return ticks, er.png, seq.png

    ticks, er_png, seq_png = asyncio.run(main())
    assert er_png == render_er(er_example(20)).png
    assert seq_png == render_sequence(sequence_example()).png
    assert ticks >= 20


def test_async_thread_mode_gives_the_same_bytes() -> None:
    """The worker-thread variant produces the same PNG as the child process."""
    threaded = asyncio.run(render_sequence_async(sequence_example(), isolate=False))
    assert threaded.png == render_sequence(sequence_example()).png


def test_async_refusals_keep_their_codes() -> None:
    """Invalid requests and rasterizer failures keep their codes through the async path."""
    with pytest.raises(DiagramInvalid):
        asyncio.run(render_er_async({"entities": []}))
    with pytest.raises(RenderFailed):
        asyncio.run(raster.rasterize_async("<svg", 10, 10))
    with pytest.raises(DiagramTooLarge):
        asyncio.run(raster.rasterize_async("<svg/>", 9000, 9000))


def test_pictures_look_drawn() -> None:
    """A rendered diagram is mostly white with dark ink: boxes and text were drawn."""
    for png in (render_er(er_example(5)).png, render_sequence(sequence_example()).png):
        with Image.open(io.BytesIO(png)) as image:
            grey = image.convert("L")
            histogram = grey.histogram()
        total = sum(histogram)
        dark = sum(histogram[:100])
        white = histogram[255]
        assert white / total > 0.6
        assert dark / total > 0.005
