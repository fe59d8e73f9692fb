"""A failed turn that was asked for shows on its trigger: one reaction, no words.

When a turn addressed to him (a mention, a reply to one of his messages, a
DM) ends ``failed``, the bridge adds ``CLANKIE_DISCORD_FAILURE_REACTION``
(default ⚠️; empty disables) to the trigger and posts no text. Unaddressed
and catch-up turns fail as quietly as before. A message the bridge refuses
for backpressure (``journal_full``: "not now", a re-send may run) gets the
same reaction, whoever it was addressed to (past the bound of such reactions in
flight, a notice in its room instead: :mod:`bridge.refusal_notice`). Discord's add-reaction is a
PUT: adding the same emoji twice leaves one reaction, which is what makes
the reaction idempotent across a bridge restart (the journal's close is
written after the reaction, so a crash in between reacts again, harmlessly).

A turn that failed ``captain_shard_moved`` gets no reaction: in the PostgreSQL
profile its room's shard is another tree's now (this one paused past its lease,
or lost the database), and that tree answers the message; a warning sign after
its answer would say something went wrong when nothing did.
"""

from __future__ import annotations

import logging

from bridge.port import DiscordPort, PostError
from clankie.protocol import Code, TurnOutcome

log = logging.getLogger(__name__)


def wants_reaction(outcome: TurnOutcome, *, unprompted: bool, catching_up: bool, emoji: str, code: str | None = None
                   ) -> bool:
    """Whether a turn's end (its outcome and failure ``code``) earns the failure reaction (pure)."""
    moved = code == Code.CAPTAIN_SHARD_MOVED  # another tree has the room: it answers, this one says nothing
    return outcome is TurnOutcome.FAILED and not moved and not unprompted and not catching_up and bool(emoji)


async def react(port: DiscordPort, channel_id: str, message_id: str, emoji: str) -> str | None:
    """Add the reaction once; returns None when Discord took it, else the failure code (never raises)."""
    try:
        await port.react(channel_id, message_id, emoji)
    except PostError as exc:
        log.info("failure reaction on %s refused (%s)", message_id, exc.code)
        return exc.code
    except Exception as exc:  # cosmetic: never costs the delivery its outcome
        log.info("failure reaction on %s failed (%s)", message_id, type(exc).__name__)
        return "reaction_error"
    return None


async def unreact(port: DiscordPort, channel_id: str, message_id: str, emoji: str) -> str | None:
    """Take the bot's reaction off once; returns None when Discord took it off, else the failure code (never
    raises: the ⏳ on a message that waited for its pace is cosmetic)."""
    try:
        await port.unreact(channel_id, message_id, emoji)
    except PostError as exc:
        log.info("reaction removal on %s refused (%s)", message_id, exc.code)
        return exc.code
    except Exception as exc:  # cosmetic: never costs anything else
        log.info("reaction removal on %s failed (%s)", message_id, type(exc).__name__)
        return "reaction_error"
    return None
