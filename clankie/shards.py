"""Discord's sharding arithmetic, pure: which shard a guild belongs to, and shard id lists.

Discord splits a bot's guilds over ``count`` gateway connections ("shards"):
guild ``g`` belongs to shard ``(g >> 22) % count``, and direct messages always
arrive on shard 0. A tree that runs shards ``ids`` of ``count`` receives
exactly the guilds whose shard is in ``ids``, and DMs only if 0 is among them.
This lives in the kernel because both the settings (validation) and the fake
Discord (dispatch) need it; the bridge's gateway bookkeeping is in
:mod:`bridge.shards`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clankie.protocol import Room

DM_SHARD = 0
"""Discord delivers every direct message on shard 0."""

MAX_SHARD_COUNT = 65_536
"""A generous upper bound for ``CLANKIE_DISCORD_SHARD_COUNT`` (Discord's largest bots run a few thousand)."""


def shard_of(guild_id: int | str, count: int) -> int:
    """The shard that carries ``guild_id``'s events when the bot runs ``count`` shards."""
    if count < 1:
        raise ValueError("the shard count must be at least 1")
    return (int(guild_id) >> 22) % count


def room_shard(room: Room, count: int | None) -> tuple[int, int]:
    """(shard id, count) of the shard that carries ``room``'s messages: its guild's, or shard 0 for a direct message
    or an operator's local room (``say``); an unsharded bot is (0, 1)."""
    total = count or 1
    guild = room.guild_id
    if guild is None or not guild.isdigit():
        return DM_SHARD, total
    return shard_of(guild, total), total


def parse_ids(text: str) -> tuple[int, ...]:
    """``"0,1"``, ``"0-3"`` or ``"0-1,4"`` as sorted unique shard ids; ``ValueError`` with a reason if malformed."""
    ids: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
            raise ValueError(f"{part!r} is not a shard id or a range like 0-3")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"the range {part!r} runs backwards")
        if last - first >= MAX_SHARD_COUNT:
            raise ValueError(f"the range {part!r} is larger than any shard count")
        ids.update(range(first, last + 1))
    if not ids:
        raise ValueError("no shard ids given")
    return tuple(sorted(ids))


def check(ids: tuple[int, ...], count: int | None) -> None:
    """``ValueError`` unless ``ids`` (possibly empty: all shards) fit ``count`` (``None``: not sharded)."""
    if ids and count is None:
        raise ValueError("CLANKIE_DISCORD_SHARD_IDS needs CLANKIE_DISCORD_SHARD_COUNT")
    if count is not None:
        beyond = [i for i in ids if i >= count]
        if beyond:
            raise ValueError(
                f"CLANKIE_DISCORD_SHARD_IDS has {beyond[0]}, but shard ids run from 0 to "
                f"CLANKIE_DISCORD_SHARD_COUNT - 1 ({count - 1})"
            )


def describe(ids: tuple[int, ...], count: int | None) -> str:
    """How status says which shards a tree runs: ``"0,1/4"``, ``"all/2"`` or ``""`` when not sharded."""
    if count is None:
        return ""
    return f"{','.join(str(i) for i in ids) if ids else 'all'}/{count}"


def preferred(ids: tuple[int, ...], count: int | None) -> list[tuple[int, int]]:
    """The shards a tree prefers, as ``(id, count)``: ``ids`` (``CLANKIE_DISCORD_SHARD_IDS``) of ``count``, or every
    shard of it when none are named; an unsharded bot's one shard is ``(0, 1)``."""
    total = count or 1
    return [(i, total) for i in ids or range(total)]


def others(ids: tuple[int, ...], count: int | None, takeover: str) -> list[tuple[int, int]]:
    """The shards a tree may also serve for another tree: with ``CLANKIE_DISCORD_SHARD_TAKEOVER=any`` every shard of
    the count it does not prefer (the settings allow ``any`` only for a sharded bot in the postgres profile), else
    none."""
    if takeover != "any" or count is None:
        return []
    mine = set(preferred(ids, count))
    return [(i, count) for i in range(count) if (i, count) not in mine]
