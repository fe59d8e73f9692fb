"""clankiectl lanes: live lanes and lanes only on disk, each on one line with its hash, --limit, --json and --hash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from clankie import ipc
from clankie.journald import lane_hash
from clankie.protocol import LaneInfo, LanesReply, LanesRequest, Record
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
        assert method == "lanes" and isinstance(params, LanesRequest)
        if params.hash is not None:  # as the service answers: the lanes whose hash starts with it
            return LanesReply(lanes=tuple(lane for lane in LANES if lane_hash(lane.key).startswith(params.hash)))
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
    assert format_lane(LANES[1]) == f"{lane_hash(LANES[1].key)}  discord:c:discord:1:11  on_disk  warm  last_active=2m00s"
    assert format_lane(LANES[2]).endswith("cold  last_active=2h00m")
    assert "run=-" in format_lane(LANES[0])  # a live lane keeps its run and turns columns


def test_every_lane_is_printed_and_limit_keeps_the_first(runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = lanes_output(runtime_dir, ["lanes"], capsys)
    assert code == 0 and [line.split()[:2] for line in out.splitlines()] == [[lane_hash(lane.key), lane.key] for lane in LANES]
    code, out = lanes_output(runtime_dir, ["lanes", "--limit", "2"], capsys)
    assert code == 0 and [line.split()[1] for line in out.splitlines()] == [lane.key for lane in LANES[:2]]


def test_lanes_json_carries_each_lanes_hash_the_one_journald_and_traces_use(runtime_dir: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``lanes --json`` adds ``hash`` to every lane: 16 hex digits of clankie.journald.lane_hash, the LANE= field."""
    code, out = lanes_output(runtime_dir, ["lanes", "--json"], capsys)
    rows = json.loads(out)["lanes"]
    assert code == 0 and [(r["key"], r["hash"]) for r in rows] == [(lane.key, lane_hash(lane.key)) for lane in LANES]
    assert all(len(r["hash"]) == 16 and int(r["hash"], 16) >= 0 for r in rows)


def test_a_lane_is_found_by_its_hash_or_a_prefix_of_it(runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``lanes --hash H`` asks the service for the lanes whose hash starts with H; none found is exit 1; a hash that is
    not 4-16 hex digits is a usage error before any connection."""
    wanted = lane_hash(LANES[1].key)
    code, out = lanes_output(runtime_dir, ["lanes", "--hash", wanted.upper()], capsys)
    assert code == 0 and [line.split()[:2] for line in out.splitlines()] == [[wanted, LANES[1].key]]
    code, out = lanes_output(runtime_dir, ["lanes", "--hash", wanted[:6]], capsys)
    assert code == 0 and LANES[1].key in out
    absent = next(f"{n:04x}" for n in range(1 << 16) if not any(lane_hash(x.key).startswith(f"{n:04x}") for x in LANES))
    code, out = lanes_output(runtime_dir, ["lanes", "--hash", absent], capsys)
    assert code == 1 and f"no lane's hash starts with {absent}" in out
    assert ctl.main(["--socket", str(runtime_dir / "none.sock"), "lanes", "--hash", "xyz!"]) == 2
    assert "--hash" in capsys.readouterr().err
