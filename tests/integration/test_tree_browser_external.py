"""Issue 24 item 3 through the real tree: the browser host in its own unit (``CLANKIE_BROWSER_HOST=external``).

The browser host runs as its own process, started before the tree and not by
it (as ``clankie-browser.service`` is), under another uid when the test runs
as root. The tree spawns no browser and no spare for it, ``status`` shows it
as external and answering, and a screenshot turn posts its picture: the
service verified it by hash from the unit's directory and copied it under the
tree's attachment root, where the bridge resolved it. With the unit down the
words still post without the picture; with it back the picture comes back.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from clankie.artifacts import resolve_artifact
from clankie.errors import RemoteError
from clankie.protocol import ChildTarget
from clankie.testing import fake_anthropic as fa
from tests.hosts.external import ExternalHost, external_env
from tests.hosts.isolation import descendants, seen
from tests.integration.tree import real_tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_screenshot_turn_through_a_browser_host_outside_the_tree(tmp_path: Path, runtime_dir: Path) -> None:
    """The tree runs no browser (nor restarts one); its status says external and answering; a screenshot turn
    posts the picture the unit wrote, verified by hash and copied under the tree's root; as root the unit runs
    under another uid; with the unit stopped the words still post, and once it is back so does the picture."""
    unit_env = external_env(tmp_path)
    tree_env = {
        "CLANKIE_BROWSER_HOST": "external",
        "CLANKIE_BROWSER_SOCKET": unit_env["CLANKIE_BROWSER_SOCKET"],
        "CLANKIE_BROWSER_ARTIFACTS": unit_env["CLANKIE_BROWSER_ARTIFACTS"],
        "CLANKIE_DISCORD_TOOL_CARD": "false",
    }

    async def main() -> None:
        unit = ExternalHost(unit_env, tmp_path / "browser-unit.log")
        await unit.start()
        try:
            async with real_tree(tmp_path, runtime_dir, tree_env, spares=False) as t:
                status = await t.status()
                browser = next(c for c in status.children if c.name == "browser")
                assert (browser.state, browser.pid, browser.ready) == ("external", None, True), browser
                assert browser.detail == f"its own unit at {unit.socket}: answers"
                with pytest.raises(RemoteError) as info:  # not the supervisor's to restart
                    await t.call("restart", ChildTarget(name="browser"))
                assert info.value.code == "no_such_child" and "clankie-browser.service" in info.value.message
                tree = {p.pid for p in descendants(t.proc.pid)}
                assert unit.pid not in tree and not any("hosts.browser" in " ".join(p.argv) for p in descendants(t.proc.pid))

                t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": t.site.url()})), fa.text("here it is"))
                post = await t.ask("clankie, show me the page")
                assert post.content == "here it is" and len(post.files) == 1
                ref = t.last_ref(1)
                digest = ref.split(":")[1]
                assert hashlib.sha256(post.files[0][1]).hexdigest() == digest
                ours = resolve_artifact(t.state / "attachments", ref, 25 << 20)
                theirs = Path(unit_env["CLANKIE_BROWSER_ARTIFACTS"]) / "browser" / f"{digest}.png"
                assert ours.data == theirs.read_bytes()
                supervisor, host = seen(t.proc.pid), seen(unit.pid)
                assert supervisor is not None and host is not None
                if os.geteuid() == 0:
                    assert host.uid != supervisor.uid and theirs.stat().st_uid == host.uid
                    assert ours.path.stat().st_uid == supervisor.uid

                assert await unit.stop() == 0
                t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": t.site.url()})), fa.text("no picture"))
                post = await t.ask("clankie, show me the page again")
                assert post.content == "no picture" and post.files == []
                assert "browser_unavailable" in t.tool_results(3)
                await t.wait_child(lambda c: not c.ready and "not answering" in c.detail, "browser")

                unit = ExternalHost(unit_env, tmp_path / "browser-unit.log")
                await unit.start()
                await t.wait_child(lambda c: c.ready, "browser")
                t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": t.site.url()})), fa.text("back"))
                post = await t.ask("clankie, and now?")
                assert post.content == "back" and len(post.files) == 1
        finally:
            await unit.stop()

    asyncio.run(main())
