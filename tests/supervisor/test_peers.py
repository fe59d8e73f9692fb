"""Issue 24 item 5, the supervisor's side: each child hears who may dial it; control.sock refuses the tree itself."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from clankie import ipc
from clankie.protocol import Peers, Record
from supervisor.owner import Owner
from supervisor.peers import MAX_DEPTH, Announcer, descends_from, outside_the_tree, parent_pid
from supervisor.process import Child
from tests.polling import until

DIAL = """
import asyncio, sys
from clankie import ipc
async def main():
    try:
        conn = await ipc.connect(__import__("pathlib").Path(sys.argv[1]), "supervisor-control")
    except Exception as exc:
        print("refused", exc, exc.__cause__, flush=True)
        return
    print("admitted", flush=True)
    await conn.aclose()
asyncio.run(main())
"""


async def nothing(conn: ipc.Connection, method: str, params: Record) -> Record | None:
    return None


def test_descent_is_walked_through_parents_and_ends_where_the_family_does() -> None:
    """A grandchild descends from its grandparent; a stranger, a process gone mid-walk and init's children do not;
    a cycle (pid reuse mid-walk) ends the walk as descended, so it is refused rather than looping."""
    parents = {30: 20, 20: 10, 10: 1, 40: 1, 50: 99}
    assert descends_from(30, 10, parents.get) and descends_from(10, 10, parents.get)
    assert not descends_from(40, 10, parents.get) and not descends_from(50, 10, parents.get)
    assert descends_from(7, 10, {7: 8, 8: 7}.get)
    assert MAX_DEPTH >= 1024


def test_control_sock_refuses_a_process_of_the_tree_and_admits_one_outside_it(runtime_dir: Path) -> None:
    """Run with this process as the supervisor: its own child dialling control.sock hears peer_in_tree; the same
    program orphaned out of the family (re-parented away, as an operator's shell is) is admitted; refusals counted."""

    async def main() -> None:
        path = runtime_dir / "control.sock"
        server = await ipc.serve(path, "supervisor-control", nothing, admit=outside_the_tree)
        try:
            child = await asyncio.create_subprocess_exec(sys.executable, "-c", DIAL, str(path),
                                                         stdout=subprocess.PIPE)
            said, _ = await child.communicate()
            assert said.decode().startswith("refused") and "peer_in_tree" in said.decode(), said
            assert server.refusals == {"peer_in_tree": 1}

            # `sh` starts the dialler in the background and exits at once: the dialler's parent is then init (or
            # whichever subreaper sits above this test), not this process
            orphan = await asyncio.create_subprocess_exec(
                "sh", "-c", f'{sys.executable} -c "$0" "$1" > "$2" 2>&1 &', DIAL, str(path), str(runtime_dir / "out"))
            assert await orphan.wait() == 0
            out = runtime_dir / "out"
            said_now = await until(lambda: out.exists() and out.read_text().strip(), 60, "the orphan dialler's verdict", step=0.1)
            assert said_now == "admitted"
            assert server.refusals == {"peer_in_tree": 1}
        finally:
            await server.close()

    asyncio.run(main())


def test_a_gone_process_has_no_parent() -> None:
    """parent_pid reads /proc; a pid above any pid_max is nobody's child."""
    assert parent_pid(999_999_999) is None
    assert parent_pid(1) == 0


class FakeLink:
    def __init__(self) -> None:
        self.closed = False
        self.heard: list[tuple[int, ...]] = []

    async def notify(self, method: str, params: Peers) -> None:
        assert method == "peers"
        self.heard.append(params.pids)


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid: int | None = pid
        self.link: FakeLink | None = FakeLink()


class FakeChild:
    def __init__(self, name: str, pid: int | None, spare: int | None = None) -> None:
        self.name = name
        self.proc = FakeProc(pid) if pid is not None else None
        self.spare = SimpleNamespace(proc=FakeProc(spare) if spare is not None else None)


class FakeOwner:
    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        self.tasks.append(asyncio.ensure_future(coro))
        return self.tasks[-1]


def test_each_process_hears_its_list_once_per_change_spares_included() -> None:
    """The service hears the bridge's pid, each host the service's and its spare's (the spare host too); an unchanged
    tree says nothing again; a restarted bridge is named to the service at once; a closed link hears nothing."""

    async def main() -> None:
        owner = FakeOwner()
        announcer = Announcer(cast(Owner, owner))
        service, bridge = FakeChild("service", 20, spare=21), FakeChild("bridge", 10)
        browser, tldraw = FakeChild("browser", 30, spare=31), FakeChild("tldraw", 40)
        tree = cast(list[Child], [service, bridge, browser, tldraw])

        def heard(child: FakeChild, spare: bool = False) -> list[tuple[int, ...]]:
            proc = child.spare.proc if spare else child.proc
            assert proc is not None and proc.link is not None
            return proc.link.heard

        announcer.announce(tree)
        announcer.announce(tree)
        await asyncio.gather(*owner.tasks)
        assert heard(service) == heard(service, spare=True) == [(10,)]
        assert heard(browser) == heard(browser, spare=True) == heard(tldraw) == [(20, 21)]
        assert heard(bridge) == []  # it serves no socket

        old = bridge.proc
        assert old is not None and old.link is not None
        old.link.closed = True
        bridge.proc = FakeProc(11)
        announcer.announce(tree)
        await asyncio.gather(*owner.tasks)
        assert heard(service) == [(10,), (11,)] and heard(browser) == [(20, 21)]

    asyncio.run(main())
