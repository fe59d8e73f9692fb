"""Issue 24 item 5: a socket serves the process the supervisor named, by pid; anyone else hears why and is counted."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from clankie import ipc
from clankie.errors import ChannelBroken, RemoteError
from clankie.peers import SERVES, HandedPeers, allowed
from clankie.protocol import Record


async def echo(conn: ipc.Connection, method: str, params: Record) -> Record | None:
    return None


def test_each_socket_is_dialled_by_the_child_the_supervisor_names() -> None:
    """service.sock by the bridge; the host sockets by the service and its warm spare; the bridge serves none."""
    pids = {"bridge": [11], "service": [21, 22], "browser": [31], "tldraw": [41]}
    assert allowed("service", pids) == (11,)
    assert allowed("browser", pids) == allowed("tldraw", pids) == (21, 22)
    assert allowed("bridge", pids) is None and set(SERVES) == {"service", "browser", "tldraw"}
    assert allowed("service", {"service": [21]}) == ()  # no bridge yet: nobody


def test_the_list_a_child_holds() -> None:
    """Started by hand: the uid rule alone; linked to a supervisor: nobody until it names someone; then just them."""
    handed = HandedPeers()
    assert handed.admit(1234, 0) is None
    handed.expect()
    refusal = handed.admit(1234, 0)
    assert refusal is not None and refusal.code == "peer_not_allowed" and "named no client" in refusal.reason
    handed.allow([1234])
    assert handed.admit(1234, 0) is None
    handed.expect()  # a second link does not forget the list
    refused = handed.admit(999, 0)
    assert refused is not None and "not the process the supervisor named" in refused.reason


def test_a_peer_the_supervisor_did_not_name_hears_peer_not_allowed_and_is_counted(runtime_dir: Path) -> None:
    """A same-uid client that is not on the list gets its hello answered peer_not_allowed and the connection closed,
    before any request is read; the server counts the refusal by code; once named, the same process gets in."""

    async def main() -> None:
        handed = HandedPeers()
        handed.expect()
        path = runtime_dir / "service.sock"
        server = await ipc.serve(path, "service", echo, admit=handed.admit)
        try:
            for _ in range(3):
                with pytest.raises((RemoteError, ChannelBroken)) as info:
                    await ipc.connect(path, "bridge")
                assert "peer_not_allowed" in str(info.value) + str(info.value.__cause__)
            assert server.refusals == {"peer_not_allowed": 3} and server.refused == 3 and not server.connections
            handed.allow([os.getpid()])
            conn = await ipc.connect(path, "bridge")
            assert conn.peer is not None and conn.peer.role == "service"
            await conn.aclose()
            assert server.refusals == {"peer_not_allowed": 3}
        finally:
            await server.close()

    asyncio.run(main())
