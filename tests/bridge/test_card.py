"""The tool-activity card's pure plan: fixed templates, a 2 s delay, one write per 2 s, none once words start."""

from __future__ import annotations

import pytest

from bridge.card import CARD_DELAY_S, EDIT_INTERVAL_S, GENERIC, CardPlan, label


@pytest.mark.parametrize(
    ("tool", "host", "text"),
    [
        ("browser_screenshot", "example.com", "Taking a screenshot of example.com\u2026"),
        ("browser_screenshot", None, "Taking a screenshot\u2026"),
        ("draw_er_diagram", None, "Drawing a diagram\u2026"),
        ("draw_sequence_diagram", "ignored.example", "Drawing a diagram\u2026"),
        ("bash", None, GENERIC),
        ("send_text_update", None, None),
    ],
)
def test_each_tool_has_a_fixed_template(tool: str, host: str | None, text: str | None) -> None:
    """A card says what he is doing in fixed words per tool, with at most a host name in them."""
    assert label(tool, host) == text


def test_the_card_waits_two_seconds_then_edits_at_most_every_two_seconds() -> None:
    """The first write is due 2 s after the first tool started; a change right after a write waits out the interval."""
    plan = CardPlan()
    plan.tool("c1", "A", True, now=10.0)
    assert plan.next_write(10.5) == ("A", 10.0 + CARD_DELAY_S)
    plan.wrote("A", 12.0)
    assert plan.next_write(12.0) is None
    plan.tool("c1", None, False, now=12.5)
    plan.tool("c2", "B", True, now=12.5)
    assert plan.next_write(12.5) == ("B", 12.0 + EDIT_INTERVAL_S)
    assert plan.next_write(20.0) == ("B", 20.0)


def test_no_card_once_words_have_started_and_nothing_after_the_end() -> None:
    """Typing means words are coming: a card not yet up never goes up; an ended card is never written."""
    plan = CardPlan()
    plan.tool("c1", "A", True, now=0.0)
    plan.words = True
    assert plan.next_write(5.0) is None
    up = CardPlan()
    up.tool("c1", "A", True, now=0.0)
    up.wrote("A", 2.0)
    up.tool("c2", "B", True, now=3.0)
    up.done = True
    assert up.next_write(9.0) is None


def test_a_quiet_tool_alone_arms_no_card() -> None:
    """A tool without a template (send_text_update) does not start the 2 s clock."""
    plan = CardPlan()
    plan.tool("c1", label("send_text_update", None), True, now=0.0)
    assert plan.since is None and plan.next_write(9.0) is None
