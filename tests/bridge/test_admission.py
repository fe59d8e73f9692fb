"""Which messages become turns, in the documented order, and how rooms stay engaged."""

from __future__ import annotations

import pytest

from bridge.admission import (
    Buffered,
    CatchUp,
    Drop,
    Duplicate,
    Engagement,
    Ingress,
    Policy,
    Run,
    Waiting,
)
from bridge.inbound import Inbound
from clankie.protocol import Room, TurnOutcome

G, C, C2, OTHER_G = "1", "11", "12", "2"
OWNER, FRIEND, STRANGER = "900", "901", "902"


def msg(mid: str = "m1", *, channel: str = C, guild: str | None = G, author: str = STRANGER, text: str = "hi", **kw: object) -> Inbound:
    return Inbound(message_id=mid, channel_id=channel, guild_id=guild, author_id=author, text=text, **kw)  # type: ignore[arg-type]  # kw holds Inbound's other fields by name


def ingress(**kw: object) -> Ingress:
    base: dict[str, object] = {"guild_ids": frozenset({G}), "owner_id": OWNER}
    base.update(kw)
    return Ingress(Policy(**base))  # type: ignore[arg-type]  # base holds Policy's fields by name


@pytest.mark.parametrize(
    ("policy", "message", "code"),
    [
        ({}, msg(author_is_bot=True), "self_or_bot_message"),
        ({}, msg(from_self=True), "self_or_bot_message"),
        ({"dm_policy": "deny"}, msg(guild=None, author=OWNER), "dm_denied"),
        ({"dm_policy": "owner_only"}, msg(guild=None, author=STRANGER), "dm_not_owner"),
        ({"dm_policy": "owner_only", "owner_id": None}, msg(guild=None, author=OWNER), "dm_not_owner"),
        ({"dm_policy": "allowlist", "dm_user_ids": frozenset({FRIEND})}, msg(guild=None, author=STRANGER), "dm_not_allowlisted"),
        ({}, msg(guild=OTHER_G, channel="21"), "guild_not_allowlisted"),
        ({"guild_ids": frozenset()}, msg(), "guild_not_allowlisted"),
        ({"channel_ids": frozenset({C2})}, msg(channel=C), "channel_not_allowlisted"),
        ({"channel_ids": frozenset({C2})}, msg(guild=OTHER_G, channel=C2), "guild_not_allowlisted"),
        ({"reply_policy": "addressed"}, msg(text="just chatting"), "not_addressed"),
        ({"reply_policy": "addressed"}, msg(text="clankiest thing ever"), "not_addressed"),
        ({}, msg(text="   \n"), "empty_message"),
        ({}, msg(text=" ", attachment_ids=("a1",), readable_attachments=0), "empty_message"),
        # order: a bot in an unlisted guild is dropped for being a bot first
        ({}, msg(guild=OTHER_G, author_is_bot=True), "self_or_bot_message"),
    ],
)
def test_drops_name_their_reason(policy: dict[str, object], message: Inbound, code: str) -> None:
    """Each refused message is dropped with the reason of the first check it fails."""
    assert ingress(**policy).admit(message, 0.0) == Drop(code)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"dm_policy": "owner_only"}, msg(guild=None, author=OWNER)),
        ({"dm_policy": "allowlist", "dm_user_ids": frozenset({FRIEND})}, msg(guild=None, author=FRIEND)),
        ({}, msg(channel=C2)),  # empty channel list admits every channel of a listed guild
        ({"channel_ids": frozenset({C2})}, msg(channel=C2)),
        ({"reply_policy": "addressed"}, msg(text="hey clankie what do you think")),
        ({"reply_policy": "addressed"}, msg(text="Clankie?")),
        ({"reply_policy": "addressed"}, msg(text="look", mentions_bot=True)),
        ({"reply_policy": "addressed"}, msg(text="sure", replies_to_bot=True)),  # a reply to one of his messages
        ({"reply_policy": "addressed"}, msg(guild=None, author=OWNER, text="no name needed in a DM")),
        ({}, msg(text="", attachment_ids=("a1",), readable_attachments=1)),
    ],
)
def test_admitted_messages_run_a_turn(policy: dict[str, object], message: Inbound) -> None:
    """Messages that pass every check become a turn."""
    decision = ingress(**policy).admit(message, 0.0)
    assert isinstance(decision, Run)
    assert decision.delivery_id == message.message_id


