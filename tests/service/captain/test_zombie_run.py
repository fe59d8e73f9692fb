"""An aborted run that will not stop never shares its tree and is escalated, not confirmed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from clankie import settings as settings_mod
from clankie.protocol import AbortReply, AbortRun
from clankie.testing import fake_anthropic as fa
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.agent.tools import Tool, ToolContext, ToolResult
from service.app import ServiceApp
from service.captain.lanes import keys
from service.captain.lanes.captain import TEARDOWN_GRACE, Captain, CaptainDeps
from service.captain.lanes.keys import LanePlan
from service.captain.tools.model_tools import DeliveryContext, TurnCapture
from tests.polling import until
from tests.service.captain.harness import msg, run, service_env

ROOM_KEY = "discord:clankie:discord:1:2"


class Stubborn:
    """A tool that swallows cancellation until the test releases it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.started.set()
        while True:
            try:
                await self.release.wait()
                return ToolResult(content="done at last")
            except asyncio.CancelledError:
                continue

    def tool(self) -> Tool:
        return Tool(name="stubborn", description="never stops", input_schema={"type": "object"}, execute=self.execute)


class StubbornCaptain(Captain):
    def __init__(self, deps: CaptainDeps, extra: Tool) -> None:
        super().__init__(deps)
        self._extra = extra

    def _tools(self, capture: TurnCapture, plan: LanePlan) -> list[Tool]:
        return [*super()._tools(capture, plan), self._extra]


def _trees(state_dir: Path) -> list[Path]:
    return sorted(keys.CaptainPaths.under(state_dir).room(ROOM_KEY).glob("*.jsonl"))


def test_run_ignoring_its_abort_is_reported_and_the_room_gets_a_fresh_tree(env: dict[str, str], state_dir: Path) -> None:
    """A stalled run that ignores its abort is not confirmed, stays in the heartbeat, and the room's next turn uses a new tree."""

    async def body() -> None:
        clock = FakeClock()
        stubborn = Stubborn()
        async with FakeAnthropic() as fake:
            fake.script(fa.tool_use(("stubborn", {})), fa.text("fresh lane answer"))
            app = ServiceApp(settings_mod.load(service_env(env, fake)), clock=clock)
            app.captain = app.turns.captain = StubbornCaptain(
                CaptainDeps(settings=app.settings, clock=clock, provider=app.provider), stubborn.tool()
            )
            captain = app.captain
            first = msg("m1", "run the stubborn tool")
            t1 = asyncio.create_task(captain.submit(first, DeliveryContext("m1", first.room, None)))
            await stubborn.started.wait()
            (report,) = captain.runs()
            abort = asyncio.create_task(app.link_handler(None, "abort_run", AbortRun(lane=ROOM_KEY, run_id=report.run_id, reason="stalled")))  # type: ignore[arg-type]  # the link handler does not use the connection for abort_run
            r1 = await t1
            assert (r1.outcome, r1.code) == ("failed", "captain_turn_stalled")  # the turns are answered at once
            await until(lambda: clock.sleepers == 2)  # the teardown grace and the bounded abort wait
            clock.advance(TEARDOWN_GRACE)
            await until(lambda: bool(captain.zombies))
            assert [r.run_id for r in captain.runs()] == [report.run_id]  # still reported: the supervisor escalates
            beat = app.heartbeat()
            assert "1 aborted runs not stopping" in beat.detail and beat.report["zombie_runs"] == 1
            clock.advance(app.settings.stall_abort_grace_seconds)
            assert await abort == AbortReply(aborted=False)

            second = msg("m2", "again")
            r2 = await captain.submit(second, DeliveryContext("m2", second.room, None))
            assert (r2.outcome, r2.text) == ("settled", "fresh lane answer")
            old, new = sorted(_trees(state_dir), key=lambda p: "again" in p.read_text())
            assert "again" not in old.read_text() and "run the stubborn tool" not in new.read_text()

            stubborn.release.set()
            await until(lambda: not captain.zombies)
            assert captain.runs() == ()
            await app.close()

    run(body())


def test_stalled_abort_is_confirmed_once_the_run_has_ended(env: dict[str, str]) -> None:
    """abort_run(stalled) answers aborted=True for a run that stops, after it has actually ended."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("never finishes", stall_after=2))
            app = ServiceApp(settings_mod.load(service_env(env, fake)))
            first = msg("m1", "go")
            t1 = asyncio.create_task(app.captain.submit(first, DeliveryContext("m1", first.room, None)))
            await fake.wait_for_requests(1)
            await until(lambda: app.captain.lanes[ROOM_KEY].agent.is_running)
            lane = app.captain.lanes[ROOM_KEY]
            reply = await app.link_handler(None, "abort_run", AbortRun(lane=ROOM_KEY, run_id=None, reason="stalled"))  # type: ignore[arg-type]  # the link handler does not use the connection for abort_run
            assert reply == AbortReply(aborted=True)
            assert lane.owner_task is not None and lane.owner_task.done()  # confirmed only after the run ended
            assert ROOM_KEY not in app.captain.lanes and not app.captain.zombies and app.captain.runs() == ()
            assert (await t1).code == "captain_turn_stalled"
            await app.close()

    run(body())
