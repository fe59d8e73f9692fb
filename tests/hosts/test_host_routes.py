"""Each host registers one typed route per method of its role, and its deadlines cover exactly those methods."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie import artifacts
from clankie.errors import RemoteError
from clankie.protocol import METHODS, Artifact, DiagramRequest, ScreenshotRequest
from clankie.router import Router
from clankie.settings import Settings
from clankie.testing.clock import FakeClock
from hosts.browser.host import BrowserHost
from hosts.tldraw.examples import er_example
from hosts.tldraw.server import TldrawHost


@pytest.mark.parametrize("factory", [BrowserHost, TldrawHost])
def test_routes_and_deadlines_match_the_method_table(settings: Settings, factory: type[BrowserHost | TldrawHost]) -> None:
    """The router (built at construction) and the runtime's deadlines name exactly the role's methods."""

    async def main() -> None:
        host = factory(settings, FakeClock())
        assert Router(host.name, host.routes()).methods == set(METHODS[host.name]) == set(host.deadlines)

    asyncio.run(main())


def test_the_browser_refuses_a_bad_url_through_its_typed_route(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router reaches screenshot() with the decoded record; a refused URL keeps its code (no browser starts)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the host points TMPDIR at its private dir; put ours back afterwards

    async def main() -> None:
        host = BrowserHost(settings, FakeClock())
        await host.start()
        try:
            with pytest.raises(RemoteError) as info:
                await Router(host.name, host.routes()).dispatch("screenshot", ScreenshotRequest(url="file:///etc/passwd"))
        finally:
            await host.close()
        assert info.value.code == "browser_url_refused" and host.chromium == "down"

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_each_tldraw_method_reaches_its_own_renderer(settings: Settings) -> None:
    """draw_er_diagram and draw_sequence_diagram are separate routes: an ER spec renders as one and is refused by the other."""

    async def main() -> None:
        host = TldrawHost(settings, FakeClock())
        await host.start()
        router = Router(host.name, host.routes())
        art = await router.dispatch("draw_er_diagram", DiagramRequest(spec=er_example(3)))
        assert isinstance(art, Artifact) and artifacts.parse_ref(art.ref)[1] == "tldraw"
        with pytest.raises(RemoteError) as info:
            await router.dispatch("draw_sequence_diagram", DiagramRequest(spec=er_example(3)))
        assert info.value.code == "diagram_invalid"
        assert host.rendered == 1

    asyncio.run(main())
