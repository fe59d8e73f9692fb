"""control.sock under bad input, and clankiectl's exit codes, against a real socket."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from clankie import ipc
from clankie import settings as settings_mod
from clankie.clock import SystemClock
from clankie.errors import ConfigError, RemoteError
from clankie.protocol import Empty, StatusReply
from supervisor import ctl
from supervisor.control import CONTROL_MAX_INFLIGHT, Control
from supervisor.tree import Tree


def with_control(
    env: dict[str, str], runtime_dir: Path, body: Callable[[Path], Awaitable[None]], partial_timeout: float = 10.0
) -> None:
    async def go() -> None:
        tree = Tree(settings_mod.load(env), [], clock=SystemClock(), env=env, subreaper=False)
        control = Control(tree, partial_frame_timeout=partial_timeout)
        path = runtime_dir / "control.sock"
        await control.start(path)
        try:
            await body(path)
        finally:
            await control.close()

    asyncio.run(go())


async def status_ok(path: Path) -> None:
    conn = await ipc.connect(path, "test")
    reply = await conn.request("status", Empty(), timeout=5)
    assert isinstance(reply, StatusReply) and reply.supervisor.pid == os.getpid()
    await conn.aclose()


async def raw_exchange(path: Path, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    data = b""
    try:
        writer.write(payload)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    except ConnectionError:
        pass  # the server hung up on us mid-write: that is the expected outcome
    writer.close()
    return data


def test_c31_random_bytes_close_that_connection_only(env: dict[str, str], runtime_dir: Path) -> None:
    """1 MiB of garbage closes the sender's connection; other clients keep working."""

    async def body(path: Path) -> None:
        await raw_exchange(path, os.urandom(1024 * 1024))
        await status_ok(path)

    with_control(env, runtime_dir, body)


def test_c32_a_truncated_frame_then_silence_is_closed_after_the_read_timeout(env: dict[str, str], runtime_dir: Path) -> None:
    """A client that sends half a frame and then idles is disconnected; others are served meanwhile."""

    async def body(path: Path) -> None:
        conn = await ipc.connect(path, "test")  # a well-behaved client first, so the slow one is past hello
        reader, writer = await asyncio.open_unix_connection(str(path))
        hello = b"\x94\x00\x00\xa5hello\x83\xa4role\xa4slow\xa3pid\x01\xa8protocol\x01"
        writer.write(struct.pack(">I", len(hello)) + hello)
        writer.write(struct.pack(">I", 100) + b"\x94")  # 1 of 100 promised bytes
        await writer.drain()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await status_ok(path)
        assert await conn.request("status", Empty(), timeout=5)
        rest = await asyncio.wait_for(reader.read(), 5)
        assert rest is not None and loop.time() - t0 < 3  # read() returned: EOF, the server hung up
        writer.close()
        await conn.aclose()

    with_control(env, runtime_dir, body, partial_timeout=0.3)


def test_c33_oversized_length_prefix_is_refused_before_buffering(env: dict[str, str], runtime_dir: Path) -> None:
    """A 0xFFFFFFFF length prefix gets a message_too_large error and a close; nothing is buffered."""

    async def body(path: Path) -> None:
        data = await raw_exchange(path, struct.pack(">I", 0xFFFFFFFF) + b"\x00" * 64)
        assert b"message_too_large" in data
        await status_ok(path)

    with_control(env, runtime_dir, body)


def test_c36_c38_malformed_rpc_and_unknown_methods_get_error_replies(env: dict[str, str], runtime_dir: Path) -> None:
    """A bad envelope with a readable msgid and an unknown method each get a coded error, not a crash."""

    async def body(path: Path) -> None:
        conn = await ipc.connect(path, "test")
        with pytest.raises(RemoteError) as exc:
            await conn._call("no_such", {}, 5)
        assert exc.value.code == "method_not_found"
        with pytest.raises(RemoteError) as exc:
            await conn._call("start", {"name": ""}, 5)
        assert exc.value.code == "invalid_request"
        with pytest.raises(RemoteError) as exc:
            await conn._call("start", {"name": "ghost"}, 5)
        assert exc.value.code == "no_such_child"
        await conn.aclose()
        await status_ok(path)

    with_control(env, runtime_dir, body)


