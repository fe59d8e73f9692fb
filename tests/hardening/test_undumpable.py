"""Issue 24 item 4: the secret holders are non-dumpable, and status still shows each child's memory and fds.

On a real tree, a process of the tree's own uid without ``CAP_SYS_PTRACE``
(what a compromised renderer would be) gets ``EACCES`` on
``/proc/<service>/environ``, ``/proc/<bridge>/mem`` and the supervisor's
``environ``, while the same process still reads a dumpable child's
(the tldraw host's) ``environ``, so it is the dumpable flag that closes them
and not some other wall. ``clankiectl status`` still shows every child's
resident memory and open fds: each child measures itself and says so in its
heartbeat.

The tree runs as an unprivileged uid: run as root (CI), the test starts it
as ``nobody`` (``setpriv``; Debian's ``/usr/bin/python3`` with the venv's
packages on ``PYTHONPATH``, since the venv's interpreter may live under a
``/root`` that ``nobody`` cannot enter) and reads as ``nobody`` too. Root
itself is no case here: with ``CAP_SYS_PTRACE`` it passes every ``/proc``
check, and a root tree's browser runs under a uid of its own anyway.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.integration.tree import CLANKIE, REPO, real_tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

NOBODY = 65534
SHIM = "import sys; from supervisor.app import main; sys.exit(main(sys.argv[2:]))"
"""Runs ``clankie run`` as ``python3 -c SHIM <clankie> run``: the console script's interpreter may be out of reach."""


def as_nobody() -> tuple[str, ...]:
    return ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")


def unprivileged_tree(state: Path) -> Sequence[str]:
    return (*as_nobody(), "/usr/bin/python3", "-c", SHIM)


READER = r"""
import errno, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            f.read(1)
        out[path] = "read"
    except OSError as exc:
        out[path] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
"""


def same_uid_reader(paths: list[str]) -> dict[str, str]:
    """What a same-uid process without CAP_SYS_PTRACE gets opening each path."""
    prefix = (*as_nobody(), "/usr/bin/python3") if os.geteuid() == 0 else (sys.executable,)
    done = subprocess.run([*prefix, "-c", READER, *paths], capture_output=True, text=True, timeout=30, check=True)
    got: dict[str, str] = json.loads(done.stdout)
    return got


def test_secret_holders_refuse_same_uid_readers_and_status_still_shows_memory_and_fds(runtime_dir: Path) -> None:
    """EACCES on the service's environ and the bridge's mem (and the supervisor's environ); a host's environ reads; status has rss and fds."""
    root = os.geteuid() == 0
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    with tempfile.TemporaryDirectory(prefix="ck-undump-", dir="/tmp") as d:
        tmp = Path(d)
        (tmp / "state").mkdir(mode=0o700)
        if root:  # everything the tree writes belongs to the uid it runs as
            for path in (tmp, tmp / "state", runtime_dir):
                os.chown(path, NOBODY, NOBODY)
        env = {"PYTHONPATH": f"{REPO}:{site_packages}", "CLANKIE_BROWSER_SANDBOX": "off"}

        async def main() -> None:
            async with real_tree(tmp, runtime_dir, env=env, prefix=unprivileged_tree if root else None, spares=False) as t:
                status = await t.status()
                pids = {c.name: c.pid for c in status.children}
                assert all(pids.values()), pids
                service, bridge, tldraw = (f"/proc/{pids[n]}" for n in ("service", "bridge", "tldraw"))
                supervisor = f"/proc/{t.proc.pid}"
                paths = [f"{service}/environ", f"{bridge}/mem", f"{supervisor}/environ", f"{service}/mem",
                         f"{bridge}/environ", f"{tldraw}/environ"]
                got = await asyncio.to_thread(same_uid_reader, paths)
                assert got == {
                    f"{service}/environ": "EACCES", f"{bridge}/mem": "EACCES", f"{supervisor}/environ": "EACCES",
                    f"{service}/mem": "EACCES", f"{bridge}/environ": "EACCES",
                    f"{tldraw}/environ": "read",  # dumpable, same uid: it is the flag that closes the others
                }

                ctl = Path(CLANKIE).with_name("clankiectl")
                done = await asyncio.create_subprocess_exec(str(ctl), "--socket", str(t.sock), "status", "--json",
                                                            stdout=asyncio.subprocess.PIPE)
                out, _ = await done.communicate()
                assert done.returncode == 0
                children = {c["name"]: c for c in json.loads(out)["children"]}
                for name in ("service", "bridge", "browser", "tldraw"):
                    row = children[name]
                    assert row["rss_bytes"] > 10 * 1024 * 1024, (name, row)  # a Python process with its imports
                    assert row["num_fds"] >= 4, (name, row)  # stdio and its link at least
                    assert row["cpu_percent"] is not None and row["cpu_percent"] >= 0

        asyncio.run(main())
