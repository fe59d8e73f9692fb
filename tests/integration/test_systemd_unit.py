"""Issue 14 item 7: the single-unit setup under a real systemd, PID 1 of a private PID and mount namespace.

The namespace is built exactly as ``shared/reference/systemd-testing.md`` says
(see :mod:`tests.integration.systemd_ns` for every safety step: private
``/run``, ``/tmp``, ``/var/tmp``, masked tmpfiles units, a target of our own).
``docs/systemd/clankie.service`` is installed **as shipped** with the shipped
single-unit drop-in ``clankie.service.d/browser-child.conf`` (the browser a
child of the tree; the default, the browser in its own unit, is
:mod:`tests.integration.test_systemd_browser_unit`); one more drop-in
adds what a test needs and a real host would not:

* ``DefaultDependencies=no`` (the reference's boot recipe);
* the credential lines reset and the fakes' token and key given as
  ``Environment=`` instead: in this kernel sandbox systemd cannot mount its
  credential store, so ``LoadCredential=`` cannot be exercised here (the
  reference says so); everything else in the unit, sandboxing included, is
  the shipped one;
* the addresses of the loopback fakes (Discord, Anthropic, a web page) that
  run in this test's event loop on the host's network.

Checked: ``READY=1`` (the unit becomes active only then) with ``STATUS=4/4
running``; ``clankiectl`` finds ``/run/clankie`` with no variable at all; a
SIGKILLed child is restarted by the supervisor in place while systemd's
MainPID and NRestarts stay the same; a screenshot turn and a diagram turn
each arrive with their picture under the hardened unit; while a screenshot's
page load is held open, every Chromium renderer in the unit runs in
Chromium's own sandbox (``Seccomp: 2``, a network namespace other than the
supervisor's, a root other than ``/``: issue 24 item 3, which the unit's
``RestrictNamespaces=user pid net`` and ``chroot`` make possible);
each child writes native journal entries, so ``journalctl -u clankie
CODE=captain_usage_limit_reached`` finds a refused turn's line with its
``CHILD``, ``TURN`` and hashed ``LANE`` and ``CHILD=bridge`` the bridge's
(issue 27); ``systemctl stop`` leaves no process behind.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord, Post
from hosts.tldraw.examples import er_example
from tests.hosts.isolation import Seen, seen
from tests.integration.systemd_ns import NamespacedSystemd, require_namespaced_systemd
from tests.integration.tree import CHAN, GUILD, PERSON, Site
from tests.polling import until_probe
from tests.replies import read_receipts, settled_reply

T = TypeVar("T")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(170)]

UNIT = Path(__file__).resolve().parents[2] / "docs" / "systemd" / "clankie.service"
CHILD = UNIT.parent / "clankie.service.d" / "browser-child.conf"
CLANKIECTL = "/opt/clankie/venv/bin/clankiectl"
PNG = b"\x89PNG\r\n\x1a\n"
TREE = ("python", "chromium", "node", "clankie")


def drop_in(discord: FakeDiscord, anthropic: fa.FakeAnthropic, spares: str) -> str:
    """The test's settings for clankie.service; ``spares`` (``CLANKIE_SPARES``) names the children the story restarts."""
    return "\n".join([
        "[Unit]",
        "DefaultDependencies=no",
        "[Service]",
        "LoadCredential=",  # resets the list: this sandbox cannot mount a credential store (see above)
        "SetCredential=",
        f"Environment=DISCORD_TOKEN={discord.token}",
        "Environment=ANTHROPIC_API_KEY=sk-test-fake",
        f"Environment=CLANKIE_DISCORD_API_BASE={discord.api_base}",
        f"Environment=ANTHROPIC_BASE_URL={anthropic.base_url}",
        f"Environment=CLANKIE_DISCORD_GUILD_IDS={GUILD}",
        "Environment=CLANKIE_BROWSER_ALLOW_PRIVATE=true",
        "Environment=CLANKIE_DISCORD_TOOL_CARD=false",  # the unit is the subject here, not the tool-activity card
        f"Environment=CLANKIE_SPARES={spares}",
        "",
    ])


