"""Paced, not dropped: a message over its author's pace waits for it, journaled, with a ⏳, and is answered when
the pace allows (bridge/paced.py, bridge/fairness.py; docs/bridge.md, "Pace")."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys

import pytest

from bridge.admission import Drop, Ingress, Paced, Policy, Run
from bridge.fairness import Fairness
from bridge.inbound import Inbound
from bridge.paced import PacedTurns
from bridge.waiting import MAX_JOIN
from clankie import ipc, paths
from clankie.jsonl import read_lines
from clankie.protocol import TurnResult, TurnSubmit
from clankie.settings import load
from clankie.testing.clock import FakeClock
from clankie.testing.fake_discord import FakeDiscord
from tests.bridge.harness import CHAN, GUILD, PERSON, FakeService, running
from tests.bridge.test_e2e_bounds import closing
from tests.polling import until
from tests.replies import CLOSING

HOURGLASS = "\u23f3"
ROOMS = tuple(str(400 + i) for i in range(12))
PACE = {"CLANKIE_USER_TURNS_PER_MINUTE": "6", "CLANKIE_ROOM_TURNS_PER_MINUTE": "30"}  # the defaults


def msg(mid: str, *, channel: str = "11", author: str = "7") -> Inbound:
    return Inbound(message_id=mid, channel_id=channel, guild_id="1", author_id=author, text="hi")


def paced_ingress() -> Ingress:
    return Ingress(Policy(guild_ids=frozenset({"1"}), owner_id="900", user_turns_per_minute=6, room_turns_per_minute=30))


def test_a_persons_waiting_turns_are_bounded_at_a_minutes_worth() -> None:
    """At 6 a minute: six run, six more rooms wait (a minute's worth), the thirteenth room is refused
    ``rate_limited``; a message in a room where they already wait folds into that waiting turn, up to what one turn
    carries (51), and past that it is refused too. Another person is untouched."""
    ing = paced_ingress()
    decisions = [ing.admit(msg(f"m{i}", channel=str(100 + i)), 0.0) for i in range(13)]
    assert [type(d) for d in decisions] == [Run] * 6 + [Paced] * 6 + [Drop]
    assert all(isinstance(d, Paced) and d.opened for d in decisions[6:12]) and decisions[12] == Drop("rate_limited")
    assert (len(ing.paced), ing.paced.people) == (6, 1)
    folds = [ing.admit(msg(f"f{i}", channel="106"), 0.0) for i in range(MAX_JOIN)]
    assert all(isinstance(d, Paced) and not d.opened for d in folds[: MAX_JOIN - 1])
    assert folds[-1] == Drop("rate_limited")  # room 106's waiting turn holds 51: its own first and 50 folded
    assert not ing.seen(f"f{MAX_JOIN - 1}") and not ing.seen("m12")
    assert isinstance(ing.admit(msg("o", channel="112", author="8"), 0.0), Run)


def test_waiting_turns_go_oldest_first_at_the_pace() -> None:
    """A person's waiting turns leave one per refilled token, oldest first; each carries that room's messages."""
    ing = paced_ingress()
    for i in range(6):
        assert isinstance(ing.admit(msg(f"m{i}", channel=str(100 + i)), 0.0), Run)
    for mid, room in (("a", "200"), ("b", "201"), ("c", "200")):
        assert isinstance(ing.admit(msg(mid, channel=room), 0.0), Paced)
    assert ing.paced.next_release(0.0) == 10.0 and ing.paced.release(9.0) == []
    assert ing.paced.release(10.0) == [("200", ["a", "c"])]
    assert ing.paced.next_release(10.0) == 20.0 and ing.paced.release(20.0) == [("201", ["b"])]
    assert ing.paced.next_release(20.0) is None


def test_the_bound_is_a_setting() -> None:
    """``paced_minutes`` 0: nothing waits (refused as before); 2: two minutes' worth of turns wait."""
    assert PacedTurns(0, MAX_JOIN, Fairness(6, 30)).admits("p", "1") is False
    ing = Ingress(Policy(guild_ids=frozenset({"1"}), user_turns_per_minute=6, paced_minutes=2.0))
    decisions = [ing.admit(msg(f"m{i}", channel=str(100 + i)), 0.0) for i in range(19)]
    assert [type(d) for d in decisions] == [Run] * 6 + [Paced] * 12 + [Drop]


def test_one_person_twelve_rooms_a_second_apart_all_answered_at_the_pace(env: dict[str, str]) -> None:
    """The issue's case through the real bridge on a fake clock: one person, 12 messages a second apart into 12
    rooms. Six start at once; the other six get ⏳ and a ``waiting`` receipt, and start one per refilled token
    (10 s apart: the pace, never faster); every one is answered once, and each ⏳ comes off when it is."""
    clock = FakeClock()
    started: dict[str, float] = {}

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        started[sub.delivery_id] = clock.wall()
        return TurnResult.settled("ok", turn_id=f"turn-{sub.delivery_id}")

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: list(ROOMS)})
        async with running(env, overrides=PACE, script=script, clock=clock, fake=fake) as h:
            t0 = clock.wall()
            sent = []
            for i, room in enumerate(ROOMS):
                m = str((await h.fake.message(room, f"hi in {room}", author_id=PERSON))["id"])
                await h.until(lambda m=m: bool(h.outcomes(m)))  # type: ignore[misc]  # bound per loop pass
                if i < 6:  # within the pace: its turn reaches the service before the clock moves on
                    await h.until(lambda m=m: m in started)  # type: ignore[misc]  # bound per loop pass
                else:  # over the pace: it waits with ⏳ (the first of them starts at 10 s)
                    await h.until(lambda m=m: h.fake.reactions.get(m) == [HOURGLASS])  # type: ignore[misc]  # bound per loop pass
                sent.append(m)
                clock.advance(1.0)
            assert [h.outcomes(m)[0] for m in sent] == ["accepted"] * 6 + ["waiting"] * 6
            assert {r["reason"] for r in h.receipts() if r["outcome"] == "waiting"} == {"paced"}
            await h.until(lambda: len(started) == 7)  # 12 s in: the first that waited went at 10 s
            assert "; paced: 5 of 1 person" in h.app.heartbeat().detail
            while len(started) < 12:
                due = h.app.ingress.paced.next_release(clock.wall())
                assert due is not None
                n = len(started)
                clock.advance(due - clock.wall())
                await h.until(lambda n=n: len(started) == n + 1)  # type: ignore[misc]  # bound per loop pass
            await h.until(lambda: all(closing(h, m) for m in sent))
            assert [closing(h, m) for m in sent] == [["settled"]] * 12
            assert [round(started[m] - t0) for m in sent] == [0, 1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 60]
            await h.until(lambda: all(h.fake.reactions.get(m) == [] for m in sent[6:]), what="every ⏳ taken off")
            assert sorted(h.fake.unreacted) == sorted(sent[6:]) and not any(h.fake.reactions.get(m) for m in sent[:6])
            assert h.app.bridge.paced == 0 and not any(e.open for e in h.app.journal.state.entries.values())

    asyncio.run(main())


