"""The whole tree, as a person in a Discord room and an operator see it.

`clankie run` boots the service and the bridge against the loopback fakes. One boot
walks the mission's central promises in order: a burst of three messages gets
one answer and two absorbed deliveries; a run that goes silent is aborted by
the supervisor's stall watchdog and every turn attached to it fails as
``captain_turn_stalled`` with nothing posted; the next message rebuilds the
lane cold from disk and is answered.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

from clankie.testing import fake_anthropic as fa
from tests.integration.tree import CHAN, Tree, real_tree
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

STALL_SECONDS = 3
HOST_TOOLS = {"browser_screenshot", "draw_er_diagram", "draw_sequence_diagram"}


def outcome_of(t: Tree, delivery_id: str) -> dict[str, Any] | None:
    return t.outcome_of(delivery_id)


async def wait_lane_turns(t: Tree, turns: int) -> None:
    """Wait until the room's live run has ``turns`` turns attached (owner plus steered)."""
    await t.wait_lane(lambda info: info.turns >= turns, CHAN, 20)


def history_fetches(t: Tree) -> int:
    return sum(1 for call in t.discord.calls if call.route == "GET /channels/{id}/messages")


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every user-authored text block in a model request, in order."""
    out: list[str] = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [content] if isinstance(content, str) else [b.get("text", "") for b in content if b.get("type") == "text"]
        out.extend(blocks)
    return out


def test_a_burst_is_one_answer_a_stall_is_cut_by_the_supervisor_and_the_lane_comes_back_cold(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """Burst → one reply + two absorbed; stall → all attached turns fail stalled, nothing posted; next message → cold lane answers.
    The tree runs no host (``CLANKIE_HOSTS=none``): it has no host child, and the model is offered no host's tool."""

    async def main() -> None:
        env = {"CLANKIE_STALL_SECONDS": str(STALL_SECONDS), "CLANKIE_STALL_TICK_SECONDS": "0.25"}
        async with real_tree(tmp_path, runtime_dir, env, spares=False, hosts=False) as t:
            # -- a burst of three: the first message's run is held mid-answer while two more arrive
            hold = asyncio.Event()
            t.anthropic.script(
                fa.text("Let me think about the lobby", stall_after=3, stall_until=hold),
                fa.text("Eight o'clock, same lobby, and yes, bring the new deck."),
            )
            first = await t.discord.message(CHAN, "clankie, when is the lobby tonight?")
            await t.anthropic.wait_for_requests(1)
            second = await t.discord.message(CHAN, "and is it the same one as last week?")
            third = await t.discord.message(CHAN, "also can I bring the new deck")
            await wait_lane_turns(t, 3)
            cold_fetches = history_fetches(t)
            hold.set()

            reply = await t.reply_to(first["id"])
            assert reply.content == "Eight o'clock, same lobby, and yes, bring the new deck."
            for delivery in (second["id"], third["id"]):
                got = await until(functools.partial(outcome_of, t, delivery), 20, f"an outcome for {delivery}")
                assert got["outcome"] == "absorbed"
            # the outcome receipt is written after the reply is posted: wait for it, as for the others
            got = await until(lambda: outcome_of(t, first["id"]), 20, "the first message's outcome")
            assert got["outcome"] == "settled"
            assert [str(p.message_reference["message_id"]) for p in t.discord.posts_in(CHAN)] == [first["id"]]  # type: ignore[index]  # a reply always carries its reference
            assert len(t.anthropic.requests) == 2
            assert [c.name for c in (await t.status()).children] == ["service", "bridge"]
            assert not HOST_TOOLS & {tool["name"] for tool in t.anthropic.requests[0]["tools"]}
            merged = user_texts(t.anthropic.requests[1])
            assert any("same one as last week" in text for text in merged[-2:])
            assert any("new deck" in text for text in merged[-2:])
            assert t.discord.typing_in(CHAN) >= 1, "a spoken turn lights the room"
            assert cold_fetches == 1, "the cold lane read the room's history exactly once"

            # -- a run that goes silent: nothing but the supervisor's watchdog ends it
            t.anthropic.script(fa.text("This answer never finishes", stall_after=2))
            stuck = await t.discord.message(CHAN, "clankie, look up the bracket")
            await t.anthropic.wait_for_requests(3)
            steered = await t.discord.message(CHAN, "the one from saturday")
            await wait_lane_turns(t, 2)
            for delivery in (stuck["id"], steered["id"]):
                got = await until(functools.partial(outcome_of, t, delivery), 30, f"the stall to fail {delivery}")
                assert (got["outcome"], got.get("reason")) == ("failed", "captain_turn_stalled")
            assert len(t.discord.posts_in(CHAN)) == 1, "a stalled run posts nothing"
            assert (await t.child("service")).restarts == 0, "the abort was confirmed; no restart needed"

            # -- the next message rebuilds the lane cold from disk: history is read again, once
            t.anthropic.script(fa.text("Found it: Saturday's bracket starts at noon."))
            again = await t.discord.message(CHAN, "clankie?")
            reply = await t.reply_to(again["id"])
            assert reply.content == "Found it: Saturday's bracket starts at noon."
            assert history_fetches(t) == cold_fetches + 1
            remembered = " ".join(user_texts(t.anthropic.requests[-1]))
            assert "when is the lobby tonight" in remembered, "the rebuilt lane still holds the room's earlier turns"

    asyncio.run(main())
