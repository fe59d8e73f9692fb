"""Typed routing: handlers registered per wire method, checked against the method table."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import assert_never

import pytest

from clankie import ipc, protocol
from clankie.errors import RemoteError, RemoteProtocolError
from clankie.protocol import (
    Code,
    HistoryReply,
    HistoryRequest,
    Room,
    TextUpdate,
    TextUpdateReply,
    ToolActivity,
    TurnAbsorbed,
    TurnFailed,
    TurnKind,
    TurnResult,
    TurnSettled,
    TurnSilent,
    TurnSubmit,
    TypingSignal,
)
from clankie.router import Route, Router, RouterError

ROOM = Room(guild_id="1", channel_id="2")


async def history(conn: ipc.Connection, req: HistoryRequest) -> HistoryReply:
    return HistoryReply(messages=())


async def text_update(req: TextUpdate) -> TextUpdateReply:
    return TextUpdateReply(message_id=f"echo-{req.text}")


def typing(signal: TypingSignal) -> None:
    pass


def tool(activity: ToolActivity) -> None:
    pass


BRIDGE: dict[str, Route] = {"history": history, "text_update": text_update, "typing": typing, "tool": tool}


def test_a_method_outside_the_table_is_refused_at_construction() -> None:
    with pytest.raises(RouterError, match="no method screenshot"):
        Router("bridge", {**BRIDGE, "screenshot": history})
    with pytest.raises(RouterError, match="no role"):
        Router("nobody", {})


def test_a_method_of_the_role_without_a_handler_is_refused_unless_declared_unserved() -> None:
    routes: dict[str, Route] = {k: v for k, v in BRIDGE.items() if k != "tool"}
    with pytest.raises(RouterError, match="no handler for tool"):
        Router("bridge", routes)
    assert Router("bridge", routes, unserved={"tool"}).methods == frozenset(routes)
    with pytest.raises(RouterError, match="no method nope"):
        Router("bridge", routes, unserved={"tool", "nope"})


def test_a_handler_typed_for_another_record_is_refused() -> None:
    async def wrong(req: TextUpdate) -> HistoryReply:
        return HistoryReply()

    with pytest.raises(RouterError, match="history: handler takes"):
        Router("bridge", {**BRIDGE, "history": wrong})


def test_handlers_get_the_typed_record_and_requests_come_back_typed(tmp_path: Path) -> None:
    """Over a real socket: the reply is the table's record type; a wrong expect never leaves."""
    seen: list[object] = []

    async def submit(conn: ipc.Connection, req: TurnSubmit) -> TurnResult:
        seen.append(req)
        reply = await conn.request("text_update", TextUpdate(delivery_id=req.delivery_id, text="hi"),
                                   expect=TextUpdateReply)
        return TurnResult.settled(reply.message_id or "")

    async def main() -> None:
        path = tmp_path / "s.sock"
        async with ipc.Server(path, "service", Router("service", {"turn.submit": submit})):
            conn = await ipc.connect(path, "bridge", Router("bridge", BRIDGE))
            sub = TurnSubmit.model_validate({"delivery_id": "d1", "room": ROOM.to_wire(),
                                             "trigger": {"message_id": "9", "author": {"id": "5"}, "text": "x"}})
            result = await conn.request("turn.submit", sub, expect=TurnResult)
            assert result.outcome == "settled" and result.text == "echo-hi"
            assert seen == [sub] and isinstance(seen[0], TurnSubmit)
            with pytest.raises(TypeError, match="replies TurnResult, not HistoryReply"):
                await conn.request("turn.submit", sub, expect=HistoryReply)
            await conn.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_malformed_request_gets_invalid_request_and_the_connection_keeps_serving(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "s.sock"
        async with ipc.Server(path, "bridge", Router("bridge", BRIDGE)):
            conn = await ipc.connect(path, "service")
            raw = await conn._call("history", {"delivery_id": 7, "room": "not a room"}, 5)
            assert raw is None  # pragma: no cover - the call above raises
    with pytest.raises(RemoteError) as info:
        asyncio.run(asyncio.wait_for(main(), 30))
    assert info.value.code == "invalid_request"  # the wire bytes Code.INVALID_REQUEST stands for

    async def then_serves() -> None:
        path = tmp_path / "t.sock"
        async with ipc.Server(path, "bridge", Router("bridge", BRIDGE)):
            conn = await ipc.connect(path, "service")
            with pytest.raises(RemoteError) as bad:
                await conn._call("history", {"room": 3}, 5)
            assert bad.value.code == Code.INVALID_REQUEST
            ok = await conn.request("history", HistoryRequest(delivery_id="d", room=ROOM), expect=HistoryReply)
            assert ok.messages == ()
            await conn.aclose()

    asyncio.run(asyncio.wait_for(then_serves(), 30))


def test_dispatch_without_a_connection_serves_record_only_routes_and_refuses_the_others() -> None:
    """Router.dispatch (the hosts' path) runs a route that takes only its record; one that needs the connection is a RouterError."""

    async def main() -> None:
        router = Router("bridge", BRIDGE)
        reply = await router.dispatch("text_update", TextUpdate(delivery_id="d", text="hi"))
        assert reply == TextUpdateReply(message_id="echo-hi")
        with pytest.raises(RouterError, match="takes the connection"):
            await router.dispatch("history", HistoryRequest(delivery_id="d", room=ROOM))
        with pytest.raises(RemoteError) as info:
            await router.dispatch("screenshot", TextUpdate(delivery_id="d", text="hi"))
        assert info.value.code == Code.METHOD_NOT_FOUND

    asyncio.run(main())


def test_every_role_in_the_table_can_be_fully_routed() -> None:
    """The router's checks agree with the table for every role (an unannotated stub per method)."""
    for role, methods in protocol.METHODS.items():
        assert Router(role, dict.fromkeys(methods, lambda record: None)).methods == frozenset(methods)


def describe(result: TurnResult) -> str:
    """A consumer that branches on every kind; mypy's assert_never proves the match exhaustive."""
    match result.kind:
        case TurnSettled(text=text, media=media):
            return f"settled {text} {len(media)}"
        case TurnSilent():
            return "silent"
        case TurnAbsorbed():
            return "absorbed"
        case TurnFailed(code=code):
            return f"failed {code}"
        case unreachable:
            assert_never(unreachable)


def test_turn_result_is_a_tagged_union_of_four_kinds() -> None:
    kinds: list[TurnKind] = [TurnSettled(text="hi", media=("a.png",)), TurnSilent(), TurnAbsorbed(),
                             TurnFailed(code=Code.CAPTAIN_MODEL_FAILED)]
    results = [TurnResult.settled("hi", ("a.png",), turn_id="t1"), TurnResult.silent(turn_id="t1"),
               TurnResult.absorbed(turn_id="t1"), TurnResult.failed(Code.CAPTAIN_MODEL_FAILED, turn_id="t1")]
    assert [describe(r) for r in results] == ["settled hi 1", "silent", "absorbed", "failed captain_model_failed"]
    assert [r.kind for r in results] == kinds
    # flat on the wire, as before: the failed code is the plain string
    assert results[3].to_wire() == {"outcome": "failed", "turn_id": "t1", "text": "", "media": (),
                                    "code": "captain_model_failed"}
    assert TurnResult.model_validate(results[0].to_wire()) == results[0]


@pytest.mark.parametrize("fields", [
    {"outcome": "failed"},  # a failure without its code
    {"outcome": "silent", "code": "internal_error"},  # a silent turn says nothing, no code either
    {"outcome": "silent", "text": "leaked"},
    {"outcome": "absorbed", "media": ["a.png"]},
    {"outcome": "exploded"},
])
def test_a_turn_result_whose_fields_do_not_fit_its_kind_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(RemoteProtocolError, match="invalid TurnResult"):
        protocol.validate(TurnResult, fields)


def test_an_answer_cut_short_carries_the_code_that_says_why() -> None:
    """A settled reply (and a message absorbed into it) may name why it was cut short: the run cap's code."""
    capped = Code.CAPTAIN_RUN_BUDGET_EXCEEDED
    for result in (TurnResult.settled("so far", turn_id="t1", code=capped), TurnResult.absorbed(turn_id="t2", code=capped)):
        assert protocol.validate(TurnResult, result.to_wire()) == result and result.code == capped