def test_past_a_minutes_worth_of_waiting_turns_a_message_is_refused_or_folds(env: dict[str, str]) -> None:
    """Through the real bridge, all at once: six run, six rooms wait (⏳ each), the thirteenth room is refused
    ``rate_limited`` (one ⏳ hint, not retained), and a message in a room where the person waits folds into that
    waiting turn; the fold and its turn are answered together, once, when the pace lets it go."""
    clock = FakeClock()
    rooms = (*ROOMS, "413")

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: list(rooms)})
        async with running(env, overrides=PACE, clock=clock, fake=fake) as h:
            sent = []
            for room in rooms:
                sent.append(m := str((await h.fake.message(room, f"hi in {room}", author_id=PERSON))["id"]))
                await h.until(lambda m=m: bool(h.outcomes(m)))  # type: ignore[misc]  # bound per loop pass
            fold = str((await h.fake.message(ROOMS[6], "and another thing", author_id=PERSON))["id"])
            await h.until(lambda: bool(h.outcomes(fold)))
            assert [h.outcomes(m)[0] for m in sent] == ["accepted"] * 6 + ["waiting"] * 6 + ["dropped"]
            assert [r["reason"] for r in h.receipts() if r["delivery_id"] == sent[12]] == ["rate_limited"]
            assert h.outcomes(fold) == ["waiting"] and not h.app.ingress.seen(sent[12])
            assert (h.app.bridge.paced, h.app.ingress.paced.people) == (7, 1)
            await h.until(lambda: h.fake.reactions.get(sent[12]) == [HOURGLASS])  # the refusal's hint
            clock.advance(10.0)
            await h.until(lambda: bool(closing(h, fold)))
            assert (closing(h, sent[6]), closing(h, fold)) == (["absorbed"], ["settled"])
            assert [s.delivery_id for s in h.service.submits][6:] == [fold]

    asyncio.run(main())


