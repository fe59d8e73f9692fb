"""The tldraw host as a real process: diagrams over its socket become governed PNG + SVG + .tldr artifacts."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from clankie import artifacts
from clankie.errors import RemoteError
from clankie.protocol import Artifact, DiagramRequest
from hosts.tldraw.examples import er_example, sequence_example
from tests.hosts.hostproc import HostProcess, raw_call

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _check(root: Path, ref: str) -> bytes:
    digest, sub, ext = artifacts.parse_ref(ref)
    data = (root / sub / f"{digest}.{ext}").read_bytes()
    assert sub == "tldraw" and hashlib.sha256(data).hexdigest() == digest
    return data


def test_diagrams_arrive_as_png_with_svg_and_tldr_beside_them(env: dict[str, str], tmp_path: Path) -> None:
    """An ER and a sequence diagram each come back as a PNG artifact whose extra refs are the SVG and the .tldr, all hashing to their refs."""
    root = tmp_path / "attachments"

    async def main() -> None:
        host_env = {**env, "CLANKIE_DISCORD_ATTACHMENT_ROOT": str(root)}
        async with HostProcess("tldraw", host_env, tmp_path / "host.log") as host:
            conn = await host.client()
            for method, spec in (("draw_er_diagram", er_example(5)), ("draw_sequence_diagram", sequence_example())):
                art = await conn.request(method, DiagramRequest(spec=spec), timeout=30)
                assert isinstance(art, Artifact) and art.mime == "image/png"
                png = _check(root, art.ref)
                assert len(png) == art.size and Image.open(io.BytesIO(png)).format == "PNG"
                svg_ref, tldr_ref = art.extra_refs
                assert svg_ref.endswith(".svg") and tldr_ref.endswith(".tldr")
                assert _check(root, svg_ref).lstrip().startswith((b"<svg", b"<?xml"))
                assert isinstance(json.loads(_check(root, tldr_ref)), dict)
            again = await conn.request("draw_er_diagram", DiagramRequest(spec=er_example(5)), timeout=30)
            assert isinstance(again, Artifact)
            await conn.aclose()

    asyncio.run(main())


def test_engine_refusals_keep_their_codes_and_the_host_keeps_serving(env: dict[str, str], tmp_path: Path) -> None:
    """A malformed spec is diagram_invalid, an oversized one diagram_too_large, a malformed request invalid_request, and the next diagram still renders."""

    async def main() -> None:
        async with HostProcess("tldraw", env, tmp_path / "host.log") as host:
            conn = await host.client()
            for method, spec, code in (
                ("draw_er_diagram", {"entities": "not a list"}, "diagram_invalid"),
                ("draw_sequence_diagram", {"participants": [{"name": "A"}], "messages": [{"from": "A", "to": "Z", "text": "x"}]}, "diagram_invalid"),
                ("draw_er_diagram", er_example(500), "diagram_too_large"),
            ):
                with pytest.raises(RemoteError) as info:
                    await conn.request(method, DiagramRequest(spec=spec), timeout=30)
                assert info.value.code == code, spec
            error = await raw_call(host.socket, "draw_er_diagram", {"spec": "not a map"})
            assert error is not None and error["code"] == "invalid_request"
            art = await conn.request("draw_sequence_diagram", DiagramRequest(spec=sequence_example()), timeout=30)
            assert isinstance(art, Artifact) and host.alive()
            await conn.aclose()
            beat = await host.next_heartbeat()
            assert beat.report["refused"] == {"diagram_invalid": 2, "diagram_too_large": 1}

    asyncio.run(main())
