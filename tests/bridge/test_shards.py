"""Sharding, the pure parts: shard arithmetic, the shard settings, and the bridge's per-shard gateway watch."""

from __future__ import annotations

import asyncio
import sys

import pytest

from bridge.shards import ShardWatch, receives_dms
from clankie.errors import ConfigError
from clankie.settings import load
from clankie.shards import check, describe, others, parse_ids, preferred, shard_of


def test_a_guild_belongs_to_the_shard_its_snowflake_timestamp_picks() -> None:
    """Discord's formula: ``(guild_id >> 22) % count``; one shard carries everything."""
    assert shard_of(1000 << 22, 2) == 0
    assert shard_of(str(1001 << 22), 2) == 1
    assert shard_of((7 << 22) | 0x3FFFFF, 4) == 3  # the low 22 bits (worker, process, increment) do not count
    assert shard_of(81384788765712384, 1) == 0
    with pytest.raises(ValueError):
        shard_of(1, 0)


@pytest.mark.parametrize(
    ("text", "ids"),
    [("0", (0,)), ("0,1", (0, 1)), ("0-3", (0, 1, 2, 3)), (" 3 , 0-1 ,1", (0, 1, 3)), ("5-5", (5,))],
)
def test_shard_ids_are_lists_and_ranges(text: str, ids: tuple[int, ...]) -> None:
    assert parse_ids(text) == ids


@pytest.mark.parametrize("text", ["a", "-1", "1-", "3-1", "0;1", ",", "0-99999999", "1.5"])
def test_malformed_shard_ids_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ids(text)


def test_ids_must_fit_the_count_and_need_one() -> None:
    check((), None)
    check((), 4)
    check((0, 3), 4)
    with pytest.raises(ValueError, match="0 to CLANKIE_DISCORD_SHARD_COUNT - 1 \\(3\\)"):
        check((0, 4), 4)
    with pytest.raises(ValueError, match="needs CLANKIE_DISCORD_SHARD_COUNT"):
        check((0,), None)


def test_status_names_the_shards() -> None:
    assert describe((), None) == ""
    assert describe((), 2) == "all/2"
    assert describe((0, 1), 4) == "0,1/4"


def test_direct_messages_reach_only_a_tree_with_shard_0() -> None:
    assert receives_dms(()) and receives_dms((0, 2)) and not receives_dms((1,))


# ---------------------------------------------------------------- settings


def test_unset_shard_settings_mean_one_unsharded_session(env: dict[str, str]) -> None:
    s = load(env)
    assert s.discord_shard_count is None and s.discord_shard_ids == ()


