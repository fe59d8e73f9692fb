"""Typing only when words are coming, send_text_update, and host tools that say when a host is down (§9 #25–27, 29–31)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from clankie import artifacts, ipc
from clankie.errors import ChannelClosed, RemoteError
from clankie.paths import socket_path
from clankie.protocol import Artifact, Record, ScreenshotRequest
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain.tools.model_tools import TEXT_UPDATE_DESCRIPTION
from tests.polling import until
from tests.service.captain.harness import FakeBridge, msg, run, service


def _tool_results(body: dict) -> list[dict]:
    return [b for m in body["messages"] for b in (m["content"] if isinstance(m["content"], list) else []) if b.get("type") == "tool_result"]


def _result_text(block: dict) -> str:
    content = block["content"]
    return content if isinstance(content, str) else " ".join(c.get("text", "") for c in content if c.get("type") == "text")


def test_silent_run_never_lights_typing(env: dict[str, str]) -> None:
    """A reply streamed as "[[stay" + "-silent]]" sends no typing signal and the turn is silent (§9 #29)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("[[stay-silent]]", chunk_size=6))
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("m1", "lol"))).outcome == "silent"
            await bridge.submit(msg("m2", "ping"))  # a later round trip: any stray typing would have arrived
            assert bridge.typing == ["m2"]

    run(body())


def test_typing_lights_once_on_the_first_disqualifying_text(env: dict[str, str]) -> None:
    """Typing is signalled exactly once, for the owner's delivery, when the text can no longer be silence (§9 #30)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            gate = asyncio.Event()
            fake.script(fa.text("  [[stop it, that was a great round", chunk_size=6, stall_after=3, stall_until=gate))
            bridge = FakeBridge()
            await bridge.connect(app)
            turn = bridge.start(msg("m1", "thoughts?"))
            await fake.wait_for_requests(1)
            lane = app.captain.lanes["discord:clankie:discord:1:2"]
            await until(lambda: lane.text_so_far == "  [[st")  # the first chunk reached the captain
            assert not lane.typing_sent and bridge.typing == []  # "  [[st" could still become the sentinel
            gate.set()
            await bridge.typed.wait()
            result = await turn
            assert result.outcome == "settled"
            assert bridge.typing == ["m1"]

    run(body())


def test_tool_only_turn_never_lights_typing(env: dict[str, str]) -> None:
    """A turn spent in tools and send_text_update that ends silent never shows typing (§9 #31)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, discord_guild_ids=("1",)) as app:
            fake.script(fa.tool_use(("send_text_update", {"text": "one sec, checking"})), fa.text("[[stay-silent]]"))
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("m1", "check it"))).outcome == "silent"
            assert [u.text for u in bridge.updates] == ["one sec, checking"]
            assert bridge.typing == []

    run(body())


def test_send_text_update_posts_mid_turn_and_the_turn_goes_on(env: dict[str, str]) -> None:
    """The update goes to the bridge for the delivery being answered, and the turn still settles with its reply (§9 #25)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, discord_guild_ids=("1",)) as app:
            fake.script(
                fa.tool_use(("send_text_update", {"text": "hang on, pulling the bracket up"})),
                fa.text("bracket: A beat B"),
            )
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "who won?"))
            assert (result.outcome, result.text) == ("settled", "bracket: A beat B")
            (update,) = bridge.updates
            assert (update.delivery_id, update.text) == ("m1", "hang on, pulling the bracket up")
            (tool_result,) = _tool_results(fake.requests[1])
            assert "Keep working" in _result_text(tool_result) and not tool_result["is_error"]

    run(body())


@pytest.mark.parametrize(
    ("room", "guilds", "refuse", "args", "expected"),
    [
        ({"guild": None, "channel": "9"}, ("1",), None, {"text": "hi"}, "not available in DMs"),
        ({"guild": "5", "channel": "2"}, ("1",), None, {"text": "hi"}, "outside my admitted Discord channels"),
        ({}, ("1",), "discord_write_failed", {"text": "hi"}, "refused that action: discord_write_failed"),
        ({}, ("1",), None, {"text": "x" * 601}, "1 to 600 characters"),
        ({}, ("1",), "bridge_gone", {"text": "hi"}, "can't reach my live Discord body"),
    ],
)
def test_send_text_update_bounds(
    env: dict[str, str], room: dict, guilds: tuple[str, ...], refuse: str | None, args: dict, expected: str
) -> None:
    """DMs, unadmitted rooms, a refusing or vanished body and over-long text all come back to the model as clear errors (§9 #26)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, discord_guild_ids=guilds) as app:
            gone = refuse == "bridge_gone"
            gate = asyncio.Event()
            stall: dict = {"stall_after": 0, "stall_until": gate} if gone else {}
            fake.script(fa.tool_use(("send_text_update", args), **stall), fa.text("ok"))
            bridge = FakeBridge()
            bridge.refuse_updates = None if gone else refuse
            await bridge.connect(app)
            turn = bridge.start(msg("m1", "go", **room))
            if gone:  # the bridge connection closes before the model asks for the update
                await fake.wait_for_requests(1)
                assert bridge.conn is not None
                await bridge.conn.aclose()
                with pytest.raises(ChannelClosed):
                    await turn
                gate.set()
                await until(lambda: (r := app.store.load("m1")) is not None and r.result is not None)
                retained = app.store.load("m1")
                assert retained is not None and retained.result is not None
                result = retained.result  # the turn went on and settled without its bridge
            else:
                result = await turn
            assert result.outcome == "settled"
            assert bridge.updates == []
            (tool_result,) = _tool_results(fake.requests[1])
            assert tool_result["is_error"] and expected in _result_text(tool_result)

    run(body())


def test_send_text_update_schema_and_description(env: dict[str, str]) -> None:
    """The model sees only a 1–600 character text field and a description about people actually waiting (§9 #27)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "hi"))
            (tool,) = [t for t in fake.requests[0]["tools"] if t["name"] == "send_text_update"]
            assert tool["input_schema"]["properties"] == {
                "text": {"type": "string", "minLength": 1, "maxLength": 600, "description": "What to say now, in your own voice. One or two sentences."}
            }
            assert tool["input_schema"]["additionalProperties"] is False
            assert "someone is actually waiting" in TEXT_UPDATE_DESCRIPTION and "unsolicited link" in TEXT_UPDATE_DESCRIPTION
            assert tool["description"] == TEXT_UPDATE_DESCRIPTION

    run(body())


@pytest.mark.parametrize(("hosts", "offered"), [
    ("browser,tldraw", {"browser_screenshot", "draw_er_diagram", "draw_sequence_diagram"}),
    ("tldraw", {"draw_er_diagram", "draw_sequence_diagram"}),
    ("none", set()),
])
def test_the_model_is_offered_the_tools_of_the_hosts_the_tree_runs_and_no_other(
    env: dict[str, str], hosts: str, offered: set[str]
) -> None:
    """``CLANKIE_HOSTS`` says which hosts the tree runs; a host left out is not dialled, and its tools are not offered
    (the model cannot call what is not there). ``send_text_update`` is the service's own and always offered."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service({**env, "CLANKIE_HOSTS": hosts}, fake) as app:
            assert (app.browser is None, app.tldraw is None) == ("browser" not in hosts, "tldraw" not in hosts)
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "clankie, hi"))
            assert {tool["name"] for tool in fake.requests[0]["tools"]} == {"send_text_update", *offered}

    run(body())


