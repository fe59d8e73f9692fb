"""Spend governed on the real tree: a spent day budget stops turns before any model request, visibly, and holds
across a service kill and a whole-tree restart; the operator raises it live with ``clankiectl budget``; a room's
budget stops that room only, a person's that person in every room."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

import pytest

from clankie.testing import fake_anthropic as fa
from service.captain.spend.spending import NOTICE
from supervisor import ctl
from tests.integration.tree import CHAN, PERSON, Tree, real_tree
from tests.polling import until

OTHER_ROOM = "102"
OTHER_PERSON = "500000000000000002"

WARNING = "\u26a0\ufe0f"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # three tree starts (boot, a service kill, a restart)


async def refused(t: Tree, text: str, channel: str = CHAN, author: str = PERSON) -> str:
    """An addressed message that the spent budget refuses: its delivery fails captain_budget_exhausted with the
    failure reaction on it. Returns its id."""
    sent = await t.discord.message(channel, text, author_id=author, mention_bot=True)
    closing = await until(lambda: t.outcome_of(sent["id"]), 45, f"the outcome of {text!r}")
    assert (closing["outcome"], closing.get("reason")) == ("failed", "captain_budget_exhausted")
    await until(lambda: t.discord.reactions.get(sent["id"]) == [WARNING] or None, 15, "the failure reaction")
    return str(sent["id"])


async def answered(t: Tree, text: str, channel: str, author: str = PERSON) -> str:
    """An addressed message that is answered; returns the reply's text."""
    sent = await t.discord.message(channel, text, author_id=author, mention_bot=True)
    return (await t.reply_to(sent["id"])).content


async def clankiectl(t: Tree, *args: str) -> tuple[int, str]:
    out = io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out):
            return ctl.main(["--socket", str(t.sock), *args])

    code = await asyncio.to_thread(call)
    return code, out.getvalue()


def test_a_one_token_day_budget_stops_the_tree_before_the_model_and_survives_kill_and_restart(
    tmp_path: Path, runtime_dir: Path
) -> None:
    async def body() -> None:
        async with real_tree(tmp_path, runtime_dir, env={"CLANKIE_BUDGET_DAY_TOKENS": "1"}, spares={"service"}, hosts=False) as t:
            t.anthropic.script(fa.text("first and last answer today"))
            assert (await t.ask("clankie, hello")).content == "first and last answer today"  # nothing spent yet
            first = await refused(t, "clankie, hello again")
            notices = [p for p in t.discord.posts_in(CHAN) if p.content == NOTICE]
            assert len(notices) == 1 and str((notices[0].message_reference or {}).get("message_id")) == first
            assert len(t.anthropic.requests) == 1
            await t.wait_child(lambda c: "!! budget 80% spent: tree; budget: spent" in c.detail
                               and "left 0/1 tok" in c.detail, "service")  # status: the 80 % warning, what is left
            code, shown = await clankiectl(t, "budget", "--json")
            tree = json.loads(shown)["budgets"][0]
            assert code == 0 and tree["key"] == "tree" and tree["limit_tokens"] == 1 and tree["tokens_left"] < 0

            await t.kill("service")  # the total is durable: a new service process reads it back
            await t.ready()
            await refused(t, "clankie, after the service died")
            await t.kill_supervisor()  # and so is a whole-tree restart
            await t.respawn()
            await t.ready()
            await refused(t, "clankie, after the tree came back")
            assert len(t.anthropic.requests) == 1
            assert len([p for p in t.discord.posts_in(CHAN) if p.content == NOTICE]) == 1  # once an hour per room

            code, said = await clankiectl(t, "budget", "raise", "tree", "--tokens", "10000000")
            assert code == 0 and "raise tree" in said
            t.anthropic.script(fa.text("back again"))
            assert (await t.ask("clankie, are you back?")).content == "back again"
            evidence = (t.state / "captain" / "evidence.jsonl").read_text()
            assert '"event":"budget_raise"' in evidence and '"lane":"tree"' in evidence

    asyncio.run(asyncio.wait_for(body(), 240))


def test_a_room_budget_stops_one_room_and_a_person_budget_one_person_in_every_room(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """Room budgets of one token and person budgets of one token: after the first answer in room A, room A is
    refused and room B is not; after PERSON's answers, PERSON is refused in every room and OTHER_PERSON is not."""

    async def body() -> None:
        env = {"CLANKIE_BUDGET_ROOM_DAY_TOKENS": "1"}
        async with real_tree(tmp_path, runtime_dir, env=env, channels=(CHAN, OTHER_ROOM), spares=False, hosts=False) as t:
            t.anthropic.script(fa.text("room A answered"), fa.text("room B answered"))
            assert await answered(t, "clankie, hi", CHAN) == "room A answered"
            await refused(t, "clankie, hi again", CHAN)
            assert await answered(t, "clankie, hi from B", OTHER_ROOM) == "room B answered"
            assert len(t.anthropic.requests) == 2

    asyncio.run(asyncio.wait_for(body(), 200))

    async def people() -> None:
        env = {"CLANKIE_BUDGET_USER_DAY_TOKENS": "1"}
        async with real_tree(tmp_path / "people", runtime_dir, env=env, channels=(CHAN, OTHER_ROOM), spares=False, hosts=False) as t:
            t.anthropic.script(fa.text("first answer"), fa.text("the other person's answer"))
            assert await answered(t, "clankie, hi", CHAN) == "first answer"
            await refused(t, "clankie, hi again", CHAN)
            await refused(t, "clankie, hi in the other room", OTHER_ROOM)
            assert await answered(t, "clankie, my turn", OTHER_ROOM, OTHER_PERSON) == "the other person's answer"
            assert len(t.anthropic.requests) == 2

    (tmp_path / "people").mkdir()
    asyncio.run(asyncio.wait_for(people(), 200))
