"""Issue 24 item 5, the supervisor's side: each child hears who may dial it; control.sock refuses the tree itself,
and (issue 37) any peer it cannot prove outside the tree."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from clankie import ipc
from clankie.protocol import Peers, Record
from supervisor.owner import Owner
from supervisor.peers import Announcer, no_new_privs, outside_the_tree, parent_pid, peer_pidfd
from supervisor.process import Child
from supervisor.provenance import MAX_DEPTH, Standing, Verdict, Where, admitted, beyond_our_namespace, locate
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


class World:
    """A process table for :func:`locate`: pid -> parent, the live pids, handles on processes; ``on_open`` may change
    the world the moment a handle is opened (an exit, a re-parenting, a pid reused)."""

    def __init__(self, parents: dict[int, int], hidden: frozenset[int] = frozenset()) -> None:
        self.parents = dict(parents)
        self.live = set(parents)
        self.hidden = hidden
        self.handles: dict[int, tuple[int, int]] = {}  # handle -> (pid, generation of that pid)
        self.generation: dict[int, int] = dict.fromkeys(parents, 0)
        self.on_open: Callable[[World, int], None] | None = None
        self._next = 1000

    def handle_on(self, pid: int) -> int:
        self._next += 1
        self.handles[self._next] = (pid, self.generation[pid])
        return self._next

    def exit(self, pid: int, reaper: int) -> None:
        """``pid`` exits and is reaped; its children go to ``reaper``."""
        self.live.discard(pid)
        del self.parents[pid]
        for child, parent in list(self.parents.items()):
            if parent == pid:
                self.parents[child] = reaper

    def spawn(self, pid: int, parent: int) -> None:
        self.parents[pid] = parent
        self.live.add(pid)
        self.generation[pid] = self.generation.get(pid, 0) + 1

    def _same(self, handle: int) -> bool:
        pid, gen = self.handles[handle]
        return pid in self.live and self.generation[pid] == gen

    def pid(self, handle: int) -> int:
        return self.handles[handle][0]

    def parent(self, handle: int) -> int | None:
        pid = self.handles[handle][0]
        return None if pid in self.hidden else self.parents.get(pid)  # /proc shows whoever has the pid now

    def alive(self, handle: int) -> bool:
        return self._same(handle)

    def open(self, pid: int) -> int | None:
        if self.on_open is not None:
            hook, self.on_open = self.on_open, None
            hook(self, pid)
        return self.handle_on(pid) if pid in self.live else None

    def close(self, handle: int) -> None:
        del self.handles[handle]


SUPERVISOR = 10
TREE = {SUPERVISOR: 5, 5: 1, 20: SUPERVISOR, 30: 20, 40: 1, 41: 40}  # 20 a child, 30 its child; 41 an operator's


def where(world: World, pid: int) -> Where:
    peer = world.handle_on(pid)
    verdict = locate(peer, SUPERVISOR, world)
    assert verdict.why
    world.close(peer)
    assert world.handles == {}, "every handle the walk opened is closed"
    return verdict.where


def test_the_tree_is_inside_and_an_operator_outside() -> None:
    """A grandchild and a child of the supervisor are inside, the supervisor itself too; a process whose chain reaches
    init without meeting it is outside."""
    world = World(TREE)
    assert [where(world, pid) for pid in (30, 20, SUPERVISOR)] == [Where.INSIDE] * 3
    assert where(world, 41) is Where.OUTSIDE and where(world, 40) is Where.OUTSIDE


def test_a_peer_that_is_gone_or_unreadable_is_unproven_not_outside() -> None:
    """The issue's hole: a peer that connected and exited (its pid names nobody, or a zombie) is not outside; nor is
    one whose /proc cannot be read."""
    world = World(TREE)
    gone = world.handle_on(30)
    world.exit(30, SUPERVISOR)
    assert locate(gone, SUPERVISOR, world).where is Where.UNPROVEN
    world.close(gone)
    world.live.discard(41)  # a zombie: /proc still shows its parent, but it has exited
    assert where(world, 41) is Where.UNPROVEN
    assert where(World(TREE, hidden=frozenset({41})), 41) is Where.UNPROVEN


def test_a_parent_that_exits_mid_walk_is_unproven() -> None:
    """The parent exits between the read of its pid and the handle on it: gone (no handle), or, its child re-parented
    to the subreaper supervisor, the re-read of the child disagrees."""
    world = World(TREE)
    world.on_open = lambda w, pid: w.exit(pid, SUPERVISOR)
    assert where(world, 30) is Where.UNPROVEN


def test_a_parents_pid_reused_by_a_stranger_mid_walk_is_unproven() -> None:
    """20 exits (30 is re-parented to the supervisor) and a process outside the tree gets pid 20 just before the
    handle is opened: without the re-read of 30 the walk would follow the stranger to init and call 30 outside."""
    world = World(TREE)

    def reuse(w: World, pid: int) -> None:
        w.exit(20, SUPERVISOR)
        w.spawn(20, 1)

    world.on_open = reuse
    assert where(world, 30) is Where.UNPROVEN


def test_a_chain_too_deep_or_looping_is_unproven() -> None:
    """A chain past MAX_DEPTH (a loop, as a world mid-change can show) is not proven outside."""
    assert where(World({7: 8, 8: 7}), 7) is Where.UNPROVEN
    assert MAX_DEPTH >= 1024


DEAD_DIAL = """
import socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
"""


def test_control_sock_refuses_a_peer_gone_before_it_was_checked(runtime_dir: Path) -> None:
    """This process as the supervisor: its loop is blocked while a child connects and exits and is reaped; when the
    accept comes, the peer is gone, and it is refused ``peer_unproven`` (it used to be let in as "outside")."""

    async def main() -> None:
        path = runtime_dir / "control.sock"
        server = await ipc.serve(path, "supervisor-control", nothing, admit_socket=outside_the_tree)
        try:
            subprocess.run([sys.executable, "-c", DEAD_DIAL, str(path)], check=True)  # blocks the loop: no accept yet
            await until(lambda: server.refused, 30, "the dead peer's refusal")
            assert server.refusals == {"peer_unproven": 1}
            assert server.connections == set()
        finally:
            await server.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("where", "uid", "our_uid", "nnp", "alive", "let_in"),
    [
        (Where.OUTSIDE, 1000, 1000, False, True, True),  # the operator's own clankiectl, its chain read whole
        (Where.INSIDE, 1000, 1000, True, True, False),  # a process of the tree
        (Where.INSIDE, 0, 1000, True, True, False),  # inside is inside, whatever its uid
        (Where.UNPROVEN, 1000, 1000, True, True, False),  # our uid, unreadable: it could be ours
        (Where.UNPROVEN, 0, 1000, True, True, True),  # root's clankiectl under ProtectProc=invisible
        (Where.UNPROVEN, 0, 1000, True, False, False),  # ... but a gone one is not
        (Where.UNPROVEN, 0, 1000, False, True, False),  # without no_new_privs a child could have become root (sudo)
        (Where.UNPROVEN, 0, 0, True, True, False),  # a root tree: root is our own uid
    ],
)
def test_the_peer_decision(where: Where, uid: int, our_uid: int, nnp: bool, alive: bool, let_in: bool) -> None:
    """Proven outside: in. Inside or gone: out. Unproven: in only as a live root peer of a non-root supervisor with
    no_new_privs, since no process of such a tree can ever be root."""
    assert admitted(Verdict(where, "why"), Standing(uid=uid, our_uid=our_uid, no_new_privs=nnp, alive=alive)) is let_in


def test_no_new_privs_is_read_from_proc(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\n")
    assert no_new_privs(str(status))
    status.write_text("Name:\tx\nNoNewPrivs:\t0\n")
    assert not no_new_privs(str(status)) and not no_new_privs(str(tmp_path / "missing"))


def test_control_sock_refuses_a_process_of_the_tree_and_admits_one_outside_it(runtime_dir: Path) -> None:
    """Run with this process as the supervisor: its own child dialling control.sock hears peer_in_tree; the same
    program orphaned out of the family (re-parented away, as an operator's shell is) is admitted; refusals counted."""

    async def main() -> None:
        path = runtime_dir / "control.sock"
        server = await ipc.serve(path, "supervisor-control", nothing, admit_socket=outside_the_tree)
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


class NoPidfdOption:
    """A socket on a kernel without SO_PEERPIDFD (before 6.5), or one whose peer is gone."""

    def __init__(self, err: int) -> None:
        self.err = err

    def getsockopt(self, level: int, option: int) -> int:
        raise OSError(self.err, os.strerror(self.err))


def test_without_so_peerpidfd_the_peers_pidfd_is_opened_by_its_pid_and_a_gone_peer_has_none() -> None:
    """ENOPROTOOPT (an old kernel): pidfd_open of the pid, a live process's; EINVAL from the option (the peer is gone):
    no pidfd at all, so the peer is refused; a pid of 0 (a peer we cannot see) has none either."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fd = peer_pidfd(cast(socket.socket, NoPidfdOption(errno.ENOPROTOOPT)), child.pid)
        assert fd is not None
        os.close(fd)
        assert peer_pidfd(cast(socket.socket, NoPidfdOption(errno.EINVAL)), child.pid) is None
        assert peer_pidfd(cast(socket.socket, NoPidfdOption(errno.ENOPROTOOPT)), 0) is None
    finally:
        child.kill()
        child.wait()


SERVE_IN_NAMESPACE = """
import asyncio, sys
from pathlib import Path
from clankie import ipc
from supervisor.peers import outside_the_tree
async def nothing(conn, method, params):
    return None
async def main():
    server = await ipc.serve(Path(sys.argv[1]), "supervisor-control", nothing, admit_socket=outside_the_tree)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(dict(server.refusals), len(server.connections), flush=True)
    await server.close()
asyncio.run(main())
"""


def test_an_operator_in_a_pid_namespace_above_the_trees_is_outside(runtime_dir: Path) -> None:
    """The supervisor in a pid namespace of its own (a container), the operator's client in the one above: its pid
    reads 0 there, and a live process our namespace cannot name is no descendant of ours, so it is let in."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a pid namespace")
    path = runtime_dir / "control.sock"
    server = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", SERVE_IN_NAMESPACE,
                               str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    try:
        assert server.stdout.readline().strip() == "ready"

        async def dial() -> None:
            conn = await ipc.connect(path, "supervisor-control")
            await conn.aclose()

        asyncio.run(dial())
        server.stdin.write("\n")
        server.stdin.flush()
        assert server.stdout.readline().strip().startswith("{} ")  # nothing refused
    finally:
        server.kill()
        server.wait()
        server.stdin.close()
        server.stdout.close()


def test_beyond_our_namespace_is_outside_only_while_alive() -> None:
    assert beyond_our_namespace(alive=True).where is Where.OUTSIDE
    assert beyond_our_namespace(alive=False).where is Where.UNPROVEN
