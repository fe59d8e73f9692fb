"""msgpack-RPC over Unix sockets: both directions, faults, and hostile peers."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from clankie import framing, ipc, protocol
from clankie.errors import ChannelBroken, ChannelClosed, ConfigError, RemoteError, RequestTimeout
from clankie.protocol import HistoryReply, HistoryRequest, Room, TurnResult, TurnSubmit
from tests.polling import until

ROOM = Room(guild_id="1", channel_id="2")
WAITING: list[asyncio.Event] = []  # set by echo_service when a "forever" call is parked


def submit(delivery: str, text: str = "hi") -> TurnSubmit:
    return TurnSubmit.model_validate(
        {"delivery_id": delivery, "room": ROOM.to_wire(), "trigger": {"message_id": "9", "author": {"id": "5"}, "text": text}}
    )


async def echo_service(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
    assert isinstance(params, TurnSubmit)
    if params.trigger.text == "boom":
        raise RuntimeError("handler bug")
    if params.trigger.text == "refuse":
        raise RemoteError("delivery_conflict", "same id, different body")
    if params.trigger.text == "ask-back":
        reply = await conn.request("history", HistoryRequest(delivery_id=params.delivery_id, room=ROOM))
        assert isinstance(reply, HistoryReply)
        return TurnResult.settled(f"{len(reply.messages)} messages")
    if params.trigger.text == "forever":
        for parked in WAITING:
            parked.set()
        await asyncio.Event().wait()
    return TurnResult.settled(params.trigger.text, turn_id=params.delivery_id)


def run(coro_fn: Callable[[Path], Awaitable[Any]], runtime_dir: Path) -> Any:
    return asyncio.run(asyncio.wait_for(coro_fn(runtime_dir / "service.sock"), 30))


def test_requests_flow_both_ways_on_one_connection(runtime_dir: Path) -> None:
    """While answering the bridge, the service can call the bridge back on the same connection."""

    async def bridge(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
        return HistoryReply(messages=())

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            conn = await ipc.connect(path, "bridge", bridge)
            assert conn.peer is not None and conn.peer.role == "service"
            result = await conn.request("turn.submit", submit("d1", "ask-back"))
            assert isinstance(result, TurnResult) and result.text == "0 messages"
            await conn.aclose()

    run(main, runtime_dir)


def test_many_requests_in_flight_resolve_to_their_own_callers(runtime_dir: Path) -> None:
    """Concurrent calls on one connection each get their own answer."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            conn = await ipc.connect(path, "bridge")
            results = await asyncio.gather(*(conn.request("turn.submit", submit(f"d{i}", f"t{i}")) for i in range(200)))
            assert [r.text for r in results] == [f"t{i}" for i in range(200)]  # type: ignore[attr-defined]  # request() without expect= is typed Record; these replies are echo records
            await conn.aclose()

    run(main, runtime_dir)


def test_errors_are_typed_by_who_is_at_fault(runtime_dir: Path) -> None:
    """A refusal keeps its code, a handler bug is internal_error, a gone peer is ChannelBroken."""

    async def main(path: Path) -> None:
        server = await ipc.serve(path, "service", echo_service)
        conn = await ipc.connect(path, "bridge")
        with pytest.raises(RemoteError) as info:
            await conn.request("turn.submit", submit("d", "refuse"))
        assert info.value.code == "delivery_conflict"
        with pytest.raises(RemoteError) as info:
            await conn.request("turn.submit", submit("d", "boom"))
        assert info.value.code == "internal_error"
        parked = asyncio.Event()
        WAITING[:] = [parked]
        pending = asyncio.create_task(conn.request("turn.submit", submit("d", "forever")))
        await asyncio.wait_for(parked.wait(), 5)
        await server.close()
        with pytest.raises(ChannelBroken):
            await pending
        with pytest.raises(ChannelBroken):
            await conn.request("turn.submit", submit("d"))

        server = await ipc.serve(path, "service", echo_service)
        conn = await ipc.connect(path, "bridge")
        await conn.aclose()
        with pytest.raises(ChannelClosed):
            await conn.request("turn.submit", submit("d"))
        await server.close()

    run(main, runtime_dir)


