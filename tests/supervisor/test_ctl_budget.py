"""What ``clankiectl lanes`` and ``clankiectl budget`` print about spend (pure renderings), and the arguments."""

from __future__ import annotations

import pytest

from clankie.protocol import BudgetInfo, BudgetReply, BudgetRequest, LaneInfo, Tokens
from supervisor.ctl_args import params_of, parser
from supervisor.ctl_render import format_budget, format_lane


def test_a_live_lane_shows_its_rooms_budget_left_and_its_cache() -> None:
    lane = LaneInfo(key="discord:c:discord:1:2", warm=True, state="idle", turns=3, tokens=Tokens(input=5, cache_read=95),
                    budget_key="room:1/2", spent_today_tokens=1200, spent_today_usd=0.0123, budget_tokens_left=800,
                    budget_usd_left=None, cache_read_share=0.95, cache_lifetime="1h")
    line = format_lane(lane)
    assert "room:1/2 today=1200 tok $0.0123 left=800 tok" in line and line.endswith("cache_read=95% lifetime=1h")
    spent = lane.model_copy(update={"budget_tokens_left": -30, "budget_usd_left": 0.5})
    assert "left=0 tok $0.5000" in format_lane(spent)
    unlimited = lane.model_copy(update={"budget_tokens_left": None})
    assert "left=unlimited" in format_lane(unlimited)


def test_budget_prints_each_key_spent_limit_and_left() -> None:
    reply = BudgetReply(day="2027-01-15", message="raise tree", budgets=(
        BudgetInfo(key="tree", spent_tokens=900, spent_usd=1.5, limit_tokens=1000, limit_usd=2.0, tokens_left=100,
                   usd_left=0.5),
        BudgetInfo(key="user:42", spent_tokens=10, spent_usd=0.01),
    ))
    assert format_budget(reply).splitlines() == [
        "raise tree",
        "budgets for 2027-01-15 (UTC):",
        "  tree  spent=900 tok $1.5000  limit=1000 tok $2.00  left=100 tok $0.5000",
        "  user:42  spent=10 tok $0.0100  limit=none  left=unlimited",
    ]


@pytest.mark.parametrize(("argv", "request_"), [
    (["budget"], BudgetRequest()),
    (["budget", "raise", "room:1/2", "--usd", "5"], BudgetRequest(action="raise", key="room:1/2", usd=5.0)),
    (["budget", "reset", "user:42"], BudgetRequest(action="reset", key="user:42")),
])
def test_budget_arguments_become_the_request(argv: list[str], request_: BudgetRequest) -> None:
    assert params_of(parser().parse_args(argv)) == request_