def test_owner_only_falls_back_to_the_application_owner() -> None:
    """With no owner id configured, the application's owner may DM once the bridge learns who that is."""
    ing = ingress(owner_id=None)
    assert ing.admit(msg("a", guild=None, author=OWNER), 0.0) == Drop("dm_not_owner")
    ing.owner(OWNER)
    assert isinstance(ing.admit(msg("b", guild=None, author=OWNER), 0.0), Run)
    ing.owner(FRIEND)  # a configured or learned owner is not replaced
    assert ing.policy.owner_id == OWNER


def test_same_delivery_twice_is_one_turn_and_changed_content_is_a_conflict() -> None:
    """A re-delivered message joins the first; the same id with other content is refused as a conflict."""
    ing = ingress()
    assert isinstance(ing.admit(msg("m1", text="one"), 0.0), Run)
    assert ing.admit(msg("m1", text="one"), 1.0) == Duplicate("m1")
    assert ing.admit(msg("m1", text="changed"), 2.0) == Drop("delivery_id_conflict")
    assert ing.admit(msg("m1", text="one", attachment_ids=("x",), readable_attachments=1), 2.0) == Drop(
        "delivery_id_conflict"
    )


def test_retention_expires_and_the_bound_never_refuses() -> None:
    """Deliveries are remembered for the retention window; at the dedupe bound nothing is refused: the oldest id
    admitted before the catch-up horizon goes, and the ids within it are still recognised."""
    ing = ingress(retention_s=100.0, horizon_s=10.0, max_retained=2)
    assert isinstance(ing.admit(msg("a"), 0.0), Run)
    assert isinstance(ing.admit(msg("b"), 1.0), Run)
    assert isinstance(ing.admit(msg("c"), 20.0), Run)  # over the bound: "a" (admitted before the horizon) goes
    assert ing.retained == 2 and not ing.seen("a") and ing.dedupe.evicted == 1
    assert ing.admit(msg("b"), 21.0) == Duplicate("b") and ing.admit(msg("c"), 21.0) == Duplicate("c")
    assert isinstance(ing.admit(msg("d"), 101.5), Run)  # "b" expired
    assert isinstance(ing.admit(msg("b"), 101.6), Run)  # forgotten, so not a duplicate ("c" goes at the bound)
    assert ing.retained == 2 and not ing.seen("c") and ing.dedupe.evicted == 2


def test_at_the_turn_cap_a_message_waits_and_is_remembered() -> None:
    """With ``max_turns`` turns held, a message that would run (or be steered into) one waits: it is admitted and
    retained, so Discord sending it again is a duplicate, not a second wait."""
    ing = ingress(max_turns=2)
    assert isinstance(ing.admit(msg("a"), 0.0, turns=1), Run)
    assert ing.admit(msg("b", text="clankie?"), 1.0, turns=2) == Waiting(unprompted=False)
    assert ing.admit(msg("c", channel=C2), 1.0, turns=2, live_run=True) == Waiting(unprompted=True)
    assert ing.seen("b") and ing.seen("c") and ing.retained == 3
    assert ing.admit(msg("b", text="clankie?"), 2.0, turns=0) == Duplicate("b")


def test_a_room_with_messages_waiting_keeps_its_order_below_the_cap() -> None:
    """Below the cap a message still waits while earlier messages of its room wait, so a room's turn keeps them in
    order; another room's message runs."""
    ing = ingress(max_turns=2)
    assert ing.admit(msg("a"), 0.0, turns=0, room_waiting=True) == Waiting(unprompted=True)
    assert isinstance(ing.admit(msg("b", channel=C2), 0.0, turns=0), Run)