def test_a_cancelled_call_cancels_the_remote_handler(runtime_dir: Path) -> None:
    """When the caller gives up, the handler on the other side is cancelled too."""
    cancelled = asyncio.Event

    async def main(path: Path) -> None:
        seen = cancelled()

        async def handler(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen.set()
                raise
            return None

        async with ipc.Server(path, "service", handler):
            conn = await ipc.connect(path, "bridge")
            with pytest.raises(RequestTimeout):
                await conn.request("turn.submit", submit("d"), timeout=0.05)
            await asyncio.wait_for(seen.wait(), 5)
            await conn.aclose()

    run(main, runtime_dir)


def test_handlers_run_in_their_own_task(runtime_dir: Path) -> None:
    """A handler may use asyncio.timeout and current_task like any coroutine."""

    async def handler(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
        assert asyncio.current_task() is not None
        async with asyncio.timeout(5):
            return TurnResult.silent()

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", handler):
            conn = await ipc.connect(path, "bridge")
            result = await conn.request("turn.submit", submit("d"))
            assert isinstance(result, TurnResult) and result.outcome == "silent"
            await conn.aclose()

    run(main, runtime_dir)


def test_protocol_version_mismatch_is_refused(runtime_dir: Path) -> None:
    """A peer speaking another protocol version gets a clear error and is disconnected."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            reader, writer = await asyncio.open_unix_connection(os.fspath(path))
            writer.write(framing.encode([0, 0, "hello", {"role": "bridge", "pid": 1, "protocol": 99}]))
            dec = framing.FrameDecoder()
            dec.feed(await reader.read(65536))
            reply = dec.next_message()
            assert reply[0] == 1 and reply[2]["code"] == "protocol_mismatch"
            assert await reader.read(10) == b""
            writer.close()

    run(main, runtime_dir)


def test_unknown_methods_and_bad_params_get_errors_and_the_connection_lives(runtime_dir: Path) -> None:
    """invalid_request and method_not_found are answers, not disconnects."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            reader, writer = await asyncio.open_unix_connection(os.fspath(path))
            writer.write(framing.encode([0, 0, "hello", {"role": "bridge", "pid": 1, "protocol": 1}]))
            writer.write(framing.encode([0, 1, "rm_rf", {}]))
            writer.write(framing.encode([0, 2, "turn.submit", {"delivery_id": 5}]))
            writer.write(framing.encode([0, 3, "turn.submit", submit("ok", "fine").to_wire()]))
            dec = framing.FrameDecoder()
            replies: dict[int, Any] = {}
            while len(replies) < 4:
                dec.feed(await reader.read(65536))
                while (msg := dec.next_message()) is not framing.NEED_DATA:
                    replies[msg[1]] = msg
            assert replies[1][2]["code"] == "method_not_found"
            assert replies[2][2]["code"] == "invalid_request"
            assert replies[3][3]["text"] == "fine"
            writer.close()

    run(main, runtime_dir)


def test_anything_before_hello_closes_the_connection(runtime_dir: Path) -> None:
    """A peer that skips the handshake is dropped."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            reader, writer = await asyncio.open_unix_connection(os.fspath(path))
            writer.write(framing.encode([0, 1, "turn.submit", submit("d").to_wire()]))
            assert await asyncio.wait_for(reader.read(65536), 5) == b""
            writer.close()

    run(main, runtime_dir)


def test_pipelining_1000_requests_in_one_write(runtime_dir: Path) -> None:
    """A thousand requests in one write get a thousand answers."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            reader, writer = await asyncio.open_unix_connection(os.fspath(path))
            frames = [framing.encode([0, 0, "hello", {"role": "bridge", "pid": 1, "protocol": 1}])]
            frames += [framing.encode([0, i, "turn.submit", submit(f"d{i}", f"t{i}").to_wire()]) for i in range(1, 1001)]
            writer.write(b"".join(frames))
            dec = framing.FrameDecoder()
            got: dict[int, str] = {}
            while len(got) < 1000:
                dec.feed(await reader.read(1 << 20))
                while (msg := dec.next_message()) is not framing.NEED_DATA:
                    if msg[1]:
                        got[msg[1]] = msg[3]["text"]
            assert got == {i: f"t{i}" for i in range(1, 1001)}
            writer.close()

    run(main, runtime_dir)


def test_a_client_that_never_reads_is_dropped_and_others_keep_working(runtime_dir: Path) -> None:
    """A peer that stops reading costs its own connection, never the server."""

    async def big(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
        return TurnResult.settled("x" * 7000)

    async def main(path: Path) -> None:
        server = ipc.Server(path, "service", big, max_output=64 * 1024)
        await server.start()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(os.fspath(path))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, framing.encode([0, 0, "hello", {"role": "bridge", "pid": 1, "protocol": 1}]))
        body = b"".join(framing.encode([0, i, "turn.submit", submit(f"d{i}").to_wire()]) for i in range(1, 400))
        await loop.sock_sendall(sock, body)
        await until(lambda: not server.connections, what="the non-reading client to be dropped", step=0.02)
        other = await ipc.connect(path, "bridge")
        result = await other.request("turn.submit", submit("fine"))
        assert isinstance(result, TurnResult)
        await other.aclose()
        sock.close()
        await server.close()

    run(main, runtime_dir)


def test_connections_past_the_cap_are_refused_and_the_rest_keep_working(runtime_dir: Path) -> None:
    """A flood of idle connections cannot exhaust the server: past the cap new ones are turned away."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service, max_connections=5) as server:
            idle = [await ipc.connect(path, "bridge") for _ in range(5)]
            with pytest.raises(ChannelBroken):
                await ipc.connect(path, "bridge", timeout=2)
            assert server.refused == 1
            await idle[0].aclose()
            await until(lambda: len(server.connections) < 5, what="the closed connection to leave the server")
            again = await ipc.connect(path, "bridge")
            result = await again.request("turn.submit", submit("d", "after"))
            assert isinstance(result, TurnResult) and result.text == "after"
            for conn in (*idle[1:], again):
                await conn.aclose()

    run(main, runtime_dir)


def test_the_hello_carries_the_attachment_root_it_was_given(runtime_dir: Path) -> None:
    """A child's hello says which attachment root it derived, so the supervisor can compare."""

    async def main(path: Path) -> None:
        a, b = socket.socketpair()
        server_side = asyncio.create_task(ipc.from_socket(a, "supervisor", None, initiate=False))
        child = await ipc.from_socket(b, "child", None, initiate=True, attachment_root="/srv/art")
        sup = await server_side
        assert sup.peer is not None and sup.peer.attachment_root == "/srv/art"
        await child.aclose()
        await sup.aclose()

    run(main, runtime_dir)


def test_a_half_sent_frame_times_out(runtime_dir: Path) -> None:
    """A peer that stops in the middle of a frame is disconnected after the read timeout."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service, partial_frame_timeout=0.1):
            reader, writer = await asyncio.open_unix_connection(os.fspath(path))
            writer.write(framing.encode([0, 0, "hello", {"role": "bridge", "pid": 1, "protocol": 1}]))
            writer.write(struct.pack(">I", 100) + b"\x93")
            data = await asyncio.wait_for(reader.read(65536), 5)  # the hello reply
            while data:
                data = await asyncio.wait_for(reader.read(65536), 5)
            writer.close()

    run(main, runtime_dir)


def test_oversized_frame_is_refused_with_an_error_then_closed(runtime_dir: Path) -> None:
    """A length prefix past the limit gets message_too_large and the connection ends."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service, max_frame=4096):
            reader, writer = await asyncio.open_unix_connection(os.fspath(path))
            writer.write(framing.encode([0, 0, "hello", {"role": "bridge", "pid": 1, "protocol": 1}]))
            writer.write(b"\xff\xff\xff\xff")
            raw = b""
            while chunk := await asyncio.wait_for(reader.read(65536), 5):
                raw += chunk
            dec = framing.FrameDecoder()
            dec.feed(raw)
            dec.next_message()  # hello reply
            note = dec.next_message()
            assert note[0] == 2 and note[2]["code"] == "message_too_large"
            writer.close()

    run(main, runtime_dir)


def test_socket_file_is_0600_and_a_stale_one_is_replaced(runtime_dir: Path) -> None:
    """A dead server's socket file is removed; the new one is private."""
    path = runtime_dir / "service.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(path))
    stale.close()

    async def main(p: Path) -> None:
        async with ipc.Server(p, "service", echo_service):
            assert p.stat().st_mode & 0o777 == 0o600
            conn = await ipc.connect(p, "bridge")
            await conn.aclose()

    run(main, runtime_dir)


def test_a_live_server_is_never_replaced(runtime_dir: Path) -> None:
    """Starting a second server on a live socket is a configuration error."""

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", echo_service):
            with pytest.raises(ConfigError, match="already listening"):
                await ipc.serve(path, "service", echo_service)
            conn = await ipc.connect(path, "bridge")
            await conn.request("turn.submit", submit("still-here"))
            await conn.aclose()

    run(main, runtime_dir)


def test_a_peer_running_as_another_uid_is_refused(runtime_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """SO_PEERCRED: a client that is not us (or root) is disconnected unanswered, and the log names its pid and uid."""
    if os.getuid() != 0:
        pytest.fail("this check needs root to start a client as nobody; CI runs as root")
    probe = (
        "import socket,struct,sys,msgpack\n"
        "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);s.settimeout(5)\n"
        "b=msgpack.packb([0,0,'hello',{'role':'bridge','pid':1,'protocol':1}])\n"
        "try:\n"
        "    s.sendall(struct.pack('>I',len(b))+b)\n"
        "    print('EOF' if s.recv(100)==b'' else 'ANSWERED')\n"
        "except (ConnectionResetError, BrokenPipeError):\n"
        "    print('EOF')\n"
    )

    async def main(path: Path) -> None:
        server = await ipc.serve(path, "service", echo_service)
        os.chmod(runtime_dir, 0o711)
        os.chmod(path, 0o666)
        proc = await asyncio.create_subprocess_exec(
            "/usr/bin/env", "python3", "-S", "-c", "import sys; sys.path[:0]=sys.argv[2:]\n" + probe, os.fspath(path),
            os.path.dirname(os.path.dirname(msgpack.__file__)),
            user=65534, group=65534, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd="/",
        )
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        assert out.decode().strip() == "EOF", err.decode()
        assert server.refused == 1
        [refusal] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
        assert refusal == f"refused a service client: pid {proc.pid} runs as uid 65534"
        conn = await ipc.connect(path, "bridge")
        await conn.request("turn.submit", submit("own-uid-ok"))
        await conn.aclose()
        await server.close()

    run(main, runtime_dir)


def test_a_reply_too_big_for_a_frame_is_answered_with_an_error(runtime_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A handler whose answer exceeds the frame limit gives its caller message_too_large at once, and the connection keeps serving."""

    async def handler(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
        assert isinstance(params, TurnSubmit)
        size = 10_000 if params.trigger.text == "huge" else 1
        return TurnResult.settled("x" * size)

    async def main(path: Path) -> None:
        async with ipc.Server(path, "service", handler, max_frame=4096):
            conn = await ipc.connect(path, "bridge")
            with pytest.raises(RemoteError) as info:
                await conn.request("turn.submit", submit("d1", "huge"), timeout=5)
            assert info.value.code == "message_too_large"
            assert "frame limit" in info.value.message
            result = await conn.request("turn.submit", submit("d2", "small"), timeout=5)
            assert isinstance(result, TurnResult) and result.text == "x"
            await conn.aclose()

    run(main, runtime_dir)
    [warning] = [r.getMessage() for r in caplog.records if "not sent" in r.getMessage()]
    assert "turn.submit" in warning and "4096-byte" in warning and "xxx" not in warning


async def _awaiting_hello(sock: socket.socket) -> tuple[ipc.Connection, asyncio.Task[protocol.Hello]]:
    conn = ipc.Connection(role="supervisor")
    await asyncio.get_running_loop().create_unix_connection(lambda: conn, sock=sock)
    waiter = asyncio.create_task(conn.server_hello(timeout=5))
    await asyncio.sleep(0)  # let it park on the hello
    return conn, waiter


def test_cancelling_a_wait_for_hello_stays_a_cancellation(runtime_dir: Path) -> None:
    """Whoever cancels a task waiting for a peer's hello sees CancelledError, and the connection is closed."""

    async def main(path: Path) -> None:
        a, b = socket.socketpair()
        with b:
            conn, waiter = await _awaiting_hello(a)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert isinstance(conn.close_reason, ChannelClosed)
            b.setblocking(False)
            assert await asyncio.wait_for(asyncio.get_running_loop().sock_recv(b, 10), 5) == b""

    run(main, runtime_dir)


def test_a_peer_that_leaves_or_stays_silent_before_hello_is_channel_broken(runtime_dir: Path) -> None:
    """A peer that hangs up, or says nothing, before its hello ends the wait with ChannelBroken."""

    async def main(path: Path) -> None:
        a, b = socket.socketpair()
        _conn, waiter = await _awaiting_hello(a)
        b.close()
        with pytest.raises(ChannelBroken):
            await waiter

        a, b = socket.socketpair()
        with b:
            conn = ipc.Connection(role="supervisor")
            await asyncio.get_running_loop().create_unix_connection(lambda: conn, sock=a)
            with pytest.raises(ChannelBroken, match="no hello"):
                await conn.server_hello(timeout=0.05)
            assert conn.closed

    run(main, runtime_dir)


def test_calls_past_the_in_flight_cap_are_refused_visibly_and_the_connection_lives(
    runtime_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At ``max_inflight`` running handlers a request gets ``too_many_requests`` and a notification is
    dropped, both counted and logged; once a handler ends the connection takes calls again."""

    async def main(path: Path) -> None:
        parked: list[asyncio.Event] = []
        released = asyncio.Event()

        async def bridge(conn: ipc.Connection, method: str, params: protocol.Record) -> protocol.Record | None:
            if method == "history" and isinstance(params, HistoryRequest) and params.delivery_id.startswith("park"):
                parked.append(asyncio.Event())
                parked[-1].set()
                try:
                    await asyncio.Event().wait()
                finally:
                    released.set()
            return HistoryReply(messages=()) if method == "history" else None

        limits = ipc.Limits(max_inflight=2)
        async with ipc.Server(path, "bridge", bridge, limits=limits) as server:
            conn = await ipc.connect(path, "service")
            calls = [asyncio.create_task(conn.request("history", HistoryRequest(delivery_id=f"park{i}", room=ROOM)))
                     for i in range(2)]
            await until(lambda: len(parked) >= 2, what="both calls parked in the handler", step=0)
            served = next(iter(server.connections))
            with pytest.raises(RemoteError) as refused:
                await conn.request("history", HistoryRequest(delivery_id="third", room=ROOM))
            assert refused.value.code == protocol.Code.TOO_MANY_REQUESTS
            await conn.notify("typing", protocol.TypingSignal(delivery_id="d"))
            with pytest.raises(RemoteError):  # answered after the notification was seen (and dropped)
                await conn.request("history", HistoryRequest(delivery_id="check", room=ROOM))
            assert served.over_cap == 3
            assert "2 calls already in flight" in caplog.text
            calls[0].cancel()
            await released.wait()
            await asyncio.sleep(0)
            again = await conn.request("history", HistoryRequest(delivery_id="after", room=ROOM))
            assert isinstance(again, HistoryReply) and served.over_cap == 3
            calls[1].cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            await conn.aclose()

    run(main, runtime_dir)
