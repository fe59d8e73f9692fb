"""Issue 14 item 2: each secret reaches only the process that needs it, on a real tree.

The supervisor is started the way an operator might (``DISCORD_TOKEN`` and
``ANTHROPIC_API_KEY`` in its environment, plus a ``CREDENTIALS_DIRECTORY``).
After a screenshot turn (so Chromium and Playwright's Node driver are up),
``/proc/<pid>/environ`` of **every** descendant is read: none holds either
secret, its variable name, or the credentials directory. The service still
answers with the model (it got the key) and the bridge is connected (it got
the token): both came over the one-shot pipe of :mod:`clankie.secrets`.
"""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import psutil
import pytest

from clankie.secrets import hand_over, receive
from clankie.testing import fake_anthropic as fa
from tests.integration.tree import real_tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

TOKEN = b"fake-token"  # FakeDiscord's token: the tree passes it as DISCORD_TOKEN
KEY = b"sk-test-fake"  # the tree's ANTHROPIC_API_KEY
NAMES = (b"DISCORD_TOKEN=", b"ANTHROPIC_API_KEY=", b"CREDENTIALS_DIRECTORY=")
HANDOVER = b"CLANKIE_SECRETS_FD="  # only the service and the bridge are handed a pipe


def variable(environ: bytes, name: bytes) -> bytes | None:
    for item in environ.split(b"\0"):
        if item.startswith(name):
            return item[len(name):]
    return None


def environ_of(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None  # it ended while we looked


def open_to_others(state: Path) -> list[str]:
    """Everything under ``state`` that grants group or other any access (sockets and symlinks aside)."""
    found = []
    for path in [state, *state.rglob("*")]:
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue  # Chromium's profile changes while we walk it
        if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            continue
        if st.st_mode & 0o077:
            found.append(f"{stat.S_IMODE(st.st_mode):04o} {path.relative_to(state)}")
    return found


def test_no_descendant_of_the_supervisor_holds_a_secret_in_its_environment(tmp_path: Path, runtime_dir: Path) -> None:
    """Hosts, Chromium, Node, the service, the bridge and their spares: no secret and no secret variable in any
    environ."""

    async def main() -> None:
        creds = tmp_path / "credentials"
        creds.mkdir(mode=0o700)
        env = {"CLANKIE_BROWSER_ALLOW_PRIVATE": "true", "CREDENTIALS_DIRECTORY": str(creds),
               "CLANKIE_DISCORD_TOOL_CARD": "false"}  # environments are the subject here, not what the room sees
        async with real_tree(tmp_path, runtime_dir, env) as t:
            assert "provider unconfigured" not in (await t.child("service")).detail
            t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": t.site.url()})), fa.text("the page"))
            post = await t.ask("clankie, show me the page")
            assert post.content == "the page" and len(post.files) == 1  # the key reached the service
            # the bridge's parked spare (logged in with the token it was handed) is among the processes looked at
            spare = (await t.wait_child(lambda c: c.spare.startswith("parked"), "bridge", 60)).spare_pid
            supervisor = psutil.Process(t.proc.pid)
            assert TOKEN in (environ_of(supervisor.pid) or b"")  # the operator really gave it to the supervisor
            seen: dict[int, list[str]] = {}
            for proc in supervisor.children(recursive=True):
                environ = environ_of(proc.pid)
                if environ is None:
                    continue
                try:
                    seen[proc.pid] = proc.cmdline()
                except psutil.NoSuchProcess:
                    continue
                leaked = [n.decode() for n in NAMES if variable(environ, n) is not None]
                assert TOKEN not in environ and KEY not in environ, (proc.pid, seen[proc.pid][:2])
                assert leaked == [], (seen[proc.pid][:3], leaked)
                fd = variable(environ, HANDOVER)
                if fd is not None:
                    assert seen[proc.pid][1:3] in (["-m", "service"], ["-m", "bridge"]), seen[proc.pid][:3]
            assert spare in seen and seen[spare][1:3] == ["-m", "bridge"]
            kinds = " ".join(" ".join(argv) for argv in seen.values())
            assert "chromium" in kinds and "/driver/node" in kinds, kinds[:2000]
            for module in ("service", "bridge", "hosts.browser", "hosts.tldraw"):
                assert any(argv[1:3] == ["-m", module] for argv in seen.values()), module
            assert "discord: connected" in (await t.child("bridge")).detail  # the token reached the bridge
            assert open_to_others(t.state) == []  # item 1: all the tree created under state is 0700/0600


    asyncio.run(main())


def test_a_handed_over_secret_is_read_once_and_never_lands_in_os_environ() -> None:
    """The pipe round trip: the value comes back under its variable name, the fd is closed, os.environ untouched."""
    import os

    fd = hand_over({"discord_token": "tok-123"})
    got = receive({"CLANKIE_SECRETS_FD": str(fd), "PATH": "/bin"})
    assert got == {"DISCORD_TOKEN": "tok-123", "PATH": "/bin"}
    assert "DISCORD_TOKEN" not in os.environ or os.environ["DISCORD_TOKEN"] != "tok-123"
    with pytest.raises(OSError):
        os.fstat(fd)
