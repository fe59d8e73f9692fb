"""Test harness: the browser host run outside the tree, as its own process with no supervisor (issue 24 item 3).

:class:`ExternalHost` starts ``python -m hosts.browser`` with
``CLANKIE_BROWSER_HOST=external`` and no link, as ``clankie-browser.service``
does. Given ``activated`` it is socket-activated as systemd does it: the test
binds the listening socket, and the host finds it at fd 3 with ``LISTEN_FDS=1``
and ``LISTEN_PID`` its own pid (a small launcher sets both and ``exec``s the
host, so the pid is the host's). It is stopped with SIGTERM, as systemd stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path

from clankie import ipc, sockfile
from clankie.errors import ChannelBroken, RemoteError
from tests.polling import until

REPO = Path(__file__).resolve().parents[2]
ACTIVATE = (  # what systemd does between fork and exec: the socket at fd 3, LISTEN_PID the pid that execs the host
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.environ['LISTEN_PID'] = str(os.getpid()); "
    "os.environ['LISTEN_FDS'] = '1'; os.execv(sys.argv[2], sys.argv[2:])"
)


def external_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The host's environment: its own state dir, its socket and artifact dir under ``tmp``, pages on 127.0.0.1."""
    state = tmp / "browser-unit"
    state.mkdir(mode=0o700, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "HOME": str(state),
        "CLANKIE_STATE": str(state),
        "CLANKIE_RUNTIME_DIR": str(state / "run"),
        "CLANKIE_BROWSER_HOST": "external",
        "CLANKIE_BROWSER_SOCKET": str(tmp / "browser-sock" / "browser.sock"),
        "CLANKIE_BROWSER_ARTIFACTS": str(tmp / "browser-artifacts"),
        "CLANKIE_BROWSER_ALLOW_PRIVATE": "true",  # the test pages are on 127.0.0.1
        **extra,
    }


class ExternalHost:
    """One browser host process outside any tree; use ``async with``."""

    def __init__(self, env: dict[str, str], log_path: Path, *, activated: Path | None = None) -> None:
        self.env = env
        self.log_path = log_path
        self.activated = activated  # bind here and hand it over at fd 3, as systemd's socket unit does
        self.socket = activated if activated is not None else Path(env["CLANKIE_BROWSER_SOCKET"])
        self.proc: asyncio.subprocess.Process | None = None
        self.listener: socket.socket | None = None

    async def start(self) -> None:
        argv: tuple[str, ...] = (sys.executable, "-m", "hosts.browser")
        fds: tuple[int, ...] = ()
        if self.activated is not None:
            self.activated.parent.mkdir(mode=0o700, exist_ok=True)
            self.listener = await sockfile.bind_listener(self.activated)
            fds = (self.listener.fileno(),)
            argv = (sys.executable, "-c", ACTIVATE, str(self.listener.fileno()), *argv)
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, env=self.env, pass_fds=fds, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=REPO, start_new_session=True,
            )
        await until(self._answers, 45, f"the external browser host answering on {self.socket}", step=0.1)

    def _answers(self) -> bool:
        """It says so once it serves (a probe connection would count as a peer, and maybe as a refused one)."""
        assert self.proc is not None
        assert self.proc.returncode is None, f"the host exited {self.proc.returncode}: {self.log()[-2000:]}"
        return "hosts.runtime: serving on" in self.log()

    async def client(self) -> ipc.Connection:
        return await ipc.connect(self.socket, "service")

    async def refusal(self) -> str:
        """Dial and say hello as the service would; the code it is refused with ("" if it is served)."""
        try:
            conn = await self.client()
        except RemoteError as exc:
            return exc.code
        except ChannelBroken as exc:
            cause = exc.__cause__
            return cause.code if isinstance(cause, RemoteError) else f"broken: {exc}"
        await conn.aclose()
        return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self) -> int:
        """SIGTERM, as systemd stops the unit; SIGKILL to the group after 15 s. Returns the exit status."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def __aenter__(self) -> ExternalHost:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None:
            await self.stop()
        if self.listener is not None:
            self.listener.close()
