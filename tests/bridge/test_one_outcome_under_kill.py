"""Exactly one outcome whichever instant the bridge dies: a kill between a delivery's closing receipt and its journal
``close`` line does not close it a second time after the restart (issue 35, leftover 3).

A delivery's one outcome is two writes in two files: its closing receipt (the evidence) and then the journal's
``close`` line (the state). A bridge killed between them leaves the journal saying the delivery is open; the next
bridge finds the receipt already written and closes the journal entry from it (:func:`bridge.recovery.resume_journal`)
instead of running the delivery again, so there is one receipt and one reply.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest

from bridge.inbound import Inbound
from bridge.journal import Journal
from bridge.receipts import Receipts
from clankie import paths
from clankie.jsonl import read_lines
from clankie.protocol import Author, Room, Trigger, TurnOutcome, TurnSubmit
from clankie.settings import load
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, GUILD, PERSON, FakeService, running
from tests.bridge.killpoint import KILL_AFTER
from tests.polling import until
from tests.replies import CLOSING


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_bridge_killed_between_the_settled_receipt_and_the_journal_close_settles_once(env: dict[str, str]) -> None:
    """The real ``python -m bridge`` SIGKILLs itself right after writing a delivery's ``settled`` receipt (its reply
    is posted, its journal entry still open); the next process reads the receipt back and closes the entry: one
    ``settled`` receipt, one reply, no second submission and no ``recovered`` re-run."""

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: [CHAN]})
        await fake.start()
        settings = load(env)
        paths.ensure_private_dir(settings.runtime_dir)
        service = FakeService(paths.socket_path(settings.runtime_dir, "service"))
        await service.start()
        penv = {**env, "DISCORD_TOKEN": fake.token, "CLANKIE_DISCORD_API_BASE": fake.api_base,
                "CLANKIE_DISCORD_GUILD_IDS": GUILD}
        receipts = settings.state_dir / "receipts" / "bridge.jsonl"
        journal = settings.state_dir / "bridge" / "journal.jsonl"

        def outcomes(m: str) -> list[str]:
            return [r["outcome"] for r in read_lines(receipts) if r["delivery_id"] == m]

        def closed_in_journal(m: str) -> bool:  # a ``close`` line, or a ``closed`` one once the start's compaction ran
            return any(line["op"] in ("close", "closed") and line["id"] == m for line in read_lines(journal))

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.bridge.killpoint", env={**penv, KILL_AFTER: "settled"},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            await fake.wait_for(lambda: fake.readies == 1, timeout=30)
            m = str((await fake.message(CHAN, "hello there", author_id=PERSON))["id"])
            assert await proc.wait() == -signal.SIGKILL  # it died at the kill point, right after the receipt
            assert outcomes(m) == ["accepted", "settled"]
            assert len(fake.posts_in(CHAN)) == 1
            assert not closed_in_journal(m)  # the instant: receipt written, journal entry still open
            proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bridge", env=penv,
                                                        stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.DEVNULL)
            await until(lambda: closed_in_journal(m), 30, "the next bridge to close the delivery in its journal")
            assert [o for o in outcomes(m) if o in CLOSING] == ["settled"]
            assert "recovered" not in outcomes(m)
            assert len(fake.posts_in(CHAN)) == 1
            assert [s.delivery_id for s in service.submits] == [m]
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await service.close()
            await fake.close()

    asyncio.run(main())


def test_a_catch_up_killed_between_its_own_receipt_and_its_folds_closes_the_folds_once(state_dir: Path,
                                                                                        env: dict[str, str]) -> None:
    """The journal and receipts as a kill leaves them after a catch-up turn's ``settled`` receipt and before its
    folded message's ``absorbed`` one: the next bridge writes the missing ``absorbed`` (one each, not a second
    ``settled``), closes both in its journal, and submits nothing."""
    room = Room(guild_id=GUILD, channel_id=CHAN)
    now = time.time()
    journal = Journal(state_dir, retention=3600.0)
    for did in ("1001", "1002"):
        trigger = Trigger(message_id=did, author=Author(id=PERSON, name="p"), text=f"said {did}", at=now,
                          unprompted=True)
        inbound = Inbound(message_id=did, channel_id=CHAN, guild_id=GUILD, author_id=PERSON, text=f"said {did}")
        journal.buffer(did, now, f"fp{did}", room, inbound.to_wire(), trigger.to_wire())
    submit = TurnSubmit(delivery_id="1002", room=room, trigger=Trigger(
        message_id="1002", author=Author(id=PERSON, name="p"), text="said 1002", at=now, unprompted=True))
    journal.admit(submit, "fp1002", now, catching_up=True, folds=("1001",))
    journal.aclose()
    receipts = Receipts(state_dir)
    receipts.record(TurnOutcome.SETTLED, delivery_id="1002", channel_id=CHAN, guild_id=GUILD, turn_id="t",
                    message_ids=("2001",))
    receipts.close()

    async def main() -> None:
        async with running(env) as h:
            assert (h.outcomes("1002"), h.outcomes("1001")) == (["settled"], ["absorbed"])
            entries = h.app.journal.state.entries
            assert (entries["1002"].outcome, entries["1001"].outcome, entries["1002"].replied) == ("settled",
                                                                                                    "absorbed", 2001)
            assert h.service.submits == []
        assert Journal(state_dir, retention=3600.0).state.open_entries() == []

    asyncio.run(main())


def test_a_closing_receipt_older_than_the_entry_does_not_close_it(state_dir: Path, env: dict[str, str]) -> None:
    """A message refused once (``dropped``) and admitted later under the same id, open when the bridge died, is run
    at the next start: only a receipt written since its admission closes its entry."""
    room = Room(guild_id=GUILD, channel_id=CHAN)
    now = time.time()
    receipts = Receipts(state_dir, wall=lambda: now - 60.0)
    receipts.record("dropped", reason="journal_full", delivery_id="1001", channel_id=CHAN, guild_id=GUILD)
    receipts.close()
    journal = Journal(state_dir, retention=3600.0)
    journal.admit(TurnSubmit(delivery_id="1001", room=room, trigger=Trigger(
        message_id="1001", author=Author(id=PERSON, name="p"), text="again", at=now)), "fp1001", now, catching_up=False)
    journal.aclose()

    async def main() -> None:
        async with running(env) as h:
            await h.until(lambda: "settled" in h.outcomes("1001"))
            assert h.outcomes("1001") == ["dropped", "recovered", "settled"]
            assert [s.delivery_id for s in h.service.submits] == ["1001"]

    asyncio.run(main())
