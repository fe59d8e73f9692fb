"""The stored sequence never passes a message whose journal line is not in yet (issue 35; the loaded bench's loss).

An admitted message's journal line is written by its turn's task, which the hand-over only schedules; had the
gateway client moved the session's sequence at once, a SIGKILL between the session file's write and the turn's first
step lost the message: not in the journal, and not replayed by the RESUME. Real discord.py, one session and two
shards, against the loopback fake; the journal's ``admit`` is watched (not replaced) to read the keeper's sequence at
the moment each line goes in.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bridge.gateway_link import Shard
from tests.bridge.harness import CHAN, CHAN2, PERSON
from tests.bridge.test_gateway_resume import Life, life, world
from tests.bridge.test_shards_resume import C0, C1
from tests.bridge.test_shards_resume import world as sharded_world


def watch(one: Life, seq_of: Any, key_of: Any) -> list[tuple[str, int | None, int | None]]:
    """(message id, its sequence at the hand-over, the keeper's sequence for its shard when its journal line went in)."""
    keeper = one.app.keeper
    assert keeper is not None
    at_hand_over: dict[str, tuple[Shard, int | None]] = {}
    seen: list[tuple[str, int | None, int | None]] = []
    on_message, admit = one.app.bridge.on_message, one.app.journal.admit

    def handed(inbound: Any, room: Any, trigger: Any) -> Any:
        at_hand_over[inbound.message_id] = (key_of(inbound), seq_of(inbound))
        return on_message(inbound, room, trigger)

    def admitted(submit: Any, *args: Any, **kwargs: Any) -> None:
        key, seq = at_hand_over[submit.delivery_id]
        seen.append((submit.delivery_id, seq, keeper.seqs.get(key)))
        admit(submit, *args, **kwargs)

    one.app.bridge.on_message = handed  # type: ignore[method-assign]
    one.app.journal.admit = admitted  # type: ignore[method-assign]
    return seen


def never_ahead(seen: list[tuple[str, int | None, int | None]]) -> bool:
    return all(seq is not None and (kept is None or kept < seq) for _, seq, kept in seen)


def test_one_sessions_sequence_moves_only_after_the_journal_line(env: dict[str, str]) -> None:
    async def main() -> None:
        async with world(env) as w, life(w) as one:
            client = one.app.port.client
            assert client is not None
            seen = watch(one, lambda _i: client.ws.sequence, lambda _i: (0, 1))
            sent = await asyncio.gather(*(w.fake.message(CHAN if n % 2 else CHAN2, f"burst {n}", author_id=PERSON)
                                          for n in range(8)))
            await w.until(lambda: all(w.replies_to(m["id"]) for m in sent), "the burst answered")
            assert sorted(m for m, _, _ in seen) == sorted(m["id"] for m in sent)
            assert never_ahead(seen), seen

    asyncio.run(main())


def test_each_shards_sequence_moves_only_after_the_journal_line(env: dict[str, str]) -> None:
    async def main() -> None:
        async with sharded_world(env) as w, life(w) as one:
            client: Any = one.app.port.client
            shard = {C0: 0, C1: 1}
            seen = watch(one, lambda i: client._get_websocket(shard_id=shard[i.channel_id]).sequence,
                         lambda i: (shard[i.channel_id], 2))
            sent = await asyncio.gather(*(w.fake.message(C0 if n % 2 else C1, f"burst {n}", author_id=PERSON)
                                          for n in range(8)))
            await w.until(lambda: all(w.replies_to(m["id"]) for m in sent), "the burst answered")
            assert sorted(m for m, _, _ in seen) == sorted(m["id"] for m in sent)
            assert never_ahead(seen), seen

    asyncio.run(main())