class Booted:
    """The namespaced systemd, driven from the test's event loop (its calls block, so they run in a thread)."""

    def __init__(self, ns: NamespacedSystemd, discord: FakeDiscord, anthropic: fa.FakeAnthropic) -> None:
        self.ns = ns
        self.discord = discord
        self.anthropic = anthropic

    async def show(self, *props: str) -> dict[str, str]:
        return await asyncio.to_thread(self.ns.show, "clankie.service", *props)

    async def ctl(self, *args: str) -> Any:
        """``clankiectl ... --json`` inside the namespace, with no CLANKIE_* or runtime variable set."""
        done = await asyncio.to_thread(self.ns.run, CLANKIECTL, *args, "--json")
        return json.loads(done.stdout)

    async def child(self, name: str) -> dict[str, Any]:
        status = await self.ctl("status")
        return next(c for c in status["children"] if c["name"] == name)

    async def wait_child(self, name: str, pred: Any, what: str) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            c = await self.child(name)
            return c if pred(c) else None

        return await poll(probe, 60, what, self.ns)

    def receipts(self) -> list[dict[str, Any]]:
        """The bridge's receipts in the unit's StateDirectory (DynamicUser= keeps it under /var/lib/private)."""
        assert self.ns.pid is not None
        return read_receipts(Path(f"/proc/{self.ns.pid}/root/var/lib/private/clankie/receipts/bridge.jsonl"))

    async def turn(self, scripted: list[fa.Reply], text: str) -> Post:
        """A person speaks; returns the post that settled that message's delivery (:mod:`tests.replies`)."""
        self.anthropic.script(*scripted)
        sent = await self.discord.message(CHAN, text, author_id=PERSON)

        async def reply() -> Post | None:
            return settled_reply(self.discord.posts, self.receipts(), str(sent["id"]))

        return await poll(reply, 60, f"a reply to {text!r}", self.ns)


async def poll(probe: Callable[[], Awaitable[T | None]], timeout: float, what: str, ns: NamespacedSystemd) -> T:
    """Poll an async probe of real state; fail with the unit's journal."""
    return await until_probe(probe, timeout, lambda: f"{what}\n{ns.journal()[-5000:]}", step=0.1)


def entries(ns: NamespacedSystemd, *match: str) -> list[dict[str, str]]:
    """``journalctl -u clankie MATCH... -o json`` inside the namespace: the unit's entries with those fields."""
    done = ns.run("journalctl", "--no-pager", "-o", "json", "-u", "clankie", *match, check=False, timeout=30)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def tree_processes(ns: NamespacedSystemd) -> list[str]:
    """Command lines of every clankie-related process left in the namespace (journald does not count)."""
    out = []
    for pid in ns.host_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        line = b" ".join(argv).decode(errors="replace")
        if any(word in line for word in TREE):
            out.append(line)
    return out


def sandboxed_renderers(ns: NamespacedSystemd) -> tuple[Seen, list[Seen]] | None:
    """The supervisor and every Chromium renderer in the namespace, once there is at least one renderer."""
    procs = [p for p in map(seen, ns.host_pids()) if p is not None]
    supervisor = next((p for p in procs if " ".join(p.argv).endswith("clankie run")), None)
    shown = [p for p in procs if p.kind == "renderer"]
    return (supervisor, shown) if supervisor is not None and shown else None


