"""What the service asks of the bridge on the bridge's own connection: ``typing``, ``tool``, ``history``, ``text_update``.

Each call names a delivery; only one the bridge is holding (as the turns'
owner, :class:`bridge.held.TurnState`, says) is served, and only in the phase where it
makes sense (typing and tool cards while the turn runs, history for its
channel, a text update into an admitted guild room).
"""

from __future__ import annotations

import asyncio
import logging

from bridge.admission import Ingress
from bridge.card import Cards
from bridge.delivery import RetryPolicy, post_once
from bridge.held import Phase, TurnState
from bridge.port import DiscordPort, PostError
from bridge.typing_loop import typing_loop
from clankie.clock import Clock
from clankie.errors import RemoteError
from clankie.protocol import (
    Code,
    HistoryReply,
    HistoryRequest,
    TextUpdate,
    TextUpdateReply,
    ToolActivity,
    TypingSignal,
)
from clankie.router import Router

log = logging.getLogger(__name__)


class ServiceCalls:
    """The handlers of the bridge's role in the method table, over the deliveries the bridge holds."""

    def __init__(self, turns: TurnState, *, ingress: Ingress, port: DiscordPort, clock: Clock, retry: RetryPolicy,
                 cards: Cards) -> None:
        self.turns = turns
        self.ingress = ingress
        self.port = port
        self.clock = clock
        self.retry = retry
        self.cards = cards

    def router(self) -> Router:
        return Router("bridge", {"typing": self.light_signal, "tool": self.tool,
                                 "history": self.history, "text_update": self.text_update})

    def light(self, delivery_id: str) -> bool:
        """Show typing for a held delivery until it settles; False (nothing posted) if not held."""
        held = self.turns.get(delivery_id)
        if held is None or held.phase is Phase.DONE or held.catching_up:
            log.info("typing refused for delivery %s: not held", delivery_id)
            return False
        self.cards.words(delivery_id)
        if held.typing is None:
            loop = asyncio.get_running_loop()
            held.typing = loop.create_task(typing_loop(self.port, self.clock, held.room.channel_id))
        return True

    def light_signal(self, signal: TypingSignal) -> None:
        """``typing`` from the service."""
        self.light(signal.delivery_id)

    def tool(self, activity: ToolActivity) -> None:
        """A tool call of a held delivery: only a requested turn still running gets a card."""
        held = self.turns.get(activity.delivery_id)
        if held is None or held.phase is not Phase.SUBMITTED or held.catching_up or held.submit.trigger.unprompted:
            return
        self.cards.activity(activity, held.room, held.trigger_id)

    async def history(self, req: HistoryRequest) -> HistoryReply:
        held = self.turns.get(req.delivery_id)
        if held is None or held.room.channel_id != req.room.channel_id:
            raise RemoteError(Code.DELIVERY_NOT_HELD, "history is served only for a delivery the bridge is holding")
        limit = min(req.limit, 50)
        if limit == 0:
            return HistoryReply()
        before = req.before_message_id or held.trigger_id
        try:
            messages = await self.port.history(req.room.channel_id, before, limit)
        except PostError as exc:
            raise RemoteError(Code.HISTORY_UNAVAILABLE, f"discord answered {exc.status}") from None
        return HistoryReply(messages=tuple(messages))

    async def text_update(self, req: TextUpdate) -> TextUpdateReply:
        held = self.turns.get(req.delivery_id)
        if held is None or held.phase is not Phase.SUBMITTED:
            raise RemoteError(Code.DELIVERY_NOT_HELD, "no live turn for that delivery")
        room = held.room
        if room.guild_id is None:
            raise RemoteError(Code.DM_NOT_ALLOWED, "text updates are not available in DMs")
        if not self.ingress.room_admitted(room.guild_id, room.channel_id):
            raise RemoteError(Code.ROOM_NOT_ADMITTED, "that channel is outside the admitted rooms")
        try:
            mid = await post_once(self.port, self.clock, self.retry, room.channel_id, req.text.strip(),
                                  guild_id=room.guild_id, reply_to=held.trigger_id)
        except PostError as exc:
            raise RemoteError(Code.TEXT_UPDATE_FAILED, f"discord answered {exc.status}") from None
        return TextUpdateReply(message_id=mid)
