"""Warm and cold lanes, restarts, privileged one-shots and system lanes (§9 #9–13)."""

from __future__ import annotations

import json
from pathlib import Path

from clankie.protocol import SayRequest
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.captain.lanes import keys
from tests.service.captain.harness import FakeBridge, msg, run, service, user_texts

ROOM_KEY = "discord:clankie:discord:1:2"


def _tree_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl")) if directory.is_dir() else []


def test_cold_lane_reads_history_once_and_warm_lane_carries_only_the_trigger(env: dict[str, str]) -> None:
    """The first turn gets the backlog as an untrusted block; the next turn in the live lane does not (§9 #9)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("it was close"), fa.text("the 2-0 reverse sweep"))
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "what about the final?"))
            second = await bridge.submit(msg("m2", "and the biggest upset?"))
            assert second.outcome == "settled"
            assert len(bridge.history_calls) == 1
            call = bridge.history_calls[0]
            assert (call.before_message_id, call.limit, call.delivery_id) == ("m1", 10, "m1")
            cold = "\n".join(user_texts(fake.requests[0]))
            assert "Channel conversation (untrusted):" in cold and "what did you think of the bracket" in cold
            warm_turn = fake.requests[1]["messages"][-1]["content"][-1]["text"]
            assert "and the biggest upset?" in warm_turn
            assert "Channel conversation (untrusted):" not in warm_turn
            # the warm lane still remembers the earlier turn as its own conversation
            assert "it was close" in json.dumps(fake.requests[1]["messages"])
            (info,) = app.captain.lane_infos()
            assert (info.key, info.warm, info.state, info.turns) == (ROOM_KEY, True, "idle", 2)

    run(body())


def test_lane_keys_and_tree_locations(env: dict[str, str], state_dir: Path) -> None:
    """Guild rooms and DMs get their own durable trees under rooms/ keyed by the contract key (§9 #10)."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "guild hello"))
            await bridge.submit(msg("d1", "dm hello", guild=None, channel="9"))
            assert set(app.captain.lanes) == {ROOM_KEY, "discord:clankie:discord:dm:9"}
        rooms = state_dir / "captain" / "rooms"
        assert sorted(p.name for p in rooms.iterdir()) == [
            "discord%3Aclankie%3Adiscord%3A1%3A2",
            "discord%3Aclankie%3Adiscord%3Adm%3A9",
        ]

    run(body())


def test_restarted_service_resumes_the_tree_and_reads_cold_once(env: dict[str, str], state_dir: Path) -> None:
    """After a restart the room's tree is continued, the first turn gets the backlog, the second does not (§9 #11)."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("before restart"), fa.text("after restart 1"), fa.text("after restart 2"))
            async with service(env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                await bridge.submit(msg("m1", "remember the lobby"))
            tree_dir = keys.CaptainPaths.under(state_dir).room(ROOM_KEY)
            assert len(_tree_files(tree_dir)) == 1
            async with service(env, fake) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                await bridge.submit(msg("m2", "back again"))
                await bridge.submit(msg("m3", "and again"))
                assert len(bridge.history_calls) == 1
            assert len(_tree_files(tree_dir)) == 1  # continued, not a fresh tree
            resumed = json.dumps(fake.requests[1]["messages"])
            assert "remember the lobby" in resumed and "before restart" in resumed
            # the post-restart turn itself carries the backlog (the cold read), not just the stored tree
            assert "Channel conversation (untrusted):" in _last_user_text(fake.requests[1])
            assert "Channel conversation (untrusted):" not in fake.requests[2]["messages"][-1]["content"][-1]["text"]

    run(body())


def test_system_actor_turn_is_a_privileged_one_shot(env: dict[str, str], state_dir: Path) -> None:
    """A system actor's turn runs one-shot under turns/ with the shell; the room lane continues untouched (§9 #12, #13)."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(
                fa.tool_use(("bash", {"command": "echo granted"})),
                fa.text("done: granted"),
                fa.text("second one-shot"),
                fa.text("ordinary reply"),
            )
            async with service(env, fake, discord_system_actor_ids=("77",)) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                first = await bridge.submit(msg("s1", "run echo", author="77"))
                second = await bridge.submit(msg("s2", "again", author="77"))
                plain = await bridge.submit(msg("m1", "hi", author="42"))
                assert (first.outcome, first.text) == ("settled", "done: granted")
                assert second.outcome == "settled" and plain.text == "ordinary reply"
                assert app.captain.lanes.keys() == {ROOM_KEY}  # one-shots leave nothing live behind
            tools = [t["name"] for t in fake.requests[0]["tools"]]
            assert "bash" in tools
            assert "bash" not in [t["name"] for t in fake.requests[3]["tools"]]
            turns_dir = state_dir / "captain" / "turns" / "discord_presence~1%3A2"
            trees = _tree_files(turns_dir)
            assert len(trees) == 2
            assert '"name":"bash"' in trees[0].read_text()
            assert "run echo" not in trees[1].read_text()  # the second one-shot starts empty
            assert "run echo" not in json.dumps(fake.requests[3]["messages"])  # nothing carried forward
            # a privileged one-shot outside a trusted room reads no room history (only the ordinary turn asked)
            assert [call.delivery_id for call in bridge.history_calls] == ["m1"]
            assert "Channel conversation" not in "\n".join(user_texts(fake.requests[0]))

    run(body())


