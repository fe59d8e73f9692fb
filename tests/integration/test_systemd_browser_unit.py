"""Issue 24 item 3, its last part, and issue 37: the shipped units under a real systemd, the browser host in its own
unit and user (the default).

Booted as :mod:`tests.integration.test_systemd_unit` boots the single-unit setup
(every safety step of :mod:`tests.integration.systemd_ns`), with the files
installed as shipped: ``clankie.service``, ``clankie-browser.socket`` and
``clankie-browser.service``. The static
user ``clankie`` that ``clankie.sysusers`` makes on a real host exists inside
the namespace only (:meth:`NamespacedSystemd.add_user`). Test-only drop-ins
add what the tree's own systemd test adds (fakes' addresses, credentials as
``Environment=``, ``DefaultDependencies=no``) and let the browser unit visit
the test's page on 127.0.0.1.

Checked: the tree reports ``3/3 running`` and a ``browser external`` line
that answers (the probe starts the browser unit through its socket); a
screenshot turn posts its picture; the browser host and every Chromium
process run under a uid other than the tree's, and each renderer in
Chromium's sandbox; stopping all three units leaves no process behind.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.hosts.isolation import Seen, seen
from tests.integration.systemd_ns import NamespacedSystemd, require_namespaced_systemd
from tests.integration.test_systemd_unit import PNG, Booted, drop_in, poll, tree_processes
from tests.integration.tree import CHAN, GUILD, Site

pytestmark = [pytest.mark.slow, pytest.mark.timeout(170)]

UNITS = Path(__file__).resolve().parents[2] / "docs" / "systemd"
TREE_UID = 990  # the static "clankie" of clankie.sysusers, inside the namespace only
BROWSER_TEST = """[Unit]
DefaultDependencies=no
[Service]
Environment=CLANKIE_BROWSER_ALLOW_PRIVATE=true
"""


def processes(ns: NamespacedSystemd) -> list[Seen]:
    return [p for p in map(seen, ns.host_pids()) if p is not None]


def apart(ns: NamespacedSystemd) -> tuple[Seen, Seen, list[Seen]] | None:
    """The supervisor, the browser host and its Chromium processes, once a renderer exists."""
    procs = processes(ns)
    supervisor = next((p for p in procs if " ".join(p.argv).endswith("clankie run")), None)
    host = next((p for p in procs if "hosts.browser" in " ".join(p.argv)), None)
    chromium = [p for p in procs if p.kind in ("browser", "zygote", "renderer", "gpu-process", "utility")]
    if supervisor is None or host is None or not any(p.kind == "renderer" for p in chromium):
        return None
    return supervisor, host, chromium


def test_the_browser_in_its_own_unit_under_a_real_systemd(tmp_path: Path) -> None:
    """The tree, the browser's socket and service as shipped: a screenshot turn's picture is
    delivered while the browser host and Chromium run under a uid other than the tree's."""
    require_namespaced_systemd()  # skips only when unshare, nsenter or systemd is not installed

    async def main() -> None:
        discord, anthropic, site = FakeDiscord(guilds={GUILD: [CHAN]}), fa.FakeAnthropic(), Site()
        await discord.start()
        await anthropic.start()
        await site.start()
        ns = NamespacedSystemd(tmp_path / "systemd")
        for name in ("clankie.service", "clankie-browser.socket", "clankie-browser.service"):
            ns.add_unit(name, (UNITS / name).read_text())  # as shipped
        ns.add_unit("clankie.service.d/test.conf", drop_in(discord, anthropic, "none"))  # no child restarts
        ns.add_unit("clankie-browser.service.d/test.conf", BROWSER_TEST)
        ns.add_unit("clankie-browser.socket.d/test.conf", "[Unit]\nDefaultDependencies=no\n")
        ns.add_user("clankie", TREE_UID)
        b = Booted(ns, discord, anthropic)
        try:
            ns.start()  # from this thread: it lives as long as the test (see NamespacedSystemd.start)
            await asyncio.to_thread(ns.wait_booted)

            async def ready() -> dict[str, str] | None:
                st = await b.show("ActiveState", "StatusText")
                return st if st["ActiveState"] == "active" and st["StatusText"].startswith("3/3 running") else None

            await poll(ready, 90, "READY=1 with STATUS=3/3 running (no browser child)", ns)
            await b.wait_child("bridge", lambda c: "discord: connected" in c["detail"], "the bridge to reach Discord")
            browser = await b.wait_child("browser", lambda c: c["ready"], "the browser unit to answer on its socket")
            assert browser["state"] == "external" and browser["pid"] is None, browser
            unit = await asyncio.to_thread(ns.show, "clankie-browser.service", "ActiveState", "MainPID")
            assert unit["ActiveState"] == "active" and unit["MainPID"] != "0", unit

            shot = asyncio.ensure_future(b.turn(
                [fa.tool_use(("browser_screenshot", {"url": site.url("/slow")})), fa.text("the page")],
                "clankie, show me the page"))

            async def rendering() -> tuple[Seen, Seen, list[Seen]] | None:
                return await asyncio.to_thread(apart, ns) if "/slow" in site.hits else None

            supervisor, host, chromium = await poll(rendering, 60, "a renderer while the page loads", ns)
            assert supervisor.uid == TREE_UID and host.uid not in (0, TREE_UID), host  # the unit's dynamic user
            assert all(p.uid == host.uid for p in chromium), chromium
            assert all(r.seccomp == 2 and r.netns != supervisor.netns and r.root != "/"
                       for r in chromium if r.kind == "renderer"), chromium
            site.release.set()
            post = await shot
            assert post.content == "the page" and len(post.files) == 1 and post.files[0][1].startswith(PNG), post

            for name in ("clankie.service", "clankie-browser.service", "clankie-browser.socket"):
                await asyncio.to_thread(ns.systemctl, "stop", name)
            assert tree_processes(ns) == []
        finally:
            await asyncio.to_thread(ns.kill)
            site.release.set()
            await site.close()
            await anthropic.close()
            await discord.close()

    asyncio.run(main())
