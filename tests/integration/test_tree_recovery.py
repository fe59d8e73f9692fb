"""Recovery on the real tree: the supervisor's sockets outlive every child, and nobody is refused or loses an answer.

Real processes and real signals against the loopback fakes; every wait polls
real state (status on the control socket, /proc, the fakes' records).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from clankie.testing import fake_anthropic as fa
from hosts.tldraw.examples import er_example
from tests.integration.tree import CHAN, PERSON, Tree, real_tree  # the probe uses its own room, 102
from tests.polling import until
from tests.supervisor.harness import pid_alive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SOCKETS = ("service", "browser", "tldraw")
COLD_MARK = "Channel conversation (untrusted):"


def listening_inode(path: Path) -> int:
    """The inode of the listening socket bound at ``path`` (flag __SO_ACCEPTCON in /proc/net/unix)."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[7] == str(path) and parts[3] == "00010000":
            return int(parts[6])
    raise AssertionError(f"nothing listens at {path}")


def held_sockets(pid: int) -> set[int]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def socket_facts(t: Tree) -> dict[str, tuple[int, int, int]]:
    """Per socket: (file inode, file mode, listening inode), each listener held by the supervisor itself."""
    facts = {}
    held = held_sockets(t.proc.pid)
    for name in SOCKETS:
        path = t.runtime / f"{name}.sock"
        st = path.stat()
        inode = listening_inode(path)
        assert inode in held, f"the supervisor does not hold {name}.sock"
        facts[name] = (st.st_ino, stat.S_IMODE(st.st_mode), inode)
    return facts


PROBE_ROOM = "102"
TOOLS = {"browser": "browser_screenshot", "tldraw": "draw_er_diagram"}


async def probe(t: Tree, name: str, n: int) -> str:
    """Right now, make ``name``'s own client dial its socket with one real request: a message in the probe's room
    makes the bridge submit a turn (service.sock), or the service call its tool (a host's socket). Only the
    processes the supervisor names may dial these sockets (clankie.peers), so the test does not dial them itself.
    Returns the reply (service) or the tool result the model was shown (hosts)."""
    if name != "service":
        args: dict[str, object] = {"url": t.site.url("/")} if name == "browser" else dict(er_example(2))
        t.anthropic.script(fa.tool_use((TOOLS[name], args)), fa.text(f"done {n}"))
    asked = len(t.anthropic.requests)
    sent = await t.discord.message(PROBE_ROOM, f"clankie, probe {n}", author_id=PERSON)
    post = await t.reply_to(sent["id"], 90)
    return post.content if name == "service" else t.tool_results(asked + 1)


async def kill_and_wait_dead(t: Tree, name: str) -> int:
    child = await t.child(name)
    old = child.pid
    assert old is not None
    try:
        os.kill(old, signal.SIGKILL)
    except ProcessLookupError:  # it died by itself before this kill: a failure of its own, said with its log
        raise AssertionError(f"{name} pid {old} was already gone ({child}): {t.stderr()[-4000:]}") from None
    await until(lambda: not pid_alive(old), 10, f"{name} pid {old} gone")
    return old


async def back_up(t: Tree, name: str, old: int) -> Any:
    return await t.wait_child(lambda c: c.state == "running" and c.pid not in (None, old), name, 60)


def test_sockets_outlive_every_child_and_clients_during_a_restart_get_their_answer(tmp_path: Path, runtime_dir: Path) -> None:
    """SIGKILL of each child: the socket files, modes and listeners stay; a turn in flight and a client that
    connects while the child is dead are both answered by the next one; nothing is refused."""

    async def main() -> None:
        env = {"CLANKIE_BROWSER_ALLOW_PRIVATE": "true", "CLANKIE_DISCORD_TOOL_CARD": "false"}
        async with real_tree(tmp_path, runtime_dir, env, channels=(CHAN, PROBE_ROOM)) as t:
            before = socket_facts(t)
            assert all(mode == 0o600 for _ino, mode, _l in before.values())
            assert (await t.child("service")).spare  # status says what its spare is doing

            # the bridge is connected with a turn in flight when the service dies
            hold = asyncio.Event()
            t.anthropic.script(fa.text("never sent", stall_after=2, stall_until=hold))
            asked = await t.discord.message(CHAN, "clankie, a turn that outlives its service", author_id=PERSON)
            await until(lambda: len(t.anthropic.requests) >= 1, 30, "the turn at the model")
            for n, name in enumerate(("service", "browser", "tldraw", "bridge")):
                if name in SOCKETS:  # the spare path (the cold one is the same but slower: see the test below)
                    await t.wait_child(lambda c: c.spare.startswith("parked"), name, 60)
                old = await kill_and_wait_dead(t, name)
                if name in SOCKETS:  # its client dials while nothing serves: it waits in the backlog, no refusal
                    answer = await probe(t, name, n)
                    assert answer if name == "service" else "sha256:" in answer, answer
                await back_up(t, name, old)
                assert socket_facts(t) == before, f"a socket changed across the {name} restart"
                if name == "service":
                    post = await t.reply_to(asked["id"], 60)  # re-submitted by the bridge to the next service
                    assert post.content
            hold.set()
            # the new bridge says connected once its gateway session is up (messages before that are not its)
            await t.wait_child(lambda c: "discord: connected; service: connected" in c.detail, "bridge", 60)
            post = await t.ask("clankie, still there?", 60)
            assert post.content

    asyncio.run(main())


def _cold(body: dict[str, Any]) -> bool:
    return COLD_MARK in json.dumps(body["messages"][-1])


@pytest.mark.parametrize("handover", ["true", "false"])
def test_spare_and_cold_restarts_behave_the_same_lanes_come_back_cold(
    tmp_path: Path, runtime_dir: Path, handover: str
) -> None:
    """Warm, warm, SIGKILL the service, then cold once and warm again: the same with the spare and without."""

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, {"CLANKIE_HANDOVER": handover}, spares={"service"}, hosts=False) as t:
            seen = []
            # something said before the first turn, so a cold lane has a backlog to read (a bot: never answered)
            await t.discord.message(CHAN, "earlier chatter", author_id="700000000000000001", bot=True)
            for text in ("clankie, one", "clankie, two"):
                await t.ask(text)
                seen.append(_cold(t.anthropic.requests[-1]))
            service = await t.child("service")
            if handover == "true":
                status = await t.wait_child(lambda c: c.spare.startswith("parked"), "service", 60)
                spare = status.spare_pid
            else:
                assert service.spare == "off"
            old = await kill_and_wait_dead(t, "service")
            new = await back_up(t, "service", old)
            if handover == "true":
                assert new.pid == spare  # the spare became the service
            for text in ("clankie, three", "clankie, four"):
                await t.ask(text, 60)
                seen.append(_cold(t.anthropic.requests[-1]))
            assert seen == [True, False, True, False]  # a restarted service's lanes are cold once, spare or not
            lanes = await t.call("lanes")
            assert [lane.warm for lane in lanes.lanes] == [True]

    asyncio.run(main())