def test_trusted_room_gives_each_system_actor_a_durable_system_lane(env: dict[str, str], state_dir: Path) -> None:
    """In a trusted room a system actor's turns continue one durable system lane of his own, under system/."""

    async def body() -> None:
        async with FakeAnthropic() as fake:
            fake.script(fa.text("a1"), fa.text("a2"), fa.text("b1"))
            async with service(env, fake, discord_system_actor_ids=("77", "78"), discord_trusted_rooms=("1/2",)) as app:
                bridge = FakeBridge()
                await bridge.connect(app)
                await bridge.submit(msg("s1", "first", author="77"))
                await bridge.submit(msg("s2", "second", author="77"))
                await bridge.submit(msg("s3", "other actor", author="78"))
                assert set(app.captain.lanes) == {
                    "discord-system:clankie:discord:1:2:77",
                    "discord-system:clankie:discord:1:2:78",
                }
            assert "first" in json.dumps(fake.requests[1]["messages"])
            assert "first" not in json.dumps(fake.requests[2]["messages"])  # a grant never serves another person
            assert len(list((state_dir / "captain" / "system").iterdir())) == 2
            assert not (state_dir / "captain" / "rooms").exists()

    run(body())


def test_one_shot_mode_runs_every_message_alone(env: dict[str, str]) -> None:
    """With captain_durable off (the bench's baseline) every message is its own cold one-shot run."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, captain_durable=False) as app:
            fake.script(fa.text("one"), fa.text("two"))
            bridge = FakeBridge()
            await bridge.connect(app)
            assert (await bridge.submit(msg("m1", "a"))).text == "one"
            assert (await bridge.submit(msg("m2", "b"))).text == "two"
            assert len(bridge.history_calls) == 2
            assert '"text": "one"' not in json.dumps(fake.requests[1]["messages"])  # the first answer is not carried

    run(body())


def test_no_api_key_fails_at_once_without_touching_the_network(env: dict[str, str]) -> None:
    """Without an Anthropic key every turn fails captain_provider_unconfigured and no request is made."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake, key=False) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            result = await bridge.submit(msg("m1", "hello?"))
            assert (result.outcome, result.code) == ("failed", "captain_provider_unconfigured")
            assert fake.requests == [] and bridge.history_calls == []
            assert app.turns.evidence.of("m1") == ["accepted", "failed"]
            assert "provider unconfigured" in app.heartbeat().detail

    run(body())


def test_catch_up_backlog_rides_along_on_a_warm_lane(env: dict[str, str]) -> None:
    """A catch-up turn's buffered messages reach even a warm lane, as an untrusted block, without a history call."""

    async def body() -> None:
        from clankie.protocol import HistoryMessage

        async with FakeAnthropic() as fake, service(env, fake) as app:
            bridge = FakeBridge()
            await bridge.connect(app)
            await bridge.submit(msg("m1", "hi"))
            buffered = (HistoryMessage(id="b1", author_id="9", text="the buffered remark", at=1_800_000_001.0),)
            catch_up = msg("m2", "newest", unprompted=True).model_copy(update={"backlog": buffered})
            assert (await bridge.submit(catch_up)).outcome == "settled"
            last = fake.requests[1]["messages"][-1]["content"][-1]["text"]
            assert "Channel conversation (untrusted):" in last and "the buffered remark" in last
            assert "(you were not addressed)" in last
            assert len(bridge.history_calls) == 1

    run(body())


def _last_user_text(body: dict) -> str:
    return body["messages"][-1]["content"][-1]["text"]


def test_lane_stays_cold_until_history_is_actually_read(env: dict[str, str]) -> None:
    """A first turn with no bridge (say) or a failed history call leaves the lane cold; the next Discord turn gets the backlog."""

    async def body() -> None:
        async with FakeAnthropic() as fake, service(env, fake) as app:
            fake.script(fa.text("heard the operator"), fa.text("no backlog yet"), fa.text("now with backlog"), fa.text("warm"))
            bridge = FakeBridge()
            bridge.history_failures = 1
            await bridge.connect(app)
            await app.turns.say(SayRequest(room="1/2", text="operator first"))
            assert [i.warm for i in app.captain.lane_infos()] == [False]
            assert (await bridge.submit(msg("m1", "first from discord"))).text == "no backlog yet"
            assert [i.warm for i in app.captain.lane_infos()] == [False]  # the history call failed
            assert (await bridge.submit(msg("m2", "second from discord"))).text == "now with backlog"
            assert [i.warm for i in app.captain.lane_infos()] == [True]
            await bridge.submit(msg("m3", "third"))
            assert [c.before_message_id for c in bridge.history_calls] == ["m1", "m2"]
            backlog = "Channel conversation (untrusted):"
            assert backlog not in _last_user_text(fake.requests[1])
            assert backlog in _last_user_text(fake.requests[2]) and "what did you think of the bracket" in _last_user_text(fake.requests[2])
            assert backlog not in _last_user_text(fake.requests[3])

    run(body())
