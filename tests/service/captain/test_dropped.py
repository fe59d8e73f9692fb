"""A poison message is gone for good: failed without running, out of its lane, and never read back from the room.

The service runs in-process on a state directory made the way a crashed tree
leaves it: the delivery's record names the run it was in when the service
died for the third time, and the room's lane tree ends in that run's
messages. Whether that third death counts depends on whether the process
reading it belongs to the same supervised tree (``CLANKIE_TREE_ID``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from clankie import settings as settings_mod
from clankie.clock import SystemClock
from clankie.protocol import HistoryMessage, Room
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.agent.session import SessionTree
from service.app import ServiceApp
from service.captain.deliveries.store import DeliveryStore, fingerprint
from service.captain.lanes import dropped
from service.captain.lanes.keys import CaptainPaths
from tests.service.captain.harness import FakeBridge, msg, run, service_env, user_texts

POISON = "zx-poison-7f3a"
TREE = "tree-1"
ROOM = Room(guild_id="1", channel_id="2")
LANE = "discord:clankie:discord:1:2"
HISTORY = [
    HistoryMessage(id="h1", author_id="7", text="who is bringing the cake", at=1_799_999_000.0),
    HistoryMessage(id="p1", author_id="42", text=f"room A: {POISON}", at=1_799_999_500.0),
]


def crashed_three_times(state: Path) -> None:
    """The disk after the service died in three runs of p1, the last in tree TREE: the lane ends in that run."""
    paths = CaptainPaths.under(state)
    store = DeliveryStore(paths.deliveries, SystemClock(), tree=TREE)
    store.accept("p1", fingerprint(msg("p1", f"room A: {POISON}")), ("r1", "r2"))
    store.join("r3", ["p1"])
    tree = SessionTree.create(paths.room(LANE), SystemClock())
    tree.append_message({"role": "user", "content": [{"type": "text", "text": "earlier"}]})
    tree.append_message({"role": "assistant", "content": [{"type": "text", "text": "earlier answer"}]})
    tree.append_custom("run_end", {"run_id": "r0", "outcome": "ok"})
    tree.append_message({"role": "user", "content": [{"type": "text", "text": f"room A: {POISON}"}]})
    tree.close()


def said(fake: FakeAnthropic) -> str:
    return "\n".join(text for body in fake.requests for text in user_texts(body))


def test_a_poison_message_leaves_its_lane_and_its_room_s_history(
    env: dict[str, str], state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After the verdict the room's next turn carries neither the lane's copy nor the history's, but a note of the drop."""
    crashed_three_times(state_dir)
    caplog.set_level(logging.INFO)

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("The cake is on Dana."))
            app = ServiceApp(settings_mod.load(service_env(env, fake)), environ={"CLANKIE_TREE_ID": TREE})
            await app.start()
            try:
                bridge = FakeBridge(history=list(HISTORY))
                await bridge.connect(app)
                verdict = await bridge.submit(msg("p1", f"room A: {POISON}"))
                assert (verdict.outcome, verdict.code) == ("failed", "captain_session_failed")
                assert fake.requests == [] and bridge.history_calls == []  # never run again
                assert dropped.dropped_ids(CaptainPaths.under(state_dir), ROOM) == {"p1"}
                nxt = await bridge.submit(msg("n1", "so who brings the cake?"))
                assert (nxt.outcome, nxt.text) == ("settled", "The cake is on Dana.")
            finally:
                await app.close()
            assert POISON not in json.dumps(fake.requests)  # not from the lane, not from the history, nowhere
            seen = said(fake)
            assert dropped.NOTE in seen and "who is bringing the cake" in seen and "earlier" in seen
            assert "earlier answer" in json.dumps(fake.requests)  # the lane goes on from before the dropped message
        assert POISON not in caplog.text

    run(body())


def test_a_run_that_died_with_the_tree_does_not_make_a_message_poison(env: dict[str, str], state_dir: Path) -> None:
    """The same disk read by a process of another tree (the supervisor was killed): p1 had two crashes, and runs again."""
    crashed_three_times(state_dir)

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("Here is my answer."))
            app = ServiceApp(settings_mod.load(service_env(env, fake)), environ={"CLANKIE_TREE_ID": "tree-2"})
            await app.start()
            try:
                bridge = FakeBridge(history=list(HISTORY))
                await bridge.connect(app)
                result = await bridge.submit(msg("p1", f"room A: {POISON}"))
                assert (result.outcome, result.text) == ("settled", "Here is my answer.")
                record = app.store.load("p1")
                assert record is not None and record.crashed_runs == ("r1", "r2")
            finally:
                await app.close()
            # the lane's copy from the run that died with the old tree was cut: only the trigger and the history carry it
            assert said(fake).count(POISON) == 2  # the trigger, and the same message in the cold lane's history

    run(body())


def test_the_room_s_dropped_ids_are_bounded_and_keep_the_newest(tmp_path: Path) -> None:
    """The id file keeps the newest KEPT ids (a repeated one becomes the newest); an unreadable file filters nothing."""
    paths = CaptainPaths.under(tmp_path)
    for n in range(dropped.KEPT + 5):
        dropped.remember(paths, ROOM, [f"m{n}"])
    ids = dropped.dropped_ids(paths, ROOM)
    assert len(ids) == dropped.KEPT and "m4" not in ids and {"m5", f"m{dropped.KEPT + 4}"} <= ids
    dropped.remember(paths, ROOM, ["m5"])
    dropped.remember(paths, ROOM, ["new"])
    ids = dropped.dropped_ids(paths, ROOM)
    assert len(ids) == dropped.KEPT and {"m5", "new"} <= ids and "m6" not in ids
    assert dropped.dropped_ids(paths, Room(guild_id="1", channel_id="3")) == frozenset()
    paths.dropped(ROOM).write_text("{not json")
    assert dropped.dropped_ids(paths, ROOM) == frozenset()


def test_history_without_the_dropped_messages_keeps_the_rest_in_order() -> None:
    """The pure filter: only the dropped ids go."""
    assert dropped.without(HISTORY, {"p1"}) == (HISTORY[0],)
    assert dropped.without(HISTORY, set()) == tuple(HISTORY)
