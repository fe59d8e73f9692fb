"""The bridge's core: which admitted message becomes which turn, and when each turn starts.

:class:`Bridge` sits between the Discord client (which hands it inbound
messages) and the service link (which runs turns). It carries out
admission's verdict on each message (:mod:`bridge.admission`): a drop or a
duplicate gets its receipt (a refusal for backpressure or pace, a reaction;
for backpressure past the bound of reactions in flight, a room notice:
:mod:`bridge.refusal_notice`),
a message for a drifted room is buffered for its room's catch-up turn, one
that finds every turn slot taken waits for a slot, and the rest start a turn
at once. A message that waits (in a backlog or for a slot) has one record,
its journal entry (:mod:`bridge.journal_state`): admission's backlog and the
slot queue (:mod:`bridge.waiting`) hold only its id, and its turn is built
from the entries (:func:`bridge.waiting.joined`) when a slot frees, when the
catch-up timer fires, or after a restart (:mod:`bridge.recovery`). At most
``max_turns`` turns run at once, each in its own task.

What happens to a turn once it has started (journaled, submitted, its reply
posted, its one outcome recorded) is :class:`bridge.turn.TurnHolder`'s job.
The service's calls on the same connection (``history``, ``typing``,
``tool``, the tool-activity card of :mod:`bridge.card`, and ``text_update``)
are served by :class:`bridge.service_calls.ServiceCalls`. The held
deliveries and the counters have one owner, :class:`bridge.held.TurnState`
(:attr:`Bridge.turns`), which all three ask and tell through its methods.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from bridge.admission import (
    BACKLOG_FULL,
    BACKPRESSURE,
    RATE_LIMITED,
    Buffered,
    CatchUp,
    Drop,
    Duplicate,
    Ingress,
    Paced,
    Run,
    Waiting,
)
from bridge.card import Cards
from bridge.delivery import RetryPolicy
from bridge.disk import DiskHold
from bridge.held import Held, TurnState
from bridge.inbound import Inbound
from bridge.journal import Journal
from bridge.journal_state import Entry
from bridge.ledger import Ledger
from bridge.port import DiscordPort, PostError
from bridge.reaction import react, unreact
from bridge.receipts import ReceiptIds, Receipts
from bridge.refusal_notice import NOTICE, NoticeGate, Sign
from bridge.service_calls import ServiceCalls
from bridge.service_link import ServiceLink
from bridge.turn import Peers, Posting, Signs, TurnHolder
from bridge.waiting import Joined, WaitQueue, joined
from clankie.appender import DiskError
from clankie.clock import Clock
from clankie.metrics import INGRESS_MESSAGES, METER, REFUSAL_SIGNS
from clankie.protocol import Room, Trigger, TurnSubmit
from clankie.redact import NOTHING, Redactor
from clankie.store.journal_ports import JournalRefused
from clankie.tasks import TaskSet

log = logging.getLogger(__name__)

# clankie_ingress_messages_total's verdict for each admission decision (a drop's reason is its code)
VERDICT: dict[type, str] = {Run: "run", Buffered: "buffered", Waiting: "waiting", Paced: "paced", Duplicate: "duplicate",
                            Drop: "dropped"}

HOURGLASS = "\u23f3"  # a message waiting for its author's pace (or refused past it): "slow down", not "send it again"
PACED = "paced"  # a waiting receipt's reason: over its author's pace, it waits for it (bridge.paced)
MAX_REFUSAL_REACTIONS = 32
"""Failure reactions on refused messages in flight at once; under a flood the rest go without."""


class Bridge:
    """Carries out admission's verdict on each message and starts each turn when a slot is free (module docstring);
    a started turn is :attr:`holder`'s."""

    def __init__(
        self,
        *,
        ingress: Ingress,
        port: DiscordPort,
        receipts: Receipts,
        journal: Journal,
        clock: Clock,
        service_path: Path,
        attachment_root: Path,
        upload_limit: int,
        retry: RetryPolicy | None = None,
        failure_reaction: str = "",
        tool_card: bool = True,
        disk: DiskHold | None = None,
        redact: Redactor = NOTHING,
    ) -> None:
        self.ingress = ingress
        self.port = port
        self.receipts = receipts
        self.journal = journal
        self.clock = clock
        self.failure_reaction = failure_reaction
        # the postgres profile: whether a room's shard lease is still this tree's, asked before a reply is posted
        self.room_ours: Callable[[Room], bool] = lambda room: True
        self.cards = Cards(port, clock, enabled=tool_card)
        self.turns = TurnState()  # the one owner of the held deliveries and the counters
        retry = retry or RetryPolicy()
        self.calls = ServiceCalls(self.turns, ingress=ingress, port=port, clock=clock, retry=retry, cards=self.cards)
        self.handle = self.calls.router()
        self.link = ServiceLink(service_path, self.handle, clock)
        self.waiting = WaitQueue()  # ids only: a waiting message's one record is its journal entry
        self.disk = disk or DiskHold(journal.path.parent, clock)  # a full disk holds what waits (bridge.disk)
        self.ledger = Ledger(receipts, journal, self.disk)  # each message's one outcome, receipt first
        self.holder = TurnHolder(
            self.turns,
            self.ledger,
            Posting(port, retry, redact, attachment_root, upload_limit, failure_reaction, lambda room: self.room_ours(room)),
            Peers(ingress, self.link, self.cards, clock),
            Signs(react_refused=self._react_refused, answered=self._unpace),
        )
        self._closing = False  # no waiting turn starts once the bridge is closing (they wait in the journal)
        # Turns held: admission keeps them at ``max_turns`` plus one catch-up turn per engaged room, so the set's
        # bound is that sum and reaching it would be a leak (spawn raises; the message stays in the journal).
        self._turns = TaskSet("bridge.turns", ingress.policy.max_turns + ingress.policy.engagement_max_rooms)
        self._reactions = TaskSet("bridge.refusal-reactions", MAX_REFUSAL_REACTIONS)  # under a flood the rest go without
        self.notices = NoticeGate()  # past that bound, a backpressure refusal's room gets one notice (bridge.refusal_notice)
        self._notices = TaskSet("bridge.refusal-notices", self.notices.max_rooms)
        self._pace_timer: asyncio.Task[None] | None = None  # wakes when the next turn waiting for its pace may start
        # one task per closed turn that wore ⏳ (it takes them off one by one); past the bound they stay
        self._unpaced = TaskSet("bridge.hourglass-removals", ingress.policy.max_turns)

    # ------------------------------------------------------------ ingress

    def on_message(self, inbound: Inbound, room: Room, trigger: Trigger) -> Run | None:
        """Admit one message; a turn, if any, starts as a background task (returned Run)."""
        decision = self.ingress.admit(inbound, self.clock.wall(), live_run=self.live_run(inbound.channel_id),
                                      turns=self.turns_in_flight, room_waiting=self.waiting.waits(inbound.channel_id),
                                      journal_full=self.journal.full)
        ids = ReceiptIds(delivery_id=inbound.message_id, channel_id=inbound.channel_id, guild_id=inbound.guild_id)
        METER.count(INGRESS_MESSAGES.of(VERDICT.get(type(decision), "other"),
                                         decision.code if isinstance(decision, Drop) else ""))
        if isinstance(decision, Drop):
            self.turns.count("dropped")
            self.receipts.record("dropped", reason=decision.code, **ids)
            if decision.code in BACKPRESSURE:
                self._refused_visibly(inbound, decision.code)
            elif decision.code == RATE_LIMITED and self.ingress.rate_hint(inbound, self.clock.wall()):
                self._react_refused(inbound.channel_id, inbound.message_id, HOURGLASS)
            return None
        if isinstance(decision, Duplicate):
            self.turns.count("duplicates")
            self.receipts.record("deduplicated", **ids)
            return None
        if isinstance(decision, Waiting):
            self._wait(inbound, room, trigger.model_copy(update={"unprompted": decision.unprompted}))
            return None
        if isinstance(decision, Paced):
            self._wait_for_pace(inbound, room, trigger.model_copy(update={"unprompted": decision.unprompted}),
                                decision.person)
            return None
        if isinstance(decision, Buffered):
            self.turns.count("buffered")
            try:
                self.journal.buffer(inbound.message_id, self.clock.wall(), inbound.fingerprint, room,
                                    inbound.to_wire(), trigger.to_wire())
            except (DiskError, JournalRefused) as exc:  # its entry stands in memory; only a crash before the catch-up loses it
                log.error("buffered message %s not journaled (%s)", inbound.message_id, exc.code)
            self.receipts.record("buffered", **ids)
            self.fell_out(decision.fell_out, room)
            return None
        if trigger.unprompted != decision.unprompted:
            trigger = trigger.model_copy(update={"unprompted": decision.unprompted})
        self._spawn(Held(TurnSubmit(delivery_id=decision.delivery_id, room=room, trigger=trigger), inbound.fingerprint))
        return decision

    def live_run(self, channel_id: str) -> bool:
        """Whether the bridge holds a submitted, not-yet-done delivery in this channel (a message now is steered)."""
        return self.turns.live_in(channel_id)

    def resume(self, entry: Entry) -> None:
        """Run a journaled delivery that never got its outcome (the bridge died holding it) again."""
        self.turns.count("recovered")
        self._spawn(Held(entry.turn(), entry.fingerprint, entry.catching_up, entry.folds, recovered=entry))

    def fell_out(self, message_ids: Iterable[str], room: Room) -> None:
        """Close buffered messages a full backlog let go of: ``dropped`` (``backlog_full``), ``expired`` in the journal."""
        for message_id in message_ids:
            self.turns.count("dropped")
            self.ledger.expired(room, message_id, self.clock.wall(), dropped=BACKLOG_FULL)

    @property
    def pending_triggers(self) -> int:
        """Buffered messages held for a catch-up turn: ids in the backlogs (each payload is its journal entry's)."""
        return self.ingress.buffered

    @property
    def turns_in_flight(self) -> int:
        """Turns started and not yet finished (admission refuses new ones at ``max_turns``)."""
        return len(self._turns)

    def _react_refused(self, channel_id: str, message_id: str, emoji: str) -> None:
        """A message refused for backpressure shows the failure reaction, so its author knows to send it again; one
        refused for its author's pace shows ⏳. At most :data:`MAX_REFUSAL_REACTIONS` are in flight: under a flood
        the rest go without (their ``dropped`` receipts still say why)."""
        if emoji and not self._reactions.full:
            self._reactions.spawn(react(self.port, channel_id, message_id, emoji), name="refusal-reaction")

    def _refused_visibly(self, inbound: Inbound, code: str) -> None:
        """A message refused for backpressure reaches its author: the failure reaction on it while reactions keep up;
        past their bound (or with the reaction off), a notice in its room replying to it, at most one per room per
        few minutes (:mod:`bridge.refusal_notice`). Each refusal's sign is counted (a notice's once it is posted)."""
        sign: Sign
        if self.failure_reaction and not self._reactions.full:
            self._react_refused(inbound.channel_id, inbound.message_id, self.failure_reaction)
            sign = "reaction"
        else:
            sign = self.notices.decide(inbound.channel_id, self.clock.monotonic())
            if sign == "notice" and self._notices.full:  # notices outlived their interval: the room may try again
                self.notices.failed(inbound.channel_id)
                sign = "none"
            if sign == "notice":
                self._notices.spawn(self._notice(inbound, code), name="refusal-notice")
                return
        METER.count(REFUSAL_SIGNS.of(code, sign))

    async def _notice(self, inbound: Inbound, code: str) -> None:
        """Post the room's notice; a refused post keeps the room covered (a 4xx would be refused again), one that
        may succeed later (429, 5xx, no answer) lets the next refusal there try again."""
        sign: Sign = "none"
        try:
            await self.port.post(inbound.channel_id, NOTICE, guild_id=inbound.guild_id, reply_to=inbound.message_id,
                                 files=(), nonce=None)
            sign = "notice"
        except PostError as exc:
            if exc.transient:
                self.notices.failed(inbound.channel_id)
            log.info("refusal notice in channel %s not posted (%s)", inbound.channel_id, exc.code)
        except Exception as exc:  # cosmetic to the turn path: the refusal's receipt stands either way
            self.notices.failed(inbound.channel_id)
            log.info("refusal notice in channel %s failed (%s)", inbound.channel_id, type(exc).__name__)
        finally:
            METER.count(REFUSAL_SIGNS.of(code, sign))

    def _spawn(self, held: Held) -> None:
        task = self._turns.spawn(self.holder.hold(held), name=f"turn-{held.submit.delivery_id}")
        # Runs after the set's own done-callback (callbacks run in the order added), so the slot is free here.
        task.add_done_callback(self._turn_done)

    def _turn_done(self, task: asyncio.Task[None]) -> None:
        self.drain_waiting()

    # ------------------------------------------------------------ waiting for a slot

    def _journal_waiting(self, inbound: Inbound, room: Room, trigger: Trigger, *, paced: str | None) -> None:
        """Journal a message that waits (for a slot, or with ``paced`` for its author's pace) and say so in a receipt."""
        self.turns.count("waited")
        try:
            self.journal.buffer(inbound.message_id, self.clock.wall(), inbound.fingerprint, room, inbound.to_wire(),
                                trigger.to_wire(), waiting=paced is None, paced=paced)
        except (DiskError, JournalRefused) as exc:  # the journal's state still holds it; only a crash before its turn loses it
            log.error("%s message %s not journaled (%s)", "waiting" if paced is None else "paced", inbound.message_id,
                      exc.code)
        self.receipts.record("waiting", delivery_id=inbound.message_id, channel_id=inbound.channel_id,
                             guild_id=inbound.guild_id, reason=None if paced is None else PACED)

    def _wait(self, inbound: Inbound, room: Room, trigger: Trigger) -> None:
        """Journal a message that found every turn slot taken, and queue its id under its room."""
        self._journal_waiting(inbound, room, trigger, paced=None)
        self.waiting.add(inbound.channel_id, inbound.message_id)
        self.drain_waiting()

    def requeue(self, entry: Entry) -> None:
        """A journaled message that was waiting for a slot (or its author's pace) when the bridge stopped waits again
        (in journal order); the pace's buckets start full, so up to a minute's worth of paced turns start at once."""
        if entry.paced is not None:
            self.ingress.paced.add(entry.paced, entry.room.channel_id, entry.delivery_id)  # admitted: no bound
        else:
            self.waiting.add(entry.room.channel_id, entry.delivery_id)

    # ------------------------------------------------------------ waiting for the pace

    def _wait_for_pace(self, inbound: Inbound, room: Room, trigger: Trigger, person: str) -> None:
        """Journal a message over its author's pace (admission holds its id under them, :mod:`bridge.paced`), show
        the ⏳ on it, and wake when the pace lets the next waiting turn start."""
        self._journal_waiting(inbound, room, trigger, paced=person)
        self._react_refused(inbound.channel_id, inbound.message_id, HOURGLASS)
        self.release_paced()

    def release_paced(self) -> None:
        """Start every waiting turn the pace lets go now (through the slot queue: each joins its room's waiting
        messages into one turn), then sleep until the next one may go."""
        if self._closing:
            return
        released = self.ingress.paced.release(self.clock.wall())
        for channel_id, ids in released:
            for message_id in ids:
                self.waiting.add(channel_id, message_id)
        if released:
            self.drain_waiting()
        if self._pace_timer is not None:
            self._pace_timer.cancel()
            self._pace_timer = None
        due = self.ingress.paced.next_release(self.clock.wall())
        if due is not None:
            self._pace_timer = asyncio.get_running_loop().create_task(self._pace_wake(due - self.clock.wall()),
                                                                      name="pace")

    async def _pace_wake(self, delay: float) -> None:
        await self.clock.sleep(delay)
        self._pace_timer = None
        self.release_paced()

    @property
    def paced(self) -> int:
        """Messages waiting for their author's pace."""
        return len(self.ingress.paced)

    def _unpace(self, channel_id: str, message_ids: tuple[str, ...]) -> None:
        """A turn that answered messages which waited for their pace closed: take their ⏳ off."""
        if message_ids and not self._unpaced.full:
            self._unpaced.spawn(self._unreact(channel_id, message_ids), name="hourglass-removal")

    async def _unreact(self, channel_id: str, message_ids: tuple[str, ...]) -> None:
        for message_id in message_ids:
            await unreact(self.port, channel_id, message_id, HOURGLASS)

    def drain_waiting(self) -> None:
        """While a slot is free, start the room at the front of the queue: all it has waiting, as one turn."""
        while not self._closing and self.turns_in_flight < self.ingress.policy.max_turns:
            if self.waiting and not self.disk.room():  # a full disk: what waits stays in the journal until there is room
                self.disk.wake_later(self.drain_waiting)
                return
            taken = self.waiting.take()
            if taken is None:
                return
            turn = joined(self._entries(taken[1]))
            if turn is not None:
                self._start_joined(turn)

    async def catch_up_loop(self, interval: float) -> None:
        """Every ``interval`` seconds, answer each room's buffered messages in one turn."""
        while True:
            await self.clock.sleep(interval)
            for backlog in self.ingress.catch_up():
                self.catch_up(backlog)

    def catch_up(self, backlog: CatchUp) -> None:
        """Start one room's catch-up turn, built from its buffered messages' journal entries."""
        turn = joined(self._entries(backlog.ids), catching_up=True)
        if turn is None:
            log.error("catch-up in channel %s: no journal entry left to run", backlog.channel_id)
            return
        self._start_joined(turn)

    def _start_joined(self, turn: Joined) -> None:
        self._spawn(Held(turn.submit, turn.fingerprint, turn.catching_up, turn.folds))

    def _entries(self, message_ids: Iterable[str]) -> list[Entry]:
        entries = self.journal.state.entries
        return [e for i in message_ids if (e := entries.get(i)) is not None]

    # ------------------------------------------------------------ shutdown

    async def aclose(self) -> None:
        self._closing = True
        self.disk.close()
        if self._pace_timer is not None:
            self._pace_timer.cancel()
        self._turns.cancel()
        self._reactions.cancel()
        self._notices.cancel()
        self._unpaced.cancel()
        await self._turns.join()
        await self._reactions.join()
        await self._notices.join()
        await self._unpaced.join()
        self.turns.stop_typing()
