"""The bridge's view of its gateway shards: when the tree counts as connected, resumed or in a new session.

A sharded client keeps one gateway session per shard, and each drops,
resumes or starts anew on its own. discord.py's client-wide ``on_ready``
fires only once every shard has readied *together*, so after one shard's
fresh IDENTIFY it never fires again; the bridge therefore follows the
``on_shard_*`` events through :class:`ShardWatch`, which turns them into the
three things :class:`bridge.app.BridgeApp` acts on:

* a shard went down: messages may be missed from now on (``quiet``);
* every shard is up again and at least one started a **new session** since
  the last time they all were: Discord will not replay the gap, so the bridge
  reads the missed messages back (``"session"``);
* every shard is up again and all of them **resumed**: Discord replayed the
  gap, nothing to fetch (``"resumed"``).

Waiting for *every* shard keeps one recovery per gap: a recovery that ran
while another shard was still down would mark the gap as read back too early.
The arithmetic (which shard a guild is on, id lists) is :mod:`clankie.shards`.
"""

from __future__ import annotations

from typing import Literal

from clankie.shards import DM_SHARD

Up = Literal["session", "resumed"]

ReadBack = frozenset[int] | None
"""Whose rooms a new session's read-back covers: the shards that started one (None: every room, unsharded)."""


def receives_dms(ids: tuple[int, ...]) -> bool:
    """Whether a tree running shards ``ids`` (empty: every shard, or not sharded) is sent direct messages."""
    return not ids or DM_SHARD in ids


class ShardWatch:
    """Which of a client's shards are down, and whether the next all-up moment owes a recovery."""

    def __init__(self, ids: tuple[int, ...]) -> None:
        if not ids:
            raise ValueError("a shard watch needs the shard ids it follows")
        self.ids = ids
        self.down: set[int] = set(ids)  # nothing is connected before the first READY
        # whether a shard started a new session since all were last up; a fresh process's shards each READY (new: what
        # came before the start is read back) or RESUME a stored session (Discord replays it: nothing to read back)
        self._new_session = False
        self._renewed: set[int] = set()  # the shards behind it
        self.renewed: frozenset[int] = frozenset()  # at the last "session": the shards whose rooms to read back

    @property
    def connected(self) -> bool:
        return not self.down

    def dropped(self, shard_id: int) -> None:
        """Shard ``shard_id`` lost its gateway connection."""
        self.down.add(shard_id)

    def ready(self, shard_id: int) -> Up | None:
        """Shard ``shard_id`` started a new session (READY after IDENTIFY); what now holds for the tree."""
        self._new_session = True
        self._renewed.add(shard_id)
        return self._up(shard_id)

    def resumed(self, shard_id: int) -> Up | None:
        """Shard ``shard_id`` resumed its session (Discord replays what it missed)."""
        return self._up(shard_id)

    def _up(self, shard_id: int) -> Up | None:
        self.down.discard(shard_id)
        if self.down:
            return None
        up: Up = "session" if self._new_session else "resumed"
        self.renewed = frozenset(self._renewed)
        self._new_session = False
        self._renewed.clear()
        return up
