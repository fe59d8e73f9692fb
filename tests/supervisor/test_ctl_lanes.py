"""clankiectl lanes: live lanes and lanes only on disk, each on one line, and --limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clankie import ipc
from clankie.protocol import LaneInfo, LanesReply, Record
from supervisor import ctl
from supervisor.ctl_render import format_lane

LANES = (
    LaneInfo(key="discord:c:discord:1:13", warm=True, state="idle", turns=4, last_active_age_s=5.0),
    LaneInfo(key="discord:c:discord:1:11", warm=True, state="on_disk", live=False, last_active_age_s=120.0),
    LaneInfo(key="discord:c:discord:1:10", warm=False, state="on_disk", live=False, last_active_age_s=7200.0),
)


def lanes_output(runtime_dir: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run clankiectl against a control server that answers ``lanes`` with :data:`LANES`."""

    async def answer(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        assert method == "lanes"
        return LanesReply(lanes=LANES)

    async def go() -> int:
        path = runtime_dir / "control.sock"
        server = await ipc.serve(path, "supervisor-control", answer)
        try:
            return await asyncio.to_thread(ctl.main, ["--socket", str(path), *argv])
        finally:
            await server.close()

    code = asyncio.run(go())
    return code, capsys.readouterr().out


def test_a_lane_only_on_disk_shows_its_warmth_and_last_activity() -> None:
    assert format_lane(LANES[1]) == "discord:c:discord:1:11  on_disk  warm  last_active=2m00s"
    assert format_lane(LANES[2]).endswith("cold  last_active=2h00m")
    assert "run=-" in format_lane(LANES[0])  # a live lane keeps its run and turns columns


def test_every_lane_is_printed_and_limit_keeps_the_first(runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = lanes_output(runtime_dir, ["lanes"], capsys)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == [lane.key for lane in LANES]
    code, out = lanes_output(runtime_dir, ["lanes", "--limit", "2"], capsys)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == [lane.key for lane in LANES[:2]]
