"""Test harness: a host started as a real process, with the test playing its supervisor.

:class:`HostProcess` spawns ``python -m hosts.<name>`` with the given
environment and a socketpair on ``CLANKIE_SUPERVISOR_FD``; the test end of
the pair speaks the ``supervisor`` role and records ``ready``, heartbeats
and ``stopping``. :func:`raw_call` sends hand-made msgpack frames, for
requests no well-behaved client could build.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from clankie import framing, ipc, paths, protocol, sockfile
from clankie.errors import RemoteError
from clankie.handover import LISTEN_FDS_ENV, listen_fds_value
from clankie.protocol import Heartbeat, Peers, Record, Stopping

READY_TIMEOUT = 45.0


class HostProcess:
    """One host process under test; use ``async with``."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.env = {**env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self.link: ipc.Connection | None = None
        self.ready = asyncio.Event()
        self.heartbeats: list[Heartbeat] = []
        self.beat = asyncio.Event()
        self.stopping: list[str] = []
        self.listener: socket.socket | None = None  # bound here and handed down, as the supervisor does

    @property
    def socket(self) -> Path:
        return paths.socket_path(Path(self.env["CLANKIE_RUNTIME_DIR"]), self.name)

    async def _on_link(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if method == "ready":
            self.ready.set()
        elif method == "heartbeat":
            assert isinstance(params, Heartbeat)
            self.heartbeats.append(params)
            self.beat.set()
        elif method == "stopping":
            assert isinstance(params, Stopping)
            self.stopping.append(params.reason)
        return None

    async def start(self, *, wait_ready: bool = True) -> None:
        ours, theirs = socket.socketpair()
        env = {**self.env, "CLANKIE_SUPERVISOR_FD": str(theirs.fileno())}
        if self.name == "browser" and self.listener is None and self.env.get("CLANKIE_HANDOVER", "true") != "false":
            # as the supervisor does: the socket is bound here and handed down (the browser host run as root goes
            # apart and could not bind in the runtime dir itself); the tldraw tests bind their own
            paths.ensure_private_dir(self.socket.parent)
            self.listener = await sockfile.bind_listener(self.socket)
        if self.listener is not None:
            env[LISTEN_FDS_ENV] = listen_fds_value({self.name: self.listener.fileno()})
        fds = (theirs.fileno(),) if self.listener is None else (theirs.fileno(), self.listener.fileno())
        with open(self.log_path, "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"hosts.{self.name}",
                env=env,
                pass_fds=fds,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        theirs.close()
        ours.setblocking(False)
        self.link = await ipc.from_socket(ours, "supervisor", self._on_link, initiate=False, timeout=20)
        await self.link.notify("peers", Peers(pids=(os.getpid(),)))  # as the supervisor names the service: here, us
        if wait_ready:
            await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT)

    async def next_heartbeat(self, timeout: float = 10.0) -> Heartbeat:
        self.beat.clear()
        await asyncio.wait_for(self.beat.wait(), timeout)
        return self.heartbeats[-1]

    async def client(self) -> ipc.Connection:
        return await ipc.connect(self.socket, "service")

    async def shutdown(self, timeout: float = 15.0) -> int:
        """Ask for a clean stop over the link; return the exit status."""
        assert self.proc is not None and self.link is not None
        with contextlib.suppress(Exception):
            await self.link.notify("shutdown", Stopping(reason="test"))
        return await asyncio.wait_for(self.proc.wait(), timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def __aenter__(self) -> HostProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.alive():
            try:
                await self.shutdown()
            except TimeoutError:
                assert self.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                await self.proc.wait()
        if self.link is not None:
            await self.link.aclose()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()


async def raw_call(path: Path, method: str, params: Any, timeout: float = 10.0) -> dict[str, Any] | None:
    """Say hello by hand, send one request with raw ``params``, return the error map (None on success)."""
    reader, writer = await asyncio.open_unix_connection(os.fspath(path))
    decoder = framing.FrameDecoder()

    async def receive() -> Any:
        while True:
            msg = decoder.next_message()
            if msg is framing.NEED_DATA:
                decoder.feed(await asyncio.wait_for(reader.read(65536), timeout))
                continue
            return msg

    try:
        hello = {"role": "service", "pid": os.getpid(), "protocol": protocol.PROTOCOL_VERSION}
        writer.write(framing.encode(protocol.request(0, "hello", hello)))
        await receive()
        writer.write(framing.encode(protocol.request(1, method, params)))
        reply = await receive()
        return reply[2]
    finally:
        writer.close()


def policy_env(env: dict[str, str]) -> dict[str, str]:
    """A browser host's environment in which ``allowed.test`` resolves to loopback and is trusted (the pin)."""
    return {**env, "CLANKIE_BROWSER_PINNED_HOSTS": "allowed.test=127.0.0.1"}


async def attempt(host: HostProcess, url: str) -> protocol.Artifact | RemoteError:
    """One screenshot request: its picture, or the error it was refused with."""
    try:
        return await shoot(host, url)
    except RemoteError as exc:
        return exc


async def shoot(host: HostProcess, url: str, **fields: Any) -> protocol.Artifact:
    """One screenshot request of ``url`` (``fields``: ScreenshotRequest's optional ones), over a connection of its own."""
    conn = await host.client()
    try:
        result = await conn.request("screenshot", protocol.ScreenshotRequest(url=url, **fields), timeout=70)
    finally:
        await conn.aclose()
    assert isinstance(result, protocol.Artifact)
    return result
