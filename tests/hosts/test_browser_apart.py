"""Issue 24 items 1 and 2: Chromium in its own sandbox, and the browser host apart from root.

Run as root (as CI runs), the browser host process drops to ``CLANKIE_BROWSER_USER``
(``nobody``) before it starts anything; Chromium then sandboxes itself. These
tests read the result from /proc: uids, ``NoNewPrivs``, ``Seccomp``, network
namespaces and roots of the host, its Node driver and every renderer.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pwd
import tempfile
from pathlib import Path

import pytest

from clankie.artifacts import resolve_artifact
from clankie.errors import ConfigError, RemoteError
from hosts.browser import apart, chromium
from tests.hosts.hostproc import HostProcess, shoot
from tests.hosts.isolation import as_root, descendants, renderers, seen
from tests.hosts.pages import Site
from tests.polling import until

NOBODY = pwd.getpwnam("nobody").pw_uid
# What Chromium 156 printed, launched sandboxed as root (Playwright's message around it, as the host sees it).
ROOT_LAUNCH = """BrowserType.launch: Browser logs:

Chromium sandboxing failed!
================================
To avoid the sandboxing issue, do either of the following:
  - (preferred): Configure your environment to support sandboxing
================================
Call log:
  - <launched> pid=7838
  - [pid=7838][err] [1205/025500.507081:ERROR:content/browser/zygote_host/zygote_host_impl_linux.cc:103] \
Running as root without --no-sandbox is not supported. See https://crbug.com/638180.
  - [pid=7838] <process did exit: exitCode=1, signal=null>"""


@as_root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_as_root_the_host_node_and_chromium_run_as_the_browser_user_and_every_renderer_is_sandboxed(
    env: dict[str, str], state_dir: Path, tmp_path: Path
) -> None:
    """The host, its Node driver and Chromium run as nobody with no_new_privs; every renderer has Seccomp 2, a
    network namespace of its own and a root other than /; the picture lands in a nobody-owned <root>/browser and
    resolves by its hash as the bridge resolves it."""

    async def main() -> None:
        host_env = {**env, "CLANKIE_BROWSER_ALLOW_PRIVATE": "true"}
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            assert host.proc is not None
            pid = host.proc.pid
            shot = asyncio.ensure_future(shoot(host, site.origin + "/held"))  # its page load is held open ...
            await until(lambda: "/held" in site.hits and renderers(pid), 60, "a renderer loading the held page", step=0.1)
            ours = os.readlink("/proc/self/ns/net")
            shown = renderers(pid)  # ... while the test looks at every renderer
            assert shown and all(r.seccomp == 2 and r.netns != ours and r.root != "/" for r in shown), shown
            family = descendants(pid)
            site.release.set()
            art = await shot
            me = seen(pid)
            assert me is not None and (me.uid, me.no_new_privs) == (NOBODY, 1)
            assert {p.kind for p in family} >= {"node", "browser", "zygote", "renderer"}, family
            assert all(p.uid == NOBODY and p.no_new_privs == 1 for p in family), family

            directory = state_dir / "attachments" / "browser"
            assert (directory.stat().st_uid, directory.stat().st_mode & 0o777) == (NOBODY, 0o700)
            resolved = resolve_artifact(state_dir / "attachments", art.ref, 25 * 1024 * 1024)
            assert hashlib.sha256(resolved.data).hexdigest() == art.sha256

            beat = await host.next_heartbeat()
            assert beat.report["sandbox"] == "on" and beat.report["uid"] == NOBODY and beat.report["no_new_privs"]
            assert "sandbox on" in beat.detail and f"uid {NOBODY}" in beat.detail
        profiles = Path(tempfile.gettempdir()) / f"clankie-browser.{NOBODY}"
        assert (profiles.stat().st_uid, profiles.stat().st_mode & 0o777) == (NOBODY, 0o700)

    asyncio.run(main())


@as_root
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_browser_that_cannot_sandbox_refuses_with_its_own_code_and_says_why(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Kept as root (CLANKIE_BROWSER_USER=root) with the sandbox required, the host starts, warns, and answers every screenshot
    browser_sandbox_unavailable naming the cause; it never runs Chromium bare."""

    async def main() -> None:
        host_env = {**env, "CLANKIE_BROWSER_ALLOW_PRIVATE": "true", "CLANKIE_BROWSER_USER": "root"}
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            for _ in range(2):
                with pytest.raises(RemoteError) as info:
                    await shoot(host, site.origin + "/")
                assert info.value.code == "browser_sandbox_unavailable" and "as root" in str(info.value)
            assert host.proc is not None and not [p for p in descendants(host.proc.pid) if p.kind != "python"]
            assert site.hits == []
            beat = await host.next_heartbeat()
            assert beat.report["refused"] == {"browser_sandbox_unavailable": 2}
            assert beat.report["last_error"] == "sandbox_unavailable" and "sandbox on" in beat.detail
        assert "Chromium's sandbox cannot start here" in host.log()

    asyncio.run(main())