def test_shard_settings_load(env: dict[str, str]) -> None:
    s = load({**env, "CLANKIE_DISCORD_SHARD_COUNT": "4", "CLANKIE_DISCORD_SHARD_IDS": "0-1,3"})
    assert s.discord_shard_count == 4 and s.discord_shard_ids == (0, 1, 3)
    assert load({**env, "CLANKIE_DISCORD_SHARD_COUNT": "2", "CLANKIE_DISCORD_SHARD_IDS": "  "}).discord_shard_ids == ()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"CLANKIE_DISCORD_SHARD_COUNT": "0"}, "CLANKIE_DISCORD_SHARD_COUNT"),
        ({"CLANKIE_DISCORD_SHARD_COUNT": "two"}, "CLANKIE_DISCORD_SHARD_COUNT"),
        ({"CLANKIE_DISCORD_SHARD_COUNT": "70000"}, "CLANKIE_DISCORD_SHARD_COUNT"),
        ({"CLANKIE_DISCORD_SHARD_IDS": "0"}, "needs CLANKIE_DISCORD_SHARD_COUNT"),
        ({"CLANKIE_DISCORD_SHARD_COUNT": "2", "CLANKIE_DISCORD_SHARD_IDS": "0-2"}, "has 2"),
        ({"CLANKIE_DISCORD_SHARD_COUNT": "2", "CLANKIE_DISCORD_SHARD_IDS": "x"}, "CLANKIE_DISCORD_SHARD_IDS: 'x'"),
    ],
)
def test_bad_shard_settings_are_one_line_errors(env: dict[str, str], extra: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load({**env, **extra})
    message = str(caught.value)
    assert words in message and "\n" not in message


def test_a_bridge_with_bad_shard_settings_exits_78(env: dict[str, str]) -> None:
    """The process says what is wrong on one line and exits 78 (a configuration error) before anything starts."""

    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bridge", env={**env, "CLANKIE_DISCORD_SHARD_IDS": "1"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(30):
            _out, err = await proc.communicate()
        assert proc.returncode == 78
        last = err.decode().strip().splitlines()[-1]
        assert last.startswith("bridge: ") and "CLANKIE_DISCORD_SHARD_IDS needs CLANKIE_DISCORD_SHARD_COUNT" in last

    asyncio.run(main())


# ---------------------------------------------------------------- the watch


def test_the_group_is_connected_only_when_every_shard_is() -> None:
    watch = ShardWatch((0, 1))
    assert not watch.connected
    assert watch.ready(0) is None  # shard 1 has no session yet
    assert watch.ready(1) == "session"  # first sessions: read back what came before the start
    assert watch.connected


def test_all_shards_resuming_means_nothing_to_fetch() -> None:
    watch = ShardWatch((0, 1))
    watch.ready(0), watch.ready(1)
    watch.dropped(0)
    watch.dropped(1)
    assert not watch.connected
    assert watch.resumed(1) is None
    assert watch.resumed(0) == "resumed"


def test_one_new_session_in_a_gap_owes_one_recovery_once_all_are_back() -> None:
    """A shard that had to IDENTIFY anew lost its gap; the read-back waits for the shard still down."""
    watch = ShardWatch((0, 1, 2))
    for i in (0, 1, 2):
        watch.ready(i)
    watch.dropped(0)
    watch.dropped(2)
    assert watch.ready(0) is None  # shard 2 is still down: a recovery now would close the gap too early
    assert watch.resumed(2) == "session"
    assert watch.renewed == {0}  # only shard 0's rooms are read back: shard 2's gap was replayed
    watch.dropped(1)
    assert watch.resumed(1) == "resumed"  # that recovery was owed once, not again


def test_a_fresh_process_whose_shards_all_resume_reads_nothing_back_and_one_identify_reads_back_once() -> None:
    """A new bridge RESUMEs each shard's stored session: Discord replays the gap, nothing to fetch; when one shard's
    RESUME was refused and it IDENTIFYs, the gap is read back once, when the last shard is up."""
    watch = ShardWatch((0, 1))
    assert watch.resumed(0) is None
    assert watch.resumed(1) == "resumed"
    mixed = ShardWatch((0, 1))
    assert mixed.ready(1) is None  # shard 1's RESUME was refused: a new session
    assert mixed.resumed(0) == "session"
    assert mixed.renewed == {1}
    cold = ShardWatch((0, 1))  # a first start: every shard IDENTIFYs, every room is read back
    assert cold.ready(0) is None and cold.ready(1) == "session" and cold.renewed == {0, 1}


def test_a_single_shard_watch_reports_every_change() -> None:
    watch = ShardWatch((3,))
    assert watch.ready(3) == "session"
    watch.dropped(3)
    assert watch.resumed(3) == "resumed"
    watch.dropped(3)
    assert watch.ready(3) == "session"


def test_a_watch_needs_shards() -> None:
    with pytest.raises(ValueError):
        ShardWatch(())


def test_a_tree_prefers_its_named_shards_and_with_takeover_any_may_serve_every_other() -> None:
    """The one rule the bridge and the service both keep their leases by (``clankie.shards.preferred``, ``others``)."""
    assert preferred((), None) == [(0, 1)]  # unsharded: the one shard
    assert preferred((), 3) == [(0, 3), (1, 3), (2, 3)]
    assert preferred((1,), 3) == [(1, 3)]
    assert others((1,), 3, "any") == [(0, 3), (2, 3)]
    assert others((1,), 3, "none") == [] and others((), 3, "any") == [] and others((), None, "any") == []