def test_hourglass_removals_in_flight_are_bounded_by_the_turn_cap(env: dict[str, str]) -> None:
    """One removal task per closed turn, at most ``CLANKIE_DISCORD_MAX_TURNS`` (1 here): while Discord holds the first
    removal, the next answered turn's ⏳ stays (cosmetic: it was answered); the held one comes off once let go."""
    clock = FakeClock()
    overrides = {**PACE, "CLANKIE_USER_TURNS_PER_MINUTE": "1", "CLANKIE_USER_PACED_MINUTES": "2",
                 "CLANKIE_DISCORD_MAX_TURNS": "1"}

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: list(ROOMS)})
        async with running(env, overrides=overrides, clock=clock, fake=fake) as h:
            sent = []
            for room in ROOMS[:3]:
                sent.append(m := str((await h.fake.message(room, f"hi in {room}", author_id=PERSON))["id"]))
                await h.until(lambda m=m: bool(h.outcomes(m)))  # type: ignore[misc]  # bound per loop pass
            await h.until(lambda: all(h.fake.reactions.get(m) == [HOURGLASS] for m in sent[1:]))
            gate = h.fake.hold("DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me")
            for m in sent[1:]:
                clock.advance(60.0)  # a token back: the next waiting turn goes, and is answered
                await h.until(lambda m=m: bool(closing(h, m)))  # type: ignore[misc]  # bound per loop pass
            await h.until(lambda: len([c for c in h.fake.calls if c.route.startswith("DELETE /channels")]) == 1)
            gate.set()
            await h.until(lambda: h.fake.reactions.get(sent[1]) == [])
            assert h.fake.reactions.get(sent[2]) == [HOURGLASS] and h.fake.unreacted == [sent[1]]

    asyncio.run(main())


def test_a_steering_member_is_paced_and_their_calls_are_bounded(env: dict[str, str]) -> None:
    """A member keeping a run alive with steered messages: each costs half a turn of their pace, so of 20 steers
    into a held run only 10 reach the service (the first turn took one of six tokens, ten halves took the rest);
    the other 10 wait as one turn in the room, with ⏳, and are answered together when the pace allows, once."""
    clock = FakeClock()
    release = asyncio.Event()

    async def script(conn: ipc.Connection, sub: TurnSubmit) -> TurnResult:
        if sub.trigger.text == "hold":
            await release.wait()
        return TurnResult.settled("ok", turn_id=f"turn-{sub.delivery_id}")

    async def main() -> None:
        async with running(env, overrides=PACE, script=script, clock=clock) as h:
            held = str((await h.fake.message(CHAN, "hold", author_id=PERSON))["id"])
            await h.service.wait_submits(1)
            steers = [str((await h.fake.message(CHAN, f"and {i}", author_id=PERSON))["id"]) for i in range(20)]
            await h.until(lambda: all(h.outcomes(m) for m in steers))
            assert [h.outcomes(m)[0] for m in steers] == ["accepted"] * 10 + ["waiting"] * 10
            await h.until(lambda: len(h.service.submits) >= 11)
            assert len(h.service.submits) == 11  # the run and ten steers: the rest wait in the bridge for the pace
            release.set()
            await h.until(lambda: all(closing(h, m) for m in [held, *steers[:10]]))
            assert not any(closing(h, m) for m in steers[10:])
            due = h.app.ingress.paced.next_release(clock.wall())
            assert due is not None
            clock.advance(due - clock.wall())
            await h.until(lambda: all(closing(h, m) for m in steers[10:]))
            last = h.service.submits[-1]
            assert len(h.service.submits) == 12 and last.delivery_id == steers[-1]
            assert [b.id for b in last.backlog] == steers[10:-1]  # one turn for all that waited
            assert [closing(h, m) for m in steers[10:]] == [["absorbed"]] * 9 + [["settled"]]
            await h.until(lambda: all(h.fake.reactions.get(m) == [] for m in steers[10:]), what="every ⏳ taken off")

    asyncio.run(main())