@as_root
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_with_the_hand_over_off_the_host_binds_its_socket_before_it_drops_root(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Nobody may bind in the supervisor's 0700 runtime dir, so with no socket handed down the host binds its own
    while still root (0600, root's), then goes apart and serves it: a screenshot works."""

    async def main() -> None:
        host_env = {**env, "CLANKIE_HANDOVER": "false", "CLANKIE_BROWSER_ALLOW_PRIVATE": "true"}
        async with Site() as site, HostProcess("browser", host_env, tmp_path / "host.log") as host:
            assert host.listener is None and host.proc is not None  # the harness handed nothing down
            me = seen(host.proc.pid)
            assert me is not None and me.uid == NOBODY
            st = host.socket.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
            art = await shoot(host, site.origin + "/")
            assert art.ref.startswith("sha256:")

    asyncio.run(main())


@as_root
@pytest.mark.timeout(60)
def test_a_driver_the_browser_user_cannot_run_is_a_configuration_error(env: dict[str, str], tmp_path: Path) -> None:
    """Gone apart, a Node driver in a directory only root can enter (a venv under /root) would fail every launch: the
    host exits 78 at once naming the file and the two ways out."""
    node = tmp_path / "private" / "node"
    node.parent.mkdir(mode=0o700)
    node.write_bytes(b"")
    node.chmod(0o755)

    async def main() -> None:
        host = HostProcess("browser", {**env, "PLAYWRIGHT_NODEJS_PATH": str(node)}, tmp_path / "host.log")
        await host.start(wait_ready=False)
        assert host.proc is not None
        assert await asyncio.wait_for(host.proc.wait(), 30) == 78
        await host.__aexit__(None, None, None)  # its link and the socket handed to it
        said = host.log()
        assert f"cannot run {node}" in said and "CLANKIE_BROWSER_USER=root" in said, said

    asyncio.run(main())


def test_the_user_to_drop_to() -> None:
    """Only root drops, and not to root; a name or a bare uid is looked up; an unknown name is a configuration error."""
    assert apart.target("nobody", euid=1000) is None
    assert apart.target("root", euid=0) is None and apart.target(" 0 ", euid=0) is None  # root named: stays root
    assert apart.target("nobody", euid=0) == (NOBODY, pwd.getpwnam("nobody").pw_gid)
    assert apart.target("4242424", euid=0) == (4242424, 4242424)  # no passwd entry: its own group
    for bad, said in (("no-such-user-here", "no user"),):
        with pytest.raises(ConfigError, match=said):
            apart.target(bad, euid=0)


def test_what_stands_in_the_sandboxs_way(tmp_path: Path) -> None:
    """Root, user namespaces switched off, or AppArmor's userns restriction each name themselves; none of them: None."""
    proc = tmp_path / "proc"
    (proc / "sys" / "user").mkdir(parents=True)
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "user" / "max_user_namespaces").write_text("96368\n")
    assert chromium.sandbox_obstacle(1000, proc) is None
    assert "as root" in (chromium.sandbox_obstacle(0, proc) or "")
    (proc / "sys" / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("1\n")
    assert "AppArmor" in (chromium.sandbox_obstacle(1000, proc) or "")
    (proc / "sys" / "user" / "max_user_namespaces").write_text("0\n")
    assert "max_user_namespaces = 0" in (chromium.sandbox_obstacle(1000, proc) or "")


def test_a_failed_sandboxed_launch_is_told_apart_by_chromiums_own_words() -> None:
    """Chromium's line says why; Playwright's banner around it is not the reason; other failures are not sandbox ones."""
    exc = RuntimeError(ROOT_LAUNCH)
    assert chromium.sandbox_failure(str(exc))
    assert chromium.sandbox_reason(exc).startswith("Running as root without --no-sandbox is not supported.")
    assert not chromium.sandbox_failure("BrowserType.launch: Target page, context or browser has been closed")