def test_a_full_journal_refuses_what_would_wait_and_forgets_it() -> None:
    """The journal at its size bound is the one bound that refuses: ``journal_full``, not retained (a re-send may
    run); a message that can run now is not refused for it."""
    ing = ingress(max_turns=1)
    assert ing.admit(msg("a"), 0.0, turns=1, journal_full=True) == Drop("journal_full")
    assert not ing.seen("a")
    assert isinstance(ing.admit(msg("b"), 0.0, turns=0, journal_full=True), Run)
    assert ing.admit(msg("a"), 1.0, turns=1) == Waiting(unprompted=True)


def test_at_the_turn_cap_a_buffered_message_is_still_buffered() -> None:
    """Buffering holds no turn, so a drifted room's chatter is buffered at the cap as below it."""
    ing = addressed(window=1)
    assert isinstance(ing.admit(msg("a", text="clankie?"), 0.0), Run)
    ing.settle(C, TurnOutcome.SETTLED, 1.0)
    ing.admit(msg("b", text="chat"), 2.0)
    ing.settle(C, TurnOutcome.SILENT, 3.0)
    assert ing.admit(msg("c", text="more chat"), 4.0, turns=10**6) == Buffered(1)


def test_forget_lets_a_failed_delivery_be_tried_again() -> None:
    """A delivery evicted after an internal failure is a new delivery when Discord sends it again."""
    ing = ingress()
    ing.admit(msg("a"), 0.0)
    ing.forget("a", Room(guild_id=G, channel_id=C))
    assert isinstance(ing.admit(msg("a"), 1.0), Run)


def test_forget_tells_the_store_which_room_let_the_id_go() -> None:
    """The postgres profile keeps the admitted ids in the database by shard: a forgotten one leaves there too (the
    bridge queues it to its store writer), or the next gateway opening would recall it and refuse the re-delivery."""
    ing = ingress()
    gone: list[tuple[str, Room]] = []
    ing.on_forget = lambda message_id, room: gone.append((message_id, room))
    ing.admit(msg("a"), 0.0)
    ing.forget("a", Room(guild_id=G, channel_id=C))
    assert gone == [("a", Room(guild_id=G, channel_id=C))]


def addressed(window: int = 2) -> Ingress:
    return ingress(reply_policy="addressed", window=window)


def test_absorbed_keeps_him_in_the_room() -> None:
    """Scenario 2: after a settled turn and two absorbed ones, unaddressed chatter is still read live."""
    ing = addressed()
    assert isinstance(ing.admit(msg("1", text="clankie?"), 0), Run)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    for mid in ("2", "3"):
        assert isinstance(ing.admit(msg(mid, text="more"), 0), Run)
        ing.settle(C, TurnOutcome.ABSORBED, 0)
    assert ing.engagement(C) is Engagement.ENGAGED
    assert isinstance(ing.admit(msg("4", text="and another thing"), 0), Run)


def test_silence_ages_the_room_out() -> None:
    """Scenario 3: two declines after a reply and the next unaddressed message is buffered, not read."""
    ing = addressed()
    ing.admit(msg("1", text="clankie?"), 0)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    for mid in ("2", "3"):
        assert isinstance(ing.admit(msg(mid, text="chatter"), 0), Run)
        ing.settle(C, TurnOutcome.SILENT, 0)
    assert ing.engagement(C) is Engagement.DRIFTED
    assert ing.admit(msg("4", text="more chatter"), 0) == Buffered(1)
    # a direct address in a drifted room is still answered live
    assert isinstance(ing.admit(msg("5", text="clankie, you there?"), 0), Run)


def test_a_message_during_a_live_run_is_steered_whatever_the_count() -> None:
    """Issue 16: with the room at the edge of drifting, a burst's tail during a live run is a Run and does not count."""
    ing = addressed(window=3)
    ing.admit(msg("1", text="clankie?"), 0)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    for mid in ("2", "3"):
        ing.admit(msg(mid, text="chatter"), 0)
        ing.settle(C, TurnOutcome.SILENT, 0)
    assert isinstance(ing.admit(msg("4", text="the burst begins"), 0), Run)  # third heard: the room is now at the edge
    assert ing.engagement(C) is Engagement.DRIFTED
    tail = ing.admit(msg("5", text="and its tail"), 0, live_run=True)
    assert isinstance(tail, Run) and tail.unprompted
    assert ing.backlog(C) == 0
    ing.settle(C, TurnOutcome.SETTLED, 0)  # the owner answers; the steered one is absorbed
    ing.settle(C, TurnOutcome.ABSORBED, 0)
    assert ing.engagement(C) is Engagement.ENGAGED and ing.catch_up() == []


