"""Issue 24 item 3: the browser host in its own unit, as a real process with real sockets and a real Chromium.

Socket-activated as systemd does it (fd 3, ``LISTEN_FDS``, ``LISTEN_PID``),
it serves the socket it was handed, not one of its own; it writes each
screenshot where another uid can open it by its hash but not list it; it
serves only the uid it is told to and refuses any other with
``peer_uid_refused``, counted in its heartbeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pwd
import stat
from pathlib import Path

import pytest

from clankie import protocol
from clankie.artifacts import resolve_artifact
from tests.hosts.external import ExternalHost, external_env
from tests.hosts.hostproc import HostProcess
from tests.hosts.isolation import seen
from tests.hosts.pages import Site

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
NOBODY = pwd.getpwnam("nobody").pw_uid


def test_a_socket_activated_host_serves_the_socket_it_was_handed_and_writes_pictures_the_tree_can_verify(
    tmp_path: Path,
) -> None:
    """Handed a listening socket at fd 3 with LISTEN_PID its own, the host serves it (and binds nothing at
    CLANKIE_BROWSER_SOCKET); the screenshot lands 0644 in a 0711 directory under CLANKIE_BROWSER_ARTIFACTS and resolves
    by its hash; run as root it serves as nobody; SIGTERM stops it cleanly."""
    env = external_env(tmp_path)
    handed = tmp_path / "systemd" / "browser.sock"

    async def main() -> None:
        async with Site() as site, ExternalHost(env, tmp_path / "host.log", activated=handed) as host:
            conn = await host.client()
            try:
                art = await conn.request("screenshot", protocol.ScreenshotRequest(url=site.origin + "/"), timeout=70)
            finally:
                await conn.aclose()
            assert isinstance(art, protocol.Artifact)
            assert not Path(env["CLANKIE_BROWSER_SOCKET"]).exists(), "it bound a socket of its own"
            shared = Path(env["CLANKIE_BROWSER_ARTIFACTS"]) / "browser"
            picture = shared / f"{art.sha256}.png"
            assert stat.S_IMODE(shared.stat().st_mode) == 0o711
            assert stat.S_IMODE(picture.stat().st_mode) == 0o644
            resolved = resolve_artifact(shared.parent, art.ref, 25 * 1024 * 1024)
            assert hashlib.sha256(resolved.data).hexdigest() == art.sha256
            me = seen(host.pid)
            assert me is not None
            if os.geteuid() == 0:
                assert (me.uid, me.no_new_privs, picture.stat().st_uid) == (NOBODY, 1, NOBODY)
            assert await host.stop() == 0, host.log()[-2000:]

    asyncio.run(main())


def test_a_peer_of_another_uid_is_refused_peer_uid_refused_and_counted(tmp_path: Path, runtime_dir: Path) -> None:
    """Told to serve uid 4242 only, the host answers this process's hello peer_uid_refused, counts it in its
    heartbeat and its status line, and serves nothing to it."""
    env = {**external_env(tmp_path, CLANKIE_BROWSER_CLIENT_UID="4242", CLANKIE_HANDOVER="false"),
           "CLANKIE_RUNTIME_DIR": str(runtime_dir), "CLANKIE_HEARTBEAT_SECONDS": "0.2"}
    assert os.getuid() != 4242
    outside = ExternalHost(env, tmp_path / "unused.log")  # only to dial the socket the host binds itself

    async def main() -> None:
        async with HostProcess("browser", env, tmp_path / "host.log") as host:
            assert await outside.refusal() == "peer_uid_refused"
            beat = await host.next_heartbeat()
            while beat.report["peers_refused"] == {}:  # a heartbeat sent before the refusal
                beat = await host.next_heartbeat()
            assert beat.report["peers_refused"] == {"peer_uid_refused": 1}
            assert "1 peers refused" in beat.detail
            assert beat.report["served"] == 0
            assert f"pid {os.getpid()} runs as uid {os.getuid()}; this browser host serves uid 4242 only" in host.log()

    asyncio.run(main())