def test_screenshot_rides_with_the_reply_and_a_down_host_is_said_out_loud(env: dict[str, str], runtime_dir: Path) -> None:
    """A screenshot's governed ref becomes the reply's media; with the browser host down the model is told browser_unavailable."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(
                fa.tool_use(("browser_screenshot", {"url": "https://example.org"})),
                fa.text("the browser is down, sorry"),
            )
            bridge = FakeBridge()
            await bridge.connect(app)
            down = await bridge.submit(msg("m1", "show me"))
            assert (down.outcome, down.media) == ("settled", ())
            (tool_result,) = _tool_results(fake.requests[1])
            assert tool_result["is_error"] and "browser_unavailable" in _result_text(tool_result)
            # the body hears of the call content-free: the tool, the host name alone, then its end
            await until(lambda: len(bridge.tools) == 2)
            start, end = bridge.tools
            assert (start.delivery_id, start.tool, start.host, start.active) == ("m1", "browser_screenshot", "example.org", True)
            assert (end.call_id, end.host, end.active) == (start.call_id, None, False)

            root = app.settings.attachment_root
            png = bytes.fromhex("89504e470d0a1a0a") + b"fake-png"
            seen: list[str] = []

            async def browser(conn: ipc.Connection, method: str, params: Record) -> Record:
                assert isinstance(params, ScreenshotRequest)
                seen.append(params.url)
                if params.url.startswith("https://refuse"):
                    raise RemoteError("navigation_blocked", "private address")
                ref = artifacts.write_artifact(root, "browser", png, "png")
                return Artifact(ref=ref, sha256=ref.split(":")[1], size=len(png), mime="image/png")

            host = await ipc.serve(socket_path(runtime_dir, "browser"), "browser", browser)
            try:
                assert app.browser is not None
                app.browser._next_try = 0.0  # do not wait out the backoff from the failed dial above
                fake.script(
                    fa.tool_use(("browser_screenshot", {"url": "https://refuse.example"})),
                    fa.tool_use(("browser_screenshot", {"url": "https://example.org"})),
                    fa.text("here it is"),
                )
                shot = await bridge.submit(msg("m2", "again"))
                assert shot.outcome == "settled" and shot.text == "here it is"
                assert len(shot.media) == 1 and shot.media[0].startswith("sha256:") and ":browser/" in shot.media[0]
                refused = _tool_results(fake.requests[3])[-1]
                assert "navigation_blocked" in _result_text(refused)
                assert seen == ["https://refuse.example", "https://example.org"]
                assert "image" in json.dumps(_tool_results(fake.requests[4])[-1]["content"])  # he sees the picture
            finally:
                await host.close()

    run(body())


def test_diagram_host_down_is_reported_to_the_model(env: dict[str, str]) -> None:
    """With the tldraw host down, a diagram call returns tldraw_unavailable and the turn still answers."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            spec = {"participants": [{"name": "a"}, {"name": "b"}], "messages": [{"from": "a", "to": "b", "text": "hi"}]}
            fake.script(fa.tool_use(("draw_sequence_diagram", spec)), fa.text("no canvas today"))
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "draw it"))
            assert (result.outcome, result.text) == ("settled", "no canvas today")
            (tool_result,) = _tool_results(fake.requests[1])
            assert "tldraw_unavailable" in _result_text(tool_result)

    run(body())