def test_the_shipped_unit_under_a_real_systemd(tmp_path: Path) -> None:
    """READY and STATUS=, a child restarted in place, a screenshot and a diagram, and a clean stop."""
    require_namespaced_systemd()  # skips only when unshare, nsenter or systemd is not installed

    async def main() -> None:
        discord, anthropic, site = FakeDiscord(guilds={GUILD: [CHAN]}), fa.FakeAnthropic(), Site()
        await discord.start()
        await anthropic.start()
        await site.start()
        ns = NamespacedSystemd(tmp_path / "systemd")
        ns.add_unit("clankie.service", UNIT.read_text())  # as shipped
        ns.add_unit("clankie.service.d/browser-child.conf", CHILD.read_text())  # the single-unit setup, as shipped
        ns.add_unit("clankie.service.d/test.conf", drop_in(discord, anthropic, "service"))  # the one it kills
        b = Booted(ns, discord, anthropic)
        try:
            ns.start()  # from this thread: it lives as long as the test (see NamespacedSystemd.start)
            await asyncio.to_thread(ns.wait_booted)

            async def ready() -> dict[str, str] | None:
                st = await b.show("ActiveState", "StatusText", "MainPID", "NRestarts")
                return st if st["ActiveState"] == "active" and st["StatusText"].startswith("4/4 running") else None

            before = await poll(ready, 90, "READY=1 with STATUS=4/4 running", ns)
            await b.wait_child("bridge", lambda c: "discord: connected" in c["detail"], "the bridge to reach Discord")

            victim = await b.child("service")
            assert victim["rss_bytes"] and victim["num_fds"], victim  # psutil still reads /proc under ProcSubset=pid
            await asyncio.to_thread(ns.run, "kill", "-KILL", str(victim["pid"]))
            back = await b.wait_child(
                "service", lambda c: c["state"] == "running" and c["pid"] not in (None, victim["pid"]), "the restart"
            )
            assert back["restarts"] == victim["restarts"] + 1 and back["last_exit"]["signal"] == "SIGKILL"
            after = await b.show("ActiveState", "StatusText", "MainPID", "NRestarts")
            assert after["MainPID"] == before["MainPID"] and after["NRestarts"] == before["NRestarts"]
            await poll(ready, 60, "STATUS=4/4 running again", ns)

            shot = await b.turn([fa.tool_use(("browser_screenshot", {"url": site.url()})), fa.text("the page")],
                                "clankie, show me the page")
            assert shot.content == "the page" and len(shot.files) == 1 and shot.files[0][1].startswith(PNG), shot
            held = asyncio.ensure_future(b.turn(
                [fa.tool_use(("browser_screenshot", {"url": site.url("/slow")})), fa.text("the slow page")],
                "clankie, show me the slow page"))

            async def renderers() -> tuple[Seen, list[Seen]] | None:
                return await asyncio.to_thread(sandboxed_renderers, ns) if "/slow" in site.hits else None

            supervisor, shown = await poll(renderers, 60, "a renderer while the slow page loads", ns)
            assert all(r.seccomp == 2 and r.netns != supervisor.netns and r.root != "/" for r in shown), shown
            site.release.set()
            slow = await held
            assert slow.content == "the slow page" and len(slow.files) == 1, slow
            drawn = await b.turn([fa.tool_use(("draw_er_diagram", er_example(3))), fa.text("the schema")],
                                 "clankie, draw the schema")
            assert drawn.content == "the schema" and len(drawn.files) == 1 and drawn.files[0][1].startswith(PNG), drawn

            # issue 27: each child's records are native journal entries, selectable by field
            anthropic.script(fa.spend_limit())
            refused = await discord.message(CHAN, "clankie, one more thing", author_id=PERSON)

            async def coded() -> list[dict[str, str]] | None:
                return await asyncio.to_thread(entries, ns, "CODE=captain_usage_limit_reached") or None

            entry = (await poll(coded, 60, "a journal entry with CODE=captain_usage_limit_reached", ns))[-1]
            assert (entry["CHILD"], entry["TURN"], entry["PRIORITY"]) == ("service", str(refused["id"]), "6"), entry
            assert len(entry["LANE"]) == 16 and entry["_SYSTEMD_UNIT"] == "clankie.service", entry
            bridge = await asyncio.to_thread(entries, ns, "CHILD=bridge")
            assert bridge and all(e["CHILD"] == "bridge" and e["SYSLOG_IDENTIFIER"] == "clankie" for e in bridge)

            await asyncio.to_thread(ns.systemctl, "stop", "clankie.service")
            gone = await b.show("ActiveState", "SubState", "Result")
            assert gone["ActiveState"] == "inactive" and gone["Result"] == "success", gone
            assert tree_processes(ns) == []
        finally:
            await asyncio.to_thread(ns.kill)
            site.release.set()
            await site.close()
            await anthropic.close()
            await discord.close()

    asyncio.run(main())
