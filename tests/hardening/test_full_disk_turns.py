"""Issue 25 item 6: a full disk is a state, not a stack trace, for the whole tree's turns.

The real tree (`clankie run`, the service and the bridge, real discord.py against the fake
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
from clankie.protocol import ChildStatus
from clankie.testing.fake_discord import FakeDiscord
from tests.hardening.test_full_disk import fill, in_small_fs, need_root_and_unshare
from tests.integration.tree import CHAN, PERSON, Tree, real_tree
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


async def slot_free(t: Tree) -> None:
    """Until the bridge, in a heartbeat sent after now, holds no turn. A turn's ⚠️ goes out just before its slot is
    free, and a message that came in between would wait (held by the full disk) instead of failing as a new turn."""
    since = asyncio.get_running_loop().time() + 0.05  # a heartbeat received after this, on the same clock

    def fresh_and_free(c: ChildStatus) -> bool:
        beat = c.last_heartbeat_age_s
        return beat is not None and asyncio.get_running_loop().time() - beat > since and "turns 0/1, held (" in c.detail

    await t.wait_child(fresh_and_free, "bridge", 30)


def test_turns_on_a_full_disk_fail_in_one_line_each_and_waiting_messages_wait_for_space(tmp_path: Path,
                                                                                         runtime_dir: Path) -> None:
    """Five turns on a full state directory: five outcomes, five lines with their codes, no traceback; the two
    messages that were waiting for a slot stay in the journal, held, and are answered once space returns."""
    need_root_and_unshare()

    async def main() -> None:
        small = {"CLANKIE_DISCORD_MAX_TURNS": "1", "CLANKIE_DISCORD_TOOL_CARD": "false"}
        async with real_tree(tmp_path, runtime_dir, small, ready_timeout=90, spares=False, hosts=False, channels=(CHAN, *ROOMS),
                             prefix=lambda state: in_small_fs(state, "64m")) as t:
            discord, anthropic, view = t.discord, t.anthropic, t.state  # view: the supervisor's, the small tmpfs
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
            await slot_free(t)
            failed = []
            for room in ROOMS[1:]:
                mid = str((await discord.message(room, "clankie, are you there?", author_id=PERSON,
                                                 mention_bot=True))["id"])
                await until(lambda mid=mid: warned(discord, mid) or None, 60, f"the ⚠️ on {mid}")  # type: ignore[misc]  # bound per pass
                await slot_free(t)
                failed.append(mid)
            assert not any(replied(discord, w) or warned(discord, w) for w in waiting)
            assert set(waiting) <= open_in_journal(view)  # still there for the next bridge, too
            assert "held (" in (await t.child("bridge")).detail
            (view / "filler").unlink()
            await until(lambda: replied(discord, waiting[-1]) or None, 60, "the waiting messages answered")
            assert not warned(discord, waiting[0]) and not warned(discord, waiting[-1])
        text = t.stderr_path.read_text(errors="replace")
        assert "Traceback" not in text
        for mid in failed:
            lines = loud_lines(text, mid)
            assert len(lines) == 1 and any(code in lines[0] for code in DISK_CODES), (mid, lines)

    asyncio.run(main())
    assert os.path.exists(tmp_path / "supervisor.stderr")
