"""The gateway session's pure parts (bridge/gateway_session.py): the link's table, the book, its bounds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge import gateway_link as gl
from bridge import gateway_session as gs
from clankie.testing.clock import FakeClock
from tests.polling import until

REFUSED = [(s, m) for s in gl.State for m in gl.Move if (s, m) not in gl.TRANSITIONS and (s, m) not in gl.IGNORED]


@pytest.mark.parametrize(("state", "move"), REFUSED, ids=str)
def test_a_move_not_in_the_table_raises_and_the_state_stays(state: gl.State, move: gl.Move) -> None:
    link = gl.Link()
    link.state = state
    with pytest.raises(gl.IllegalSessionMove):
        link.move(move)
    assert link.state is state


def test_a_restart_resumes_and_a_refusal_identifies_through_the_table() -> None:
    link = gl.Link()
    assert [link.move(m) for m in (gl.Move.RESUME, gl.Move.IDENTIFY, gl.Move.READY, gl.Move.DROPPED, gl.Move.RESUME,
                                   gl.Move.RESUMED)] == [gl.State.RESUMING, gl.State.IDENTIFYING, gl.State.LIVE,
                                                         gl.State.DOWN, gl.State.RESUMING, gl.State.LIVE]
    assert gl.Link().move(gl.Move.DROPPED) is gl.State.IDLE  # ignored: nothing was up


def test_identifies_in_a_row_wait_longer_up_to_the_cap() -> None:
    book = gl.Book()
    waits = []
    for n in range(20):
        book.in_a_row = n
        waits.append(book.identify_delay())
    assert waits[: gl.FREE_IDENTIFIES] == [0.0] * gl.FREE_IDENTIFIES
    assert waits[gl.FREE_IDENTIFIES: gl.FREE_IDENTIFIES + 3] == [gl.IDENTIFY_BASE, 2 * gl.IDENTIFY_BASE, 4 * gl.IDENTIFY_BASE]
    assert max(waits) == gl.IDENTIFY_CAP and waits[-1] == gl.IDENTIFY_CAP


def test_a_sharded_process_counts_identifies_in_a_row_by_rounds_of_its_shards() -> None:
    """Four shards IDENTIFYing at one start are one round: the backoff starts after as many rounds as one shard's
    free IDENTIFYs, not after the first start of a four-shard bridge."""
    book = gl.Book()
    book.in_a_row = 4 * gl.FREE_IDENTIFIES - 1
    assert book.identify_delay(4) == 0.0
    book.in_a_row = 4 * gl.FREE_IDENTIFIES
    assert book.identify_delay(4) == gl.IDENTIFY_BASE
    assert book.identify_delay(1) == gl.IDENTIFY_CAP  # one shard: twelve in a row is deep in the backoff


def test_identifies_wait_for_their_rate_limit_key_and_resumes_are_not_counted() -> None:
    """Discord's rule: shard i's key is i % max_concurrency, one IDENTIFY per key per window; the first of each key
    goes at once, the next of the same key waits for the window after the last."""
    one = gl.IdentifyGate(1)
    assert [one.claim(i, 100.0) for i in (0, 1, 2)] == [0.0, gl.IDENTIFY_WINDOW, 2 * gl.IDENTIFY_WINDOW]
    assert one.claim(0, 200.0) == 0.0  # long after: nothing to wait for
    two = gl.IdentifyGate(2)
    assert [two.claim(i, 100.0) for i in (0, 1, 2, 3)] == [0.0, 0.0, gl.IDENTIFY_WINDOW, gl.IDENTIFY_WINDOW]
    assert gl.IdentifyGate(0).max_concurrency == 1  # a malformed figure is read as Discord's default


def test_low_is_under_a_tenth_of_the_total() -> None:
    assert not gl.Book(starts_total=1000, starts_remaining=100).low()
    assert gl.Book(starts_total=1000, starts_remaining=99).low()
    assert not gl.Book().low()


def _book(shards: int) -> gl.Book:
    book = gl.Book(day="2026-12-06", identifies=2, resumes=3, starts_total=1000, starts_remaining=990)
    for n in range(shards):
        book.sessions[(n, shards)] = gl.Stored(f"s{n}", "wss://gateway.example/", n * 10, 1.5)
    return book


def test_the_book_round_trips_and_keeps_at_most_max_shards() -> None:
    assert gl.Book.from_json(json.loads(json.dumps(_book(3).to_json()))) == _book(3)
    big = gl.Book.from_json(json.loads(json.dumps(_book(gl.MAX_SHARDS + 5).to_json())))
    assert len(big.sessions) == gl.MAX_SHARDS


@pytest.mark.parametrize("bad", [
    {"session_id": "x" * (gl.MAX_ID_CHARS + 1)},
    {"resume_url": "http://not-a-websocket/"},
    {"resume_url": "wss://" + "x" * gl.MAX_URL_CHARS},
    {"seq": -1},
    {"seq": True},
    {"shard": [2, 2]},
    {"since": "yesterday"},
], ids=str)
def test_a_malformed_session_is_refused(bad: dict[str, object]) -> None:
    raw = _book(1).to_json()
    raw["sessions"][0].update(bad)
    with pytest.raises(ValueError):
        gl.Book.from_json(raw)


def test_a_file_at_the_size_bound_is_read_and_one_over_it_is_not(tmp_path: Path) -> None:
    clock = FakeClock()
    keeper = gs.SessionKeeper(tmp_path, clock)
    keeper.book = _book(1)
    keeper.flush()
    body = keeper.path.read_bytes()
    keeper.path.write_bytes(body + b" " * (gs.MAX_FILE_BYTES - len(body)))
    assert gs.SessionKeeper(tmp_path, clock).stored((0, 1)) is not None
    keeper.path.write_bytes(body + b" " * (gs.MAX_FILE_BYTES - len(body) + 1))
    assert gs.SessionKeeper(tmp_path, clock).stored((0, 1)) is None


def test_the_journaled_sequence_is_written_at_most_every_flush_interval_and_at_the_heartbeat(tmp_path: Path) -> None:
    clock = FakeClock()
    keeper = gs.SessionKeeper(tmp_path, clock)
    keeper.link((0, 1)).move(gl.Move.IDENTIFY)
    keeper.ready((0, 1), "secret-session", "wss://gateway.example/", 1)

    def on_disk() -> int | None:
        seq: int | None = json.loads(keeper.path.read_text())["sessions"][0]["seq"]
        return seq

    keeper.journaled((0, 1), 5)
    assert on_disk() == 1  # written less than FLUSH_EVERY ago
    clock.advance(gs.FLUSH_EVERY)
    keeper.journaled((0, 1), 6)
    assert on_disk() == 6
    keeper.journaled((0, 1), 7)
    keeper.journaled((0, 1), 3)  # never backwards
    keeper.tick()
    assert on_disk() == 7


def test_the_last_sequence_before_a_quiet_spell_is_written_within_the_flush_interval_without_a_heartbeat(
        tmp_path: Path) -> None:
    """A burst's last message moves the sequence less than FLUSH_EVERY after the previous write, and nothing comes
    after it: the write-behind writes it FLUSH_EVERY after that write, not at the next heartbeat (a kill in between
    would RESUME from an older sequence than it had journaled)."""

    async def main() -> None:
        clock = FakeClock()  # it never moves: the write-behind does not wait for it
        keeper = gs.SessionKeeper(tmp_path, clock)
        keeper.link((0, 1)).move(gl.Move.IDENTIFY)
        keeper.ready((0, 1), "s", "wss://gateway.example/", 1)
        writer = asyncio.create_task(keeper.write_behind())
        keeper.journaled((0, 1), 9)
        assert json.loads(keeper.path.read_text())["sessions"][0]["seq"] == 1
        await until(lambda: json.loads(keeper.path.read_text())["sessions"][0]["seq"] == 9, 10, "the write-behind")
        writer.cancel()

    asyncio.run(main())


def test_a_session_that_lived_ends_the_crash_loop_and_a_new_day_resets_the_counts(tmp_path: Path) -> None:
    async def main() -> None:
        clock = FakeClock(autojump=True)
        keeper = gs.SessionKeeper(tmp_path, clock)
        for _ in range(gl.FREE_IDENTIFIES + 5):  # a network outage: the socket never opens, nothing is sent
            await keeper.identifying((0, 1))
            keeper.dropped((0, 1))
        assert keeper.book.in_a_row == 0 and keeper.book.identifies == 0 and not clock.slept
        for _ in range(gl.FREE_IDENTIFIES):
            await keeper.identifying((0, 1))
            keeper.identified((0, 1))
            keeper.dropped((0, 1))
        assert keeper.book.in_a_row == gl.FREE_IDENTIFIES and not clock.slept
        await keeper.identifying((0, 1))
        keeper.identified((0, 1))
        assert clock.slept[-1] == gl.IDENTIFY_BASE
        keeper.ready((0, 1), "s", "wss://gateway.example/", 1)
        clock.advance(gl.SETTLED)
        keeper.tick()  # nothing moved: no write
        keeper.journaled((0, 1), 2)
        assert keeper.book.in_a_row == 0
        identifies = keeper.book.identifies
        clock.advance(86400)
        keeper.dropped((0, 1))
        await keeper.identifying((0, 1))
        keeper.identified((0, 1))
        assert keeper.book.identifies == 1 < identifies

    asyncio.run(main())


@pytest.mark.parametrize("sharded", [False, True], ids=["one session", "shards"])
def test_a_processes_first_identify_goes_at_once_even_after_a_refused_resume_and_the_next_waits_its_window(
    tmp_path: Path, sharded: bool
) -> None:
    """discord.py sleeps 5 s before every IDENTIFY but a client's very first; a new bridge whose stored RESUME was
    refused is not a client's first, yet this process has IDENTIFYed nothing. Both clients let it go at once and
    keep the next ones :data:`~bridge.gateway_link.IDENTIFY_WINDOW` apart, on the keeper's clock."""
    from bridge.discord_gateway import BridgeClient, Hooks
    from bridge.sharded_gateway import ShardedBridgeClient

    async def main() -> None:
        clock = FakeClock(autojump=True)
        keeper = gs.SessionKeeper(tmp_path, clock)
        hooks = Hooks(on_message=lambda _m: None, on_status=lambda _s: None, on_owner=lambda _o: None)
        client = (ShardedBridgeClient(hooks, shard_count=1, shard_ids=(0,), discover_gateway=False, keeper=keeper)
                  if sharded else
                  BridgeClient(on_message_cb=hooks.on_message, on_status=hooks.on_status, on_owner=hooks.on_owner,
                               discover_gateway=False, keeper=keeper))
        try:
            await client.before_identify_hook(0 if sharded else None, initial=False)  # after the refused RESUME
            assert clock.slept == []
            await client.before_identify_hook(0 if sharded else None, initial=False)
            assert clock.slept == [gl.IDENTIFY_WINDOW]
        finally:
            await client.http.close()  # never connected: only its HTTP session to close

    asyncio.run(main())