def test_a_bridge_killed_with_messages_waiting_for_the_pace_loses_none(env: dict[str, str]) -> None:
    """Six messages run and six wait for the pace; the bridge dies (its journal is put back exactly as it was when
    the last message was admitted, as after a kill -9: nothing written at a stop counts). The next bridge brings the
    six back from the journal, starts them at its fresh pace, and every message ends with exactly one outcome."""
    clock = FakeClock()

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: list(ROOMS)})
        async with running(env, overrides=PACE, clock=clock, fake=fake) as h:
            sent = [str((await h.fake.message(room, f"hi in {room}", author_id=PERSON))["id"]) for room in ROOMS]
            await h.until(lambda: all(h.outcomes(m) for m in sent) and all(closing(h, m) for m in sent[:6]))
            assert [h.outcomes(m)[0] for m in sent[6:]] == ["waiting"] * 6
            journal = h.app.journal.path
            dead = journal.with_name("at-the-kill")
            shutil.copyfile(journal, dead)  # what the kernel held when the last message was admitted
        shutil.copyfile(dead, journal)
        fake2 = FakeDiscord(guilds={GUILD: list(ROOMS)})
        async with running(env, overrides=PACE, clock=FakeClock(), fake=fake2) as h2:
            await h2.until(lambda: all(closing(h2, m) for m in sent), what="every message closed")
            assert {m: closing(h2, m) for m in sent} == {m: ["settled"] for m in sent}
            assert sorted(s.delivery_id for s in h2.service.submits) == sorted(sent[6:])
            assert not any(e.open for e in h2.app.journal.state.entries.values())

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_real_bridge_process_killed_with_messages_waiting_for_the_pace_loses_none(env: dict[str, str]) -> None:
    """`kill -9` of the real `python -m bridge` while six messages wait for their author's pace: the next process
    reads them back from the journal and answers them (its buckets start full), and each of the twelve messages has
    exactly one closing receipt."""

    async def main() -> None:
        fake = FakeDiscord(guilds={GUILD: list(ROOMS)})
        await fake.start()
        settings = load(env)
        paths.ensure_private_dir(settings.runtime_dir)
        service = FakeService(paths.socket_path(settings.runtime_dir, "service"))
        await service.start()
        penv = {**env, "DISCORD_TOKEN": fake.token, "CLANKIE_DISCORD_API_BASE": fake.api_base,
                "CLANKIE_DISCORD_GUILD_IDS": GUILD, **PACE}
        receipts = settings.state_dir / "receipts" / "bridge.jsonl"

        def closings(m: str) -> list[str]:
            return [r["outcome"] for r in read_lines(receipts) if r["delivery_id"] == m and r["outcome"] in CLOSING]

        def waiting(m: str) -> bool:
            return any(r["delivery_id"] == m and r["outcome"] == "waiting" for r in read_lines(receipts))

        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bridge", env=penv,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            await fake.wait_for(lambda: fake.readies == 1, timeout=20)
            sent = [str((await fake.message(room, f"hi in {room}", author_id=PERSON))["id"]) for room in ROOMS]
            await until(lambda: all(closings(m) for m in sent[:6]) and all(waiting(m) for m in sent[6:]), 20,
                        "six answered and six waiting for the pace")
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            assert not any(closings(m) for m in sent[6:])
            proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bridge", env=penv,
                                                        stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.DEVNULL)
            await until(lambda: all(closings(m) for m in sent), 30, "every message closed after the restart")
            assert {m: closings(m) for m in sent} == {m: ["settled"] for m in sent}
            assert sorted(s.delivery_id for s in service.submits) == sorted(sent)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await service.close()
            await fake.close()

    asyncio.run(main())