def test_c41_a_client_of_another_uid_is_refused(env: dict[str, str], runtime_dir: Path) -> None:
    """SO_PEERCRED: a connection from a different (non-root) uid is closed before any payload."""
    if os.getuid() != 0:
        pytest.skip("needs root to connect as another uid")

    async def body(path: Path) -> None:
        os.chmod(runtime_dir, 0o755)
        os.chmod(path, 0o666)  # let the other uid reach the socket at all
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            "import os,socket,sys; os.setuid(65534); s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
            "\ntry:\n s.sendall(b'x'); print(len(s.recv(10)))\nexcept OSError: print(0)",
            str(path), stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
        assert out.strip() == b"0"  # closed, nothing answered
        await status_ok(path)

    with_control(env, runtime_dir, body)


def test_c42_socket_is_private_from_the_moment_it_exists(env: dict[str, str], runtime_dir: Path) -> None:
    """control.sock is mode 0600 in a 0700 directory."""

    async def body(path: Path) -> None:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700

    with_control(env, runtime_dir, body)


def test_c43_stale_socket_is_replaced_and_a_live_one_refused(env: dict[str, str], runtime_dir: Path) -> None:
    """A dead instance's socket file is removed and rebound; a live instance makes a second one refuse to start."""
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(runtime_dir / "control.sock"))
    stale.close()  # the file stays, nobody listens

    async def body(path: Path) -> None:
        await status_ok(path)
        tree = Tree(settings_mod.load(env), [], clock=SystemClock(), env=env, subreaper=False)
        with pytest.raises(ConfigError, match="already listening"):
            await Control(tree).start(path)
        assert path.exists()

    with_control(env, runtime_dir, body)


def test_c47_clankiectl_without_a_supervisor_says_so_and_exits_69(runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No daemon: a readable message, no traceback, exit 69."""
    code = ctl.main(["--socket", str(runtime_dir / "control.sock"), "status"])
    err = capsys.readouterr().err
    assert code == 69 and "not running" in err and "Traceback" not in err
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(runtime_dir / "control.sock"))
    stale.close()
    assert ctl.main(["--socket", str(runtime_dir / "control.sock"), "status"]) == 69
    assert "refuses connections" in capsys.readouterr().err


def test_c47_a_hung_supervisor_is_bounded_by_timeout(runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A supervisor that accepts but never answers costs --timeout seconds and exit 69."""
    hung = socket.socket(socket.AF_UNIX)
    hung.bind(str(runtime_dir / "control.sock"))
    hung.listen(1)
    try:
        code = ctl.main(["--socket", str(runtime_dir / "control.sock"), "--timeout", "0.3", "status"])
    finally:
        hung.close()
    err = capsys.readouterr().err
    assert code == 69 and "not answering" in err and "Traceback" not in err


def test_clankiectl_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown command or a missing argument is a usage error: exit 2."""
    assert ctl.main(["frobnicate"]) == 2
    assert ctl.main(["restart"]) == 2
    capsys.readouterr()


def test_status_json_from_a_live_control_socket(env: dict[str, str], runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`clankiectl status --json` prints the supervisor block with pid, uptime_s and state."""

    async def body(path: Path) -> None:
        code = await asyncio.to_thread(ctl.main, ["--socket", str(path), "status", "--json"])
        assert code == 0

    with_control(env, runtime_dir, body)
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"supervisor", "children"} and set(doc["supervisor"]) >= {"pid", "uptime_s", "state"}


def test_a_control_connection_runs_at_most_a_few_calls_at_once(env: dict[str, str], runtime_dir: Path) -> None:
    """control.sock's connections carry CONTROL_MAX_INFLIGHT (clankiectl makes one call at a time); past it a
    call gets ``too_many_requests`` (the cap itself: tests/clankie/test_ipc.py)."""

    async def go() -> None:
        tree = Tree(settings_mod.load(env), [], clock=SystemClock(), env=env, subreaper=False)
        control = Control(tree)
        await control.start(runtime_dir / "control.sock")
        assert control.server is not None
        try:
            conn = await ipc.connect(runtime_dir / "control.sock", "test")
            await conn.request("status", Empty(), timeout=5)
            assert [c.max_inflight for c in control.server.connections] == [CONTROL_MAX_INFLIGHT]
            assert CONTROL_MAX_INFLIGHT == 8
            await conn.aclose()
        finally:
            await control.close()

    asyncio.run(go())
