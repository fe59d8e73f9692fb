"""A full disk is a state: waiting messages stay in the journal until there is room, and each failure is one line."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bridge.disk import RECHECK_S, DiskHold, is_disk_code
from clankie import ipc
from clankie.paths import LOW_SPACE
from clankie.protocol import TurnResult, TurnSubmit
from clankie.quiet import Quiet
from clankie.testing.clock import FakeClock
from tests.bridge.harness import CHAN, CHAN2, PERSON, Harness, running
from tests.replies import CLOSING


def test_disk_codes_are_the_services_and_the_bridges_own() -> None:
    """The service's codes for a refused write and the bridge's journal codes (``disk_*``) count; nothing else."""
    assert all(map(is_disk_code, ("service_disk_full", "service_disk_error", "disk_full", "disk_eio")))
    assert not any(map(is_disk_code, (None, "captain_session_failed", "journal_full", "diskette")))


def test_waiting_turns_hold_while_the_disk_is_full_or_just_refused_a_turn(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Low free space holds at once; a refused turn holds for RECHECK_S even with space free (a quota does not show
    in it); room again clears the hold. One warning per outage, one line when it ends."""
    clock = FakeClock()
    hold = DiskHold(tmp_path, clock)
    free = [LOW_SPACE - 1]
    hold.free = lambda path: free[0]

    def state() -> tuple[bool, str | None]:
        return hold.room(), hold.reason

    with caplog.at_level(logging.INFO, logger="bridge.disk"):
        assert state() == state() == (False, "disk_full")
        free[0] = LOW_SPACE
        assert state() == (True, None)
        hold.refused("service_disk_full")
        hold.refused("service_disk_full")
        assert state() == (False, "service_disk_full")
        clock.advance(RECHECK_S)
        assert state() == (True, None)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING", "INFO"]


def test_a_stretch_of_refused_writes_is_one_line_then_a_count(caplog: pytest.LogCaptureFixture) -> None:
    """Receipts and closing lines on a full disk: the first refusal is logged, the rest counted until one works."""
    quiet = Quiet("receipts")
    with caplog.at_level(logging.INFO, logger="clankie.quiet"):
        for _ in range(5):
            quiet.refused("disk_full")
        quiet.written()
        quiet.written()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "receipts not written (disk_full); counted, not logged, until one is"),
        ("WARNING", "receipts written again; 5 were not"),
    ]


def test_a_turn_the_disk_refused_leaves_the_waiting_messages_in_the_journal_until_there_is_room(
        env: dict[str, str]) -> None:
    """With one turn slot: a turn fails ``service_disk_full`` (one line, its outcome and the ⚠️), the state filesystem
    is full, and the two messages waiting behind it are not started to fail too: they stay open in the journal, the
    status says they are held, and once space returns they are answered."""
    clock = FakeClock()
    release = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if sub.trigger.text.endswith("first"):
            await release.wait()
            return TurnResult.failed("service_disk_full", turn_id="t1")
        return TurnResult.settled("answered", turn_id=f"t-{sub.delivery_id}")

    def ends(h: Harness, did: str) -> list[str]:
        return [o for o in h.outcomes(did) if o in CLOSING]

    async def main() -> None:
        async with running(env, overrides={"CLANKIE_DISCORD_MAX_TURNS": "1"}, script=script, clock=clock) as h:
            free = [0]
            h.app.bridge.disk.free = lambda path: free[0]
            first = str((await h.fake.message(CHAN, "first", author_id=PERSON, mention_bot=True))["id"])
            await h.service.wait_submits(1)
            waiting = [str((await h.fake.message(CHAN2, f"then {k}", author_id=PERSON))["id"]) for k in (1, 2)]
            await h.until(lambda: all("waiting" in h.outcomes(w) for w in waiting))
            release.set()
            await h.until(lambda: ends(h, first) == ["failed"])
            assert [r.get("reason") for r in h.receipts() if r["delivery_id"] == first and r["outcome"] == "failed"] == [
                "service_disk_full"]
            await h.until(lambda: bool(h.fake.reactions.get(first)))  # asked for: the ⚠️ says it failed
            assert h.app.bridge.turns_in_flight == 0 and len(h.app.bridge.waiting) == 2  # a free slot, and they wait
            assert all(h.app.journal.state.entries[w].open and h.app.journal.state.entries[w].waiting for w in waiting)
            assert "; waiting: 2 in 1 rooms, turns 0/1, held (service_disk_full)" in h.app.heartbeat().detail
            assert len(h.service.submits) == 1
            clock.advance(RECHECK_S)  # looked again: still full
            await h.until(lambda: clock.sleepers > 0)
            assert len(h.app.bridge.waiting) == 2 and len(h.service.submits) == 1
            free[0] = 10 * LOW_SPACE  # space is back
            clock.advance(RECHECK_S)
            await h.until(lambda: all(ends(h, w) for w in waiting))
            assert [ends(h, w) for w in waiting] == [["absorbed"], ["settled"]]  # one turn for the room, as waiting does
            assert "held" not in h.app.heartbeat().detail

    asyncio.run(main())
