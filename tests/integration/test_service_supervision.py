"""The supervisor link: heartbeats listing live runs, abort_run for a stalled run, lanes and say (§9 #14, 17)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator

from clankie import ipc
from clankie.link import supervisor_link
from clankie.protocol import AbortReply, AbortRun, Empty, Heartbeat, LanesReply, Peers, Record, SayRequest, TurnResult
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service

ROOM_KEY = "discord:clankie:discord:1:2"


class FakeSupervisor:
    """The supervisor's end of a real socketpair link: records what the child sends."""

    def __init__(self) -> None:
        self.heartbeats: list[Heartbeat] = []
        self.ready = asyncio.Event()
        self.conn: ipc.Connection | None = None

    async def handle(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if method == "ready":
            self.ready.set()
        elif method == "heartbeat":
            assert isinstance(params, Heartbeat)
            self.heartbeats.append(params)
        return None


@contextlib.asynccontextmanager
async def linked(app: ServiceApp) -> AsyncIterator[FakeSupervisor]:
    child_end, sup_end = socket.socketpair()
    sup = FakeSupervisor()
    accept = asyncio.create_task(ipc.from_socket(sup_end, "supervisor", sup.handle, initiate=False))
    env = {"CLANKIE_SUPERVISOR_FD": str(child_end.detach())}
    async with supervisor_link("service", app.link_handler, app.heartbeat, interval=0.02, env=env) as link:
        sup.conn = await accept
        await sup.conn.notify("peers", Peers(pids=(os.getpid(),)))  # as a supervisor names the bridge: here, us
        await link.ready()
        await sup.ready.wait()
        yield sup
    await sup.conn.aclose()


def test_stalled_run_fails_every_attached_turn_and_the_lane_comes_back_cold(env: dict[str, str]) -> None:
    """abort_run(stalled) over the link fails owner and steerers captain_turn_stalled; the next message rebuilds cold (§9 #17)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app, linked(app) as sup:
            fake.script(fa.text("never finishes", stall_after=2), fa.text("fresh start"))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "first"))
            await fake.wait_for_requests(1)
            t2 = bridge.start(msg("m2", "second"))
            await until(lambda: any(r.turns == 2 for hb in sup.heartbeats for r in hb.runs))
            run_report = next(r for hb in reversed(sup.heartbeats) for r in hb.runs)
            assert run_report.lane == ROOM_KEY
            assert sup.conn is not None
            reply = await sup.conn.request("abort_run", AbortRun(lane=ROOM_KEY, run_id=run_report.run_id, reason="stalled"), expect=AbortReply)
            assert reply == AbortReply(aborted=True)
            r1, r2 = await asyncio.gather(t1, t2)
            assert (r1.outcome, r1.code, r1.turn_id) == ("failed", "captain_turn_stalled", "turn-1-m1")
            assert (r2.outcome, r2.code, r2.turn_id) == ("failed", "captain_turn_stalled", "turn-2-m2")
            assert ROOM_KEY not in app.captain.lanes
            again = await bridge.submit(msg("m3", "hello again"))
            assert (again.outcome, again.text) == ("settled", "fresh start")
            assert len(bridge.history_calls) == 2  # rebuilt cold from disk
            assert app.turns.evidence.of("m2") == ["accepted", "failed"]
            # a second abort for the same (gone) run is refused
            assert (await sup.conn.request("abort_run", AbortRun(lane=ROOM_KEY, run_id=run_report.run_id, reason="stalled"), expect=AbortReply)).aborted is False

    run(body())


def test_lanes_and_say_are_answered_over_the_link(env: dict[str, str]) -> None:
    """`lanes` lists the live lanes; three concurrent `say` calls in one room behave like a burst."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app, linked(app) as sup:
            gate = asyncio.Event()
            fake.script(fa.text("hmm", stall_after=3, stall_until=gate), fa.text("one answer for all three"))
            assert sup.conn is not None
            conn = sup.conn
            first = asyncio.create_task(conn.request("say", SayRequest(room="local:lab", text="one"), expect=TurnResult))
            await fake.wait_for_requests(1)
            rest = [asyncio.create_task(conn.request("say", SayRequest(room="local:lab", text=t), expect=TurnResult)) for t in ("two", "three")]
            await until(lambda: len(app.captain.lanes["discord:clankie:discord:local:lab"].machine.steerers) == 2)
            lanes = await conn.request("lanes", Empty())
            assert isinstance(lanes, LanesReply)
            (info,) = lanes.lanes
            # say has no bridge to read the backlog from: the lane stays cold for the room's next Discord turn
            assert (info.key, info.state, info.warm) == ("discord:clankie:discord:local:lab", "running", False)
            assert info.run_id is not None and info.last_event_age_s is not None
            gate.set()
            results = [await first] + [await t for t in rest]
            assert all(isinstance(r, TurnResult) for r in results)
            assert [r.outcome for r in results] == ["settled", "absorbed", "absorbed"]
            assert results[0].text == "one answer for all three"
            # the lane's spend, read back from its session tree: the fake provider bills every call
            (spent,) = (await conn.request("lanes", Empty())).lanes  # type: ignore[attr-defined]  # request() without expect= is typed Record; this reply is a LanesReply
            assert spent.tokens is not None and spent.tokens.output > 0 and spent.tokens.input + spent.tokens.cache_read > 0
            bad = conn.request("say", SayRequest(room="a/b/c", text="x"))
            try:
                await bad
            except Exception as exc:
                assert getattr(exc, "code", "") == "invalid_room"
            else:
                raise AssertionError("a bad room must be refused")

    run(body())


def test_heartbeat_ages_count_from_the_last_event_on_boottime(env: dict[str, str]) -> None:
    """A quiet run's reported age grows with CLOCK_BOOTTIME, suspended time included; idle lanes report no run (§9 #14)."""

    async def body() -> None:
        clock = FakeClock()
        async with FakeAnthropic() as fake, service(env, fake, clock=clock) as app:
            gate = asyncio.Event()
            fake.script(fa.text("slow", stall_after=2, stall_until=gate))
            bridge = FakeBridge()
            await bridge.connect(app)
            turn = bridge.start(msg("m1", "slow question"))
            await fake.wait_for_requests(1)
            await until(lambda: app.heartbeat().runs != ())
            (first,) = app.heartbeat().runs
            clock.advance(295)
            clock.suspend(60)
            (later,) = app.heartbeat().runs
            assert later.run_id == first.run_id and later.turns == 1
            assert later.last_event_age_s - first.last_event_age_s == 355
            assert later.started_age_s >= later.last_event_age_s
            gate.set()
            assert (await turn).outcome == "settled"
            assert app.heartbeat().runs == ()

    run(body())


def test_stalled_one_shot_and_operator_abort(env: dict[str, str]) -> None:
    """A stalled privileged one-shot fails stalled; an operator abort of a room run fails it captain_session_failed."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, discord_system_actor_ids=("77",)) as app, linked(app) as sup:
            fake.script(fa.text("hung", stall_after=2), fa.text("also hung", stall_after=2), fa.text("recovered"))
            assert sup.conn is not None
            bridge = FakeBridge()
            await bridge.connect(app)
            oneshot = bridge.start(msg("s1", "privileged", author="77"))
            await fake.wait_for_requests(1)
            (report,) = app.captain.runs()
            assert report.lane == f"{ROOM_KEY}#s1"
            assert (await sup.conn.request("abort_run", AbortRun(lane=report.lane, run_id=None, reason="stalled"), expect=AbortReply)).aborted
            r = await oneshot
            assert (r.outcome, r.code) == ("failed", "captain_turn_stalled")
            room = bridge.start(msg("m1", "ordinary"))
            await fake.wait_for_requests(2)
            await until(lambda: app.captain.runs() != ())
            assert (await sup.conn.request("abort_run", AbortRun(lane=ROOM_KEY, reason="operator"), expect=AbortReply)).aborted
            r = await room
            assert (r.outcome, r.code, r.turn_id) == ("failed", "captain_session_failed", "turn-1-m1")
            assert ROOM_KEY in app.captain.lanes  # an operator abort keeps the lane warm
            assert (await bridge.submit(msg("m2", "again"))).text == "recovered"
            # the room lane's single cold read; a privileged one-shot outside a trusted room reads no history
            assert [call.delivery_id for call in bridge.history_calls] == ["m1"]

    run(body())
