"""The lane's shell: the one place its machine is fed, and the one record of who the live run answers."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain.lanes.lane import IllegalLaneEvent, LaneState, RunEnded, TurnArrived
from service.captain.lanes.live import NewTurn
from service.captain.tools.model_tools import DeliveryContext
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service

ROOT = Path(__file__).resolve().parents[3]
ROOM = "discord:clankie:discord:1:2"


def _handle_callers() -> list[str]:
    """Every ``module:function`` under service/ that calls a ``.handle(...)`` method."""
    found = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "handle":
                    found.append(f"{path.relative_to(ROOT).as_posix()}:{fn.name}")
    return found


def test_the_lane_machine_is_fed_in_one_place() -> None:
    """Only LaneShell.feed hands events to a lane machine: every other place goes through it."""
    assert _handle_callers() == ["service/captain/lanes/shell.py:feed"]


def test_the_owner_is_read_from_the_lane_not_copied(env: dict[str, str]) -> None:
    """Tools read the run's owner from the lane: the first message's delivery while it runs, a steer does not
    take it over, and nobody once the run has answered."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("one moment", stall_after=3, stall_until=gate), fa.text("both of you: yes"))
            bridge = FakeBridge()
            await bridge.connect(app)
            t1 = bridge.start(msg("m1", "clankie is it on?"))
            await fake.wait_for_requests(1)
            lane = app.captain.lanes[ROOM]
            owner = lane.capture.owner
            assert owner is not None and owner.delivery_id == "m1"
            t2 = bridge.start(msg("m2", "and now?"))
            await until(lambda: lane.machine.steerers != [], what="m2 steered into m1's run")
            assert lane.capture.owner is owner and lane.capture.message_id == "m2"  # attribution moves, the owner stays
            gate.set()
            r1, r2 = await asyncio.gather(t1, t2)
            assert (r1.outcome, r2.outcome) == ("settled", "absorbed")
            assert lane.capture.owner_of() is None and not lane.slots and lane.machine.state is LaneState.IDLE

    run(body())


def test_a_turn_record_rides_only_with_its_arrival(env: dict[str, str]) -> None:
    """feed refuses a TurnArrived without the turn's record, or a record beside another event, and the lane
    is left exactly as it was."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("hi"))
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("m1", "hello"))).outcome == "settled"
            lane = app.captain.lanes[ROOM]
            before = (lane.machine.state, lane.machine.turns_started, dict(lane.slots))
            with pytest.raises(IllegalLaneEvent):
                lane.feed(TurnArrived("m2", "r2"))  # type: ignore[call-overload]  # the mistake mypy refuses; this is the runtime check
            future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            stray = NewTurn(delivery=DeliveryContext("m3", lane.room, None), trigger=msg("m3", "x").trigger, backlog=(),
                            future=future)  # type: ignore[arg-type]  # never awaited: the shell must refuse it first
            with pytest.raises(IllegalLaneEvent):
                lane.feed(RunEnded(None), stray)  # type: ignore[call-overload]  # as above
            assert (lane.machine.state, lane.machine.turns_started, dict(lane.slots)) == before

    run(body())
