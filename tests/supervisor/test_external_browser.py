"""The tree with its browser host in its own unit (CLANKIE_BROWSER_HOST=external): what the supervisor runs and says."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clankie import ipc
from clankie.protocol import Record
from hosts.browser.external import ClientUid, every_uid
from supervisor.external import external_status
from supervisor.spec import default_specs


def test_an_external_browser_host_is_neither_spawned_nor_kept_as_a_spare() -> None:
    child, _ = default_specs()
    external, _ = default_specs(browser="external")
    assert [s.name for s in child] == ["browser", "tldraw", "service", "bridge"]
    assert [s.name for s in external] == ["tldraw", "service", "bridge"]
    assert [s for s in child if s.name != "browser"] == external  # the rest of the tree is as it was, spares included


def test_the_status_line_of_an_external_browser_says_whether_its_socket_answers(runtime_dir: Path) -> None:
    path = runtime_dir / "browser.sock"

    async def handler(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        return None

    async def main() -> None:
        absent = await external_status(path)
        assert (absent.name, absent.state, absent.ready, absent.pid) == ("browser", "external", False, None)
        assert absent.detail == f"its own unit at {path}: not answering (ChannelBroken)"
        server = await ipc.serve(path, "browser", handler)
        try:
            live = await external_status(path)
        finally:
            await server.close()
        assert (live.state, live.ready, live.detail) == ("external", True, f"its own unit at {path}: answers")

    asyncio.run(main())


def test_an_external_browser_that_refuses_the_tree_says_so_with_its_code(runtime_dir: Path) -> None:
    """A unit whose CLANKIE_BROWSER_CLIENT_UID is not the tree's uid: the line names the refusal, not a dead socket."""
    path = runtime_dir / "browser.sock"

    async def handler(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        return None

    async def main() -> None:
        server = await ipc.serve(path, "browser", handler, admit=ClientUid(uid=4242).admit, uid_rule=every_uid)
        try:
            refused = await external_status(path)
        finally:
            await server.close()
        assert (refused.ready, refused.detail) == (False, f"its own unit at {path}: refuses us: peer_uid_refused")

    asyncio.run(main())
