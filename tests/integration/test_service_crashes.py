"""The service dies (SIGKILL) and the supervisor brings it back: nothing a person said is lost, and a poison
message is failed instead of taking the service down forever.

`clankie run` boots the whole tree against the loopback fakes. The test holds
model answers (per room, chosen from the request body) and Discord history
calls (so a cold lane's run is accepted but not streaming and later messages
are held) to decide exactly which turns are part of a live run at each kill.
Only those are charged a crashed run, and only for a death of the service its supervisor lived through
(docs/captain.md, "Crashes").
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.receipts import CLOSING
from clankie.clock import SystemClock
from clankie.testing import fake_anthropic as fa
from service.captain.deliveries.store import DeliveryStore
from tests.integration.tree import PERSON, Tree, real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

HISTORY = "GET /channels/{id}/messages"
ROOMS = {"A": "101", "B": "102", "C": "103"}
ANSWERED = ("settled", "absorbed")


def said(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def room_of(body: dict[str, Any]) -> str:
    """Each room's messages say ``room <name>``; a lane's requests carry only its own room."""
    text = said(body)
    return next(name for name in ROOMS if f"room {name} " in text)


def requests_from(t: Tree, room: str) -> int:
    return sum(1 for body in t.anthropic.requests if room_of(body) == room)


def asked_more_than(t: Tree, room: str, count: int) -> bool:
    return requests_from(t, room) > count


def crashed_runs(t: Tree, delivery_id: str) -> int:
    record = DeliveryStore(t.state / "captain" / "deliveries", SystemClock()).load(delivery_id)
    assert record is not None, f"no record for {delivery_id}"
    return len(record.crashed_runs)


async def speak(t: Tree, room: str, n: int) -> str:
    sent = await t.discord.message(ROOMS[room], f"room {room} message {n}: are we still on for tonight?", author_id=PERSON)
    return str(sent["id"])


async def live_burst(t: Tree, room: str, first: int) -> list[str]:
    """Three messages: the first owns a run whose answer is held, the other two are steered into it."""
    before = requests_from(t, room)
    ids = [await speak(t, room, first)]
    await until(lambda: requests_from(t, room) > before, 30, f"room {room}'s run reaching the model")
    ids += [await speak(t, room, first + 1), await speak(t, room, first + 2)]
    await t.wait_lane(lambda i: i.state == "running" and i.turns == 3, ROOMS[room])
    return ids


def test_three_kills_lose_nothing_and_charge_only_the_runs_a_message_was_part_of(tmp_path: Path, runtime_dir: Path) -> None:
    """Three SIGKILLs with runs live, held and steered: every message is heard, answered once, and none fails.

    Room A is live at kill 1 (owner + 2 steered), held at kill 2 (only its
    owner is part of the run: history is held), answered before kill 3.
    Room B arrives held at kill 2 and is live at kill 3; room C is live at
    kill 3 only. Counting every re-submission (as before) would have failed
    A and B; counting only runs a message was part of charges nobody three.

    Which rooms are answered is decided before the kill that should lead to
    the answer, never after it: the supervisor holds service.sock, so the
    bridge's re-dial is queued and its re-submitted runs can reach the model
    before ``t.kill`` has seen the new service running. A live run's stream
    is held, so its room makes no other model request before the kill.
    """

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=tuple(ROOMS.values()), spares={"service"}, hosts=False) as t:
            answering: set[str] = set()

            def respond(body: dict[str, Any]) -> fa.Scenario:
                room = room_of(body)
                if room in answering:
                    return fa.text(f"Yes, room {room}: eight o'clock, same lobby.")
                return fa.text(f"room {room}, let me check", stall_after=2)  # held until the service dies

            t.anthropic.respond_with(respond)
            sent: dict[str, list[str]] = {}

            # kill 1: room A's run is live, its owner and two steered messages are part of it
            sent["A"] = await live_burst(t, "A", 1)
            history = t.discord.hold(HISTORY)
            await t.kill("service")

            # kill 2: history is held, so A's re-submitted run is accepted but not streaming: one owner, two held;
            # room B's three new messages are the same (its owner waits for history, the others are held)
            await t.wait_lane(lambda i: i.state == "starting" and i.turns == 3, ROOMS["A"])
            sent["B"] = [await speak(t, "B", n) for n in (1, 2, 3)]
            await t.wait_lane(lambda i: i.state == "starting" and i.turns == 3, ROOMS["B"])
            answering.add("A")  # A's re-submitted run waits for history, so it asks the model only after the set below
            await t.kill("service")
            history.set()

            # kill 3: A is answered first; B's re-submitted run and C's new one are live with everything in them
            await until(lambda: all(t.outcome_of(d) for d in sent["A"]), 120, "room A's outcomes")
            await t.wait_lane(lambda i: i.state == "running" and i.turns == 3, ROOMS["B"])
            sent["C"] = await live_burst(t, "C", 1)
            answering.update(ROOMS)  # B's and C's streams are held until the kill; their re-submitted runs are answered
            restarted = await t.kill("service")

            everyone = [d for ids in sent.values() for d in ids]
            await until(lambda: all(t.outcome_of(d) for d in everyone), 120, "every message's outcome")

            # each message's closing receipts (steps such as accepted, or recovered after a bridge restart, aside)
            outcomes = {d: [r["outcome"] for r in t.receipts() if r["delivery_id"] == d and r["outcome"] in CLOSING]
                        for d in everyone}
            assert all(len(o) == 1 and o[0] in ANSWERED for o in outcomes.values()), outcomes
            for room, ids in sent.items():
                replies = [p for p in t.discord.posts_in(ROOMS[room])]
                assert len(replies) == 1, f"room {room} got {len(replies)} replies"
                assert str(replies[0].message_reference["message_id"]) in ids  # type: ignore[index]  # a reply always carries its reference
                assert [outcomes[d][0] for d in ids].count("settled") == 1
                for n in (1, 2, 3):
                    assert any(f"room {room} message {n}:" in said(b) for b in t.anthropic.requests), f"{room}{n} unheard"
            # only the runs a message was part of were counted: A's owner at kill 2 and B's at kill 2 are the extra ones
            charged = {room: sorted(crashed_runs(t, d) for d in ids) for room, ids in sent.items()}
            assert charged == {"A": [1, 1, 2], "B": [1, 1, 2], "C": [1, 1, 1]}
            assert restarted.restarts == 3 and (await t.child("service")).pid == restarted.pid

    asyncio.run(main())


POISON = "zx-poison-7f3a"


def test_a_message_that_kills_the_service_every_time_fails_as_poison_and_its_room_is_answered_next(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """A message whose every run kills the service fails captain_session_failed after CLANKIE_POISON_RUNS crashed runs,
    and the next message in the same room is answered without a crash.

    Each time the fake model receives a request carrying the poison marker,
    the test SIGKILLs the service (after another room, asked meanwhile, has
    had its answer). After three crashed runs the re-submitted poison
    delivery fails without reaching the model, and the service keeps serving:
    the room's next message is answered by the same service process, and no
    request after the verdict carries the poison's words (not from the lane's
    tree, not from the room's history the cold lane reads), only a note that
    a message was dropped.
    """

    async def main() -> None:
        async with real_tree(tmp_path, runtime_dir, channels=tuple(ROOMS.values()), spares={"service"}, hosts=False) as t:
            poison_seen: list[int] = []

            def seen_more_than(count: int) -> bool:
                return len(poison_seen) > count

            def respond(body: dict[str, Any]) -> fa.Scenario:
                if POISON in said(body):
                    poison_seen.append(len(t.anthropic.requests))
                    return fa.text("never finished", stall_after=2)  # the service dies in this run (or would)
                return fa.text(f"Sure, room {room_of(body)}: noon on Saturday.")

            t.anthropic.respond_with(respond)
            poison = str((await t.discord.message(ROOMS["A"], f"room A message 1: {POISON}", author_id=PERSON))["id"])
            others: list[tuple[str, str]] = []
            for crash in range(3):
                await until(functools.partial(seen_more_than, crash), 60, f"poison run {crash + 1} reaching the model")
                room = "BC"[crash % 2]
                other = await speak(t, room, crash + 1)  # another room, asked while the poison run is live
                got = await until(functools.partial(t.outcome_of, other), 60, f"an answer in room {room}")
                assert got["outcome"] == "settled"
                others.append((room, other))
                await t.kill("service")

            got = await until(lambda: t.outcome_of(poison), 60, "the poison delivery's outcome")
            assert (got["outcome"], got.get("reason")) == ("failed", "captain_session_failed")
            assert len(poison_seen) == 3, "the fourth time it never reached the model"
            assert t.discord.posts_in(ROOMS["A"]) == []
            assert [r["outcome"] for r in t.receipts() if r["delivery_id"] == poison] == ["accepted", "failed"]
            evidence = [json.loads(line) for line in (t.state / "captain" / "evidence.jsonl").read_text().splitlines()]
            last = [e for e in evidence if e["delivery_id"] == poison][-1]
            assert {k: last.get(k) for k in ("event", "code", "cause", "crashed_runs")} == {
                "event": "failed", "code": "captain_session_failed", "cause": "poison", "crashed_runs": 3}
            log = (t.state / "logs" / "service.log").read_text(errors="replace")
            assert f"delivery {poison} is a poison message" in log and POISON not in log

            # the service keeps serving, in the other rooms and without another restart
            before = await t.child("service")
            after_poison = await speak(t, "C", 9)
            reply = await t.reply_to(after_poison)
            assert reply.content == "Sure, room C: noon on Saturday."
            for room, other in others:
                assert [str(p.message_reference["message_id"]) for p in t.discord.posts_in(ROOMS[room])].count(other) == 1  # type: ignore[index]  # a reply always carries its reference
            now = await t.child("service")
            assert (now.pid, now.restarts) == (before.pid, 3)

            # the poison message's own room: answered at once, by the same service, with nothing of the poison replayed
            verdict_at = len(t.anthropic.requests)
            same_room = await speak(t, "A", 2)
            reply = await t.reply_to(same_room)
            assert reply.content == "Sure, room A: noon on Saturday."
            asked = [said(b) for b in t.anthropic.requests[verdict_at:] if room_of(b) == "A"]
            assert len(asked) == 1 and POISON not in asked[0] and "was dropped without an answer" in asked[0]
            assert "room A message 2:" in asked[0] and len(poison_seen) == 3
            now = await t.child("service")
            assert (now.pid, now.restarts) == (before.pid, 3)

    asyncio.run(main())


TREE_KILLS = 2
"""Whole-tree kills in the supervisor-kill story, and its tree's poison bound (``CLANKIE_POISON_RUNS``): counted, those
kills alone would fail the message as poison."""


def test_a_supervisor_kill_does_not_add_to_any_message_s_poison_count(tmp_path: Path, runtime_dir: Path) -> None:
    """Whole-tree kills with a message's run live each time charge it nothing; a crash of the service alone does.

    The tree fails a message as poison at its second crashed run
    (``CLANKIE_POISON_RUNS=2``: two tree kills are then as telling as three
    are at the default, and cost one tree start less). Each time room A's
    run reaches the model (its answer held), the test SIGKILLs `clankie run`
    itself, so the service dies with its tree, and starts a new `clankie run`
    on the same state, as systemd would. Counting those deaths would have
    failed the message as poison at the second. Then one SIGKILL of the
    service alone, which the supervisor sees: one crashed run, under the
    bound. The message is then answered, once.
    """

    async def main() -> None:
        poison_bound = {"CLANKIE_POISON_RUNS": str(TREE_KILLS)}
        async with real_tree(tmp_path, runtime_dir, poison_bound, channels=(ROOMS["A"],), spares={"service"}, hosts=False) as t:
            answering = asyncio.Event()

            def respond(body: dict[str, Any]) -> fa.Scenario:
                if answering.is_set():
                    return fa.text("Yes: eight o'clock, same lobby.")
                return fa.text("let me check", stall_after=2)  # held until the tree (or the service) dies

            t.anthropic.respond_with(respond)
            message = await speak(t, "A", 1)
            for kill in range(TREE_KILLS):
                reached = functools.partial(asked_more_than, t, "A", kill)
                await until(reached, 60, f"the run reaching the model in tree {kill + 1}")
                await t.kill_supervisor()
                await t.respawn()
                await t.ready()
            reached = functools.partial(asked_more_than, t, "A", TREE_KILLS)
            await until(reached, 60, f"the run reaching the model in tree {TREE_KILLS + 1}")
            assert crashed_runs(t, message) == 0
            answering.set()
            await t.kill("service")
            got = await until(lambda: t.outcome_of(message), 60, "the message's outcome")
            assert got["outcome"] == "settled"
            assert crashed_runs(t, message) == 1  # the service's own crash, and only that
            assert len(t.discord.posts_in(ROOMS["A"])) == 1

    asyncio.run(main())