def test_engagement_follows_replies_per_room() -> None:
    """Scenario 4: untracked before any reply, engaged after one, other rooms unaffected, drifted after declines."""
    ing = addressed()
    assert ing.engagement(C) is Engagement.UNTRACKED
    ing.admit(msg("1", text="clankie hi"), 0)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    assert ing.engagement(C) is Engagement.ENGAGED
    assert ing.engagement(C2) is Engagement.UNTRACKED
    ing.admit(msg("2", text="x"), 0)
    ing.settle(C, TurnOutcome.FAILED, 0)
    ing.admit(msg("3", text="y"), 0)
    ing.settle(C, TurnOutcome.SILENT, 0)
    assert ing.engagement(C) is Engagement.DRIFTED


def test_catch_up_answers_a_backlog_in_one_turn() -> None:
    """Scenario 43: three buffered messages become one catch-up turn on the newest, the rest as context."""
    ing = addressed(window=1)
    ing.admit(msg("1", text="clankie hi"), 0)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    ing.admit(msg("2", text="x"), 0)
    ing.settle(C, TurnOutcome.SILENT, 0)
    for mid in ("3", "4", "5"):
        assert isinstance(ing.admit(msg(mid, text="chat"), 0), Buffered)
    # the newest (5) triggers it, the rest (3, 4) are its context; tests/bridge/test_waiting.py builds the turn
    assert ing.catch_up() == [CatchUp(C, ("3", "4", "5"))]
    assert ing.catch_up() == []  # backlog cleared even before the turn answers
    ing.settle(C, TurnOutcome.SETTLED, 0)
    assert ing.engagement(C) is Engagement.ENGAGED


def test_backlog_is_bounded() -> None:
    """A drifted room keeps only its newest twenty buffered messages."""
    ing = addressed(window=1)
    ing.admit(msg("0", text="clankie"), 0)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    ing.admit(msg("x", text="x"), 0)
    for i in range(30):
        ing.admit(msg(f"b{i}", text="chat"), 0)
    assert ing.backlog(C) == 20
    [taken] = ing.catch_up()
    assert taken.ids[-1] == "b29" and len(taken.ids) == 20  # b29 triggers it, with 19 of context


def test_buffered_messages_that_leave_a_backlog_without_a_catch_up_are_reported_once() -> None:
    """At the backlog's bound the oldest fall out, and an answer meanwhile clears the rest: both are named, once,
    by the call that moved them.

    A buffered message's one record is its journal entry; these ids are how
    the bridge knows to close it, so nothing stays open that no turn will carry.
    """
    ing = addressed(window=1)
    ing.admit(msg("0", text="clankie"), 0)
    ing.settle(C, TurnOutcome.SETTLED, 0)
    ing.admit(msg("x", text="x"), 0)
    ing.settle(C, TurnOutcome.SILENT, 0)
    fell_out = [ing.admit(msg(f"b{i}", text="chat"), 0) for i in range(22)]
    assert [d.fell_out for d in fell_out if isinstance(d, Buffered) and d.fell_out] == [("b0",), ("b1",)]
    assert ing.buffered == 20
    ing.admit(msg("y", text="clankie, still there?"), 0)
    # answered live: the twenty buffered ones will get no catch-up turn
    assert ing.settle(C, TurnOutcome.SETTLED, 0) == tuple(f"b{i}" for i in range(2, 22))
    assert ing.settle(C, TurnOutcome.SETTLED, 0) == ()
    assert ing.backlog(C) == 0 and ing.buffered == 0 and ing.catch_up() == []
