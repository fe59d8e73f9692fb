"""The tool-activity card: one short message saying what he is doing while only tools run.

When a requested turn (addressed, not ``unprompted``, not a catch-up) has
been working in tools for :data:`CARD_DELAY_S` without writing words, the
bridge posts one message threaded to the trigger, from a fixed template per
tool (:func:`label`): never the model's text, never an argument beyond a host
name. It is edited as the tools change, at most once per
:data:`EDIT_INTERVAL_S`, and deleted when the turn ends, however it ends.
Once his words start (the service's ``typing`` signal) no card is posted; a
card already up stays until the end. ``CLANKIE_DISCORD_TOOL_CARD=false`` turns
cards off.

:class:`CardPlan` is the pure core (``now`` passed in); :class:`ToolCard`
carries it out on the :class:`~bridge.port.DiscordPort` with the injected
clock; :class:`Cards` keeps one per held delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from bridge.port import DiscordPort, PostError
from clankie.clock import Clock
from clankie.protocol import Room, ToolActivity

log = logging.getLogger(__name__)

CARD_DELAY_S = 2.0
EDIT_INTERVAL_S = 2.0
GENERIC = "Working on it\u2026"
QUIET_TOOLS = frozenset({"send_text_update"})  # him talking to the room is not work to announce


def label(tool: str, host: str | None) -> str | None:
    """The card's words for one tool call (a fixed template), or None for a tool that gets no card."""
    if tool in QUIET_TOOLS:
        return None
    if tool == "browser_screenshot":
        return f"Taking a screenshot of {host}\u2026" if host else "Taking a screenshot\u2026"
    if tool.startswith("draw_") and tool.endswith("_diagram"):
        return "Drawing a diagram\u2026"
    return GENERIC


@dataclass(slots=True)
class CardPlan:
    """What one delivery's card should say and when it may next be written (pure)."""

    since: float | None = None  # when the first announced tool call started
    active: dict[str, str] = field(default_factory=dict)  # call id -> label, oldest first
    latest: str | None = None  # the newest announced call's label (kept after it ends)
    shown: str | None = None  # what the card says now; None: not posted
    last_write: float = float("-inf")
    words: bool = False  # his words have started: no card from now on
    done: bool = False  # ended, or Discord refused a write: nothing more is written

    def tool(self, call_id: str, text: str | None, active: bool, now: float) -> None:
        if not active:
            self.active.pop(call_id, None)
            if self.active:
                self.latest = next(reversed(self.active.values()))
            return
        if text is None:
            return
        if self.since is None:
            self.since = now
        self.active[call_id] = text
        self.latest = text

    def next_write(self, now: float) -> tuple[str, float] | None:
        """The text to write and the (monotonic) time to write it, or None when nothing is due."""
        if self.done or self.latest is None or self.latest == self.shown or self.since is None:
            return None
        if self.shown is None:
            if self.words:
                return None
            return self.latest, self.since + CARD_DELAY_S
        return self.latest, max(now, self.last_write + EDIT_INTERVAL_S)

    def wrote(self, text: str, now: float) -> None:
        self.shown, self.last_write = text, now


class ToolCard:
    """One delivery's card on Discord: posts, edits and finally deletes it."""

    def __init__(self, port: DiscordPort, clock: Clock, room: Room, reply_to: str, delivery_id: str) -> None:
        self.port, self.clock, self.room, self.reply_to = port, clock, room, reply_to
        self.delivery_id = delivery_id
        self.plan = CardPlan()
        self.message_id: str | None = None
        self._timer: asyncio.Task[None] | None = None
        self._writing = False

    def tool(self, record: ToolActivity) -> None:
        self.plan.tool(record.call_id, label(record.tool, record.host), record.active, self.clock.monotonic())
        self._schedule()

    def words(self) -> None:
        self.plan.words = True
        self._schedule()

    def _schedule(self) -> None:
        if self._writing:
            return  # the write in flight schedules the next one when it is done
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        step = self.plan.next_write(self.clock.monotonic())
        if step is not None:
            self._timer = asyncio.get_running_loop().create_task(self._write_at(*step), name=f"card-{self.delivery_id}")

    async def _write_at(self, text: str, at: float) -> None:
        delay = at - self.clock.monotonic()
        if delay > 0:
            await self.clock.sleep(delay)
        self._writing = True
        try:
            if self.message_id is None:
                self.message_id = await self.port.post(self.room.channel_id, text, guild_id=self.room.guild_id,
                                                       reply_to=self.reply_to, files=(), nonce=None)
            else:
                await self.port.edit(self.room.channel_id, self.message_id, text)
            self.plan.wrote(text, self.clock.monotonic())
        except PostError as exc:  # cosmetic: a refused card is given up, never retried
            log.info("tool card for delivery %s not written (%s)", self.delivery_id, exc.code)
            self.plan.done = True
        finally:
            self._writing = False
        self._timer = None
        self._schedule()

    async def close(self) -> None:
        """The turn ended: write nothing more, wait out a write in flight, delete the card if it is up."""
        self.plan.done = True
        timer, self._timer = self._timer, None
        if timer is not None:
            if not self._writing:
                timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(timer) if self._writing else await timer
        if self.message_id is None:
            return
        try:
            await self.port.delete(self.room.channel_id, self.message_id)
        except PostError as exc:
            log.info("tool card for delivery %s not deleted (%s)", self.delivery_id, exc.code)

    def abandon(self) -> None:
        """Stop without touching Discord (the bridge is shutting down)."""
        self.plan.done = True
        if self._timer is not None:
            self._timer.cancel()


class Cards:
    """The live cards of one bridge, by delivery id."""

    def __init__(self, port: DiscordPort, clock: Clock, *, enabled: bool = True) -> None:
        self.port, self.clock, self.enabled = port, clock, enabled
        self._cards: dict[str, ToolCard] = {}

    def activity(self, record: ToolActivity, room: Room, reply_to: str) -> None:
        """A tool call of a requested, held delivery started or ended."""
        if not self.enabled:
            return
        card = self._cards.get(record.delivery_id)
        if card is None:
            if not record.active:
                return
            card = self._cards[record.delivery_id] = ToolCard(self.port, self.clock, room, reply_to, record.delivery_id)
        card.tool(record)

    @property
    def live(self) -> int:
        """How many deliveries have a card (posted or waiting to be)."""
        return len(self._cards)

    def words(self, delivery_id: str) -> None:
        card = self._cards.get(delivery_id)
        if card is not None:
            card.words()

    async def end(self, delivery_id: str) -> None:
        card = self._cards.pop(delivery_id, None)
        if card is not None:
            await card.close()

    def abandon(self, delivery_id: str) -> None:
        card = self._cards.pop(delivery_id, None)
        if card is not None:
            card.abandon()
