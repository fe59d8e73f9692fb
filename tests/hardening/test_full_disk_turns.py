"""Issue 25 item 6: a full disk is a state, not a stack trace, for the whole tree's turns.

The real tree (`clankie run`, four children, real discord.py against the fake
Discord) runs with its state directory on an 64 MiB tmpfs in a private mount
namespace (``tests/hardening/test_full_disk.py``), one turn slot, and two
messages waiting behind a turn the fake model holds. Then the disk is filled.
Five new questions each end with their outcome (the failure reaction: the
receipts themselves may not fit on the disk) and each failure is one log line
naming the message and its code, with no traceback anywhere in the
supervisor's output. The two waiting messages are not started only to fail:
they stay open in the bridge's journal, and the bridge's status says they are
held. Once the filler is removed they are answered.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from clankie.jsonl import read_lines
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord
from tests.hardening.test_full_disk import fill, in_small_fs, need_root_and_unshare
from tests.integration.tree import CHAN, CLANKIE, GUILD, PERSON, REPO, Site, Tree, stop_tree, tree_env
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOMS = tuple(str(300 + i) for i in range(6))
DISK_CODES = ("service_disk_full", "service_disk_error", "disk_full")
LEVEL = re.compile(r"^(?:[a-z]+\| )?\d\d:\d\d:\d\d ([DIWE]) ")


def replied(discord: FakeDiscord, message_id: str) -> bool:
    return any(str((p.message_reference or {}).get("message_id")) == message_id for p in discord.posts)


def warned(discord: FakeDiscord, message_id: str) -> bool:
    return bool(discord.reactions.get(message_id))


def loud_lines(text: str, message_id: str) -> list[str]:
    """The warnings and errors of every process that name the message."""
    return [line for line in text.splitlines() if message_id in line and (m := LEVEL.match(line)) and m[1] in "WE"]


def open_in_journal(state: Path) -> set[str]:
    """Deliveries the bridge's journal file holds without an outcome (read as the next bridge would)."""
    opened: set[str] = set()
    closed: set[str] = set()
    for line in read_lines(state / "bridge" / "journal.jsonl"):
        (closed if line.get("op") in ("close", "closed") else opened).add(str(line.get("id")))
    return opened - closed


def test_turns_on_a_full_disk_fail_in_one_line_each_and_waiting_messages_wait_for_space(tmp_path: Path,
                                                                                         runtime_dir: Path) -> None:
    """Five turns on a full state directory: five outcomes, five lines with their codes, no traceback; the two
    messages that were waiting for a slot stay in the journal, held, and are answered once space returns."""
    need_root_and_unshare()

    async def main() -> None:
        discord = FakeDiscord(guilds={GUILD: [CHAN, *ROOMS]})
        anthropic = fa.FakeAnthropic()
        site = Site()
        await discord.start()
        await anthropic.start()
        await site.start()
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        env = tree_env(tmp_path, runtime_dir, discord, anthropic,
                       {"CLANKIE_DISCORD_MAX_TURNS": "1", "CLANKIE_DISCORD_TOOL_CARD": "false"})
        err_path = tmp_path / "supervisor.stderr"
        with err_path.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(*in_small_fs(state, "64m"), CLANKIE, "run", env=env, cwd=REPO,
                                                        stdin=asyncio.subprocess.DEVNULL, stdout=err, stderr=err)
        # unshare and sh exec: this pid is the supervisor; its view of the state dir is the small tmpfs
        view = Path(f"/proc/{proc.pid}/root") / state.relative_to("/")
        t = Tree(proc, view, runtime_dir, discord, anthropic, site, err_path, env)
        try:
            await t.ready(90)
            gate = anthropic.gate = asyncio.Event()  # the first turn holds the one slot
            first = str((await discord.message(CHAN, "clankie, first", author_id=PERSON, mention_bot=True))["id"])
            await anthropic.wait_for_requests(1)
            waiting = [str((await discord.message(ROOMS[0], f"clankie, then {k}", author_id=PERSON,
                                                  mention_bot=True))["id"]) for k in (1, 2)]
            await until(lambda: all(t.outcome_of(w) is None and any(
                r["delivery_id"] == w and r["outcome"] == "waiting" for r in t.receipts()) for w in waiting) or None,
                30, "two messages waiting for the slot")
            fill(view / "filler")
            gate.set()
            await until(lambda: replied(discord, first) or warned(discord, first) or None, 60, "the first turn's end")
            # the first turn's ⚠️ goes out just before its slot is free: a message sent in between would wait
            await t.wait_child(lambda c: "turns 0/1, held (" in c.detail, "bridge", 30)
            failed = []
            for room in ROOMS[1:]:
                mid = str((await discord.message(room, "clankie, are you there?", author_id=PERSON,
                                                 mention_bot=True))["id"])
                await until(lambda mid=mid: warned(discord, mid) or None, 60, f"the ⚠️ on {mid}")  # type: ignore[misc]  # bound per pass
                failed.append(mid)
            assert not any(replied(discord, w) or warned(discord, w) for w in waiting)
            assert set(waiting) <= open_in_journal(view)  # still there for the next bridge, too
            assert "held (" in (await t.child("bridge")).detail
            (view / "filler").unlink()
            await until(lambda: replied(discord, waiting[-1]) or None, 60, "the waiting messages answered")
            assert not warned(discord, waiting[0]) and not warned(discord, waiting[-1])
        finally:
            anthropic.gate = None
            await stop_tree(t.proc)
            await site.close()
            await anthropic.close()
            await discord.close()
        text = err_path.read_text(errors="replace")
        assert "Traceback" not in text
        for mid in failed:
            lines = loud_lines(text, mid)
            assert len(lines) == 1 and any(code in lines[0] for code in DISK_CODES), (mid, lines)

    asyncio.run(main())
    assert os.path.exists(tmp_path / "supervisor.stderr")
