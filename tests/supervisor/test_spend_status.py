"""`clankiectl status` shows the day's spend from the session trees; `--json` only adds keys."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from clankie import settings as settings_mod
from clankie.protocol import LaneInfo, LanesReply, Tokens
from clankie.testing.clock import FakeClock
from supervisor import ctl
from supervisor.control import Control
from supervisor.ctl_render import format_tokens
from supervisor.tree import Tree
from tests.clankie.test_spend import message, write_tree


def test_status_reports_the_days_tokens(env: dict[str, str], runtime_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Today's (UTC, on the supervisor's clock) usage from every lane's trees is in `status` and `status --json`."""
    settings = settings_mod.load(env)
    clock = FakeClock()  # its wall clock reads 2027-01-15 UTC
    captain = settings.state_dir / "captain"
    write_tree(captain / "rooms/a/s.jsonl", [message("2027-01-15", input=3, cache_read=40, cache_write=2, output=9),
                                             message("2027-01-14", input=500, output=500)])
    write_tree(captain / "turns/b/t.jsonl", [message("2027-01-15", input=1, output=1)])

    async def go() -> None:
        tree = Tree(settings, [], clock=clock, env=env, subreaper=False)
        control = Control(tree)
        path = runtime_dir / "control.sock"
        await control.start(path)
        try:
            assert await asyncio.to_thread(ctl.main, ["--socket", str(path), "status", "--json"]) == 0
            assert await asyncio.to_thread(ctl.main, ["--socket", str(path), "status"]) == 0
        finally:
            await control.close()

    asyncio.run(go())
    as_json, text = capsys.readouterr().out.split("\n", 1)
    doc = json.loads(as_json)
    assert set(doc) >= {"supervisor", "children", "attachment_root"}  # the old keys stay
    assert doc["tokens_day"] == "2027-01-15"
    assert doc["tokens_today"] == {"input": 4, "cache_read": 40, "cache_write": 2, "output": 10,
                                   "cache_write_1h": 0}
    assert "spent today (2027-01-15 UTC): tokens in=4 cache_read=40 cache_write=2 out=10" in text


def test_lanes_lines_show_each_lanes_tokens() -> None:
    """A lane line ends with its four token counts, or `tokens -` when the service could not say."""
    known = LaneInfo(key="k", warm=True, state="idle", turns=2, tokens=Tokens(input=1, cache_read=2, cache_write=3, output=4))
    assert format_tokens(known.tokens) == "tokens in=1 cache_read=2 cache_write=3 out=4"
    assert format_tokens(LanesReply(lanes=(LaneInfo(key="k", warm=False, state="idle"),)).lanes[0].tokens) == "tokens -"
