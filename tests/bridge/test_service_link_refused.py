"""The bridge's link to the service outlives a refused hello.

A service started cold serves its socket before the supervisor has named its clients, so the bridge's first dial
may be answered ``peer_not_allowed``: the link waits its backoff and dials again, and the bridge keeps running
(before, the refusal left the link's task and took the whole bridge down).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bridge.service_link import ServiceLink
from clankie import ipc
from clankie.backoff import Backoff
from clankie.peers import Refusal
from clankie.protocol import Code
from clankie.testing.clock import FakeClock
from tests.polling import until


async def _nothing(conn: ipc.Connection, method: str, params: object) -> None:
    return None


def test_a_hello_refused_until_the_supervisor_names_the_bridge_is_dialled_again(
    runtime_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        named = False
        refused: list[int] = []

        def admit(pid: int, uid: int) -> Refusal | None:
            if named:
                return None
            refused.append(pid)
            return Refusal(Code.PEER_NOT_ALLOWED, f"pid {pid}: the supervisor has named no client of this socket yet")

        path = runtime_dir / "service.sock"
        server = await ipc.serve(path, "service", _nothing, admit=admit)
        clock = FakeClock(autojump=True)
        link = ServiceLink(path, _nothing, clock, Backoff(base=0.05, cap=1.0, reset_after=30.0))
        task = asyncio.create_task(link.run())
        try:
            await until(lambda: len(refused) >= 2 or task.done(), 20, "two refused hellos")
            assert not task.done(), task  # the refusal never ends the link
            named = True
            await until(lambda: link.status == "connected" or task.done(), 20, "the link connected")
            assert not task.done(), task
            assert link.connects == 1 and clock.slept  # it waited its backoff between the dials
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await server.close()

    with caplog.at_level(logging.WARNING, logger="bridge.service_link"):
        asyncio.run(asyncio.wait_for(body(), 30))
    assert any("refused this bridge's hello (peer_not_allowed)" in r.getMessage() for r in caplog.records)
