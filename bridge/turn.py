"""One held turn, from its journal line to its one outcome: submit it, wait for its result, post it, record it.

:class:`TurnHolder` carries each :class:`bridge.held.Held` delivery through its turn:
it journals the delivery before it is submitted (:mod:`bridge.journal`; a
recovered one is journaled already), submits it once over the service link
(which re-submits it by id after a reconnect), waits for the result however
long the turn takes, settles the room's engagement with the outcome, posts
the reply when the outcome is :attr:`~clankie.protocol.TurnOutcome.visible`
(:mod:`bridge.delivery`) or the failure reaction when an addressed turn
failed (:mod:`bridge.reaction`), and closes the delivery with exactly one
outcome: its receipt, its folded messages' receipts and the journal lines
(:mod:`bridge.ledger`: the receipt first, so a bridge killed between the two
is closed from the receipt at the next start).
While it holds a delivery, the delivery is held by the one owner of the
turns (:class:`bridge.held.TurnState`), where the service's calls find it
(:mod:`bridge.service_calls`).

What it works with comes in four records: :class:`bridge.ledger.Ledger` (where
an outcome is written, in the one order), :class:`Posting` (how a reply or a reaction reaches Discord),
:class:`Peers` (admission, the service link, the tool card, the clock) and
:class:`Signs` (the bridge's own signs on a room).

Which message becomes which turn, and when each turn starts, is
:class:`bridge.turns.Bridge`'s job; this module never decides that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bridge.admission import Ingress
from bridge.card import Cards
from bridge.delivery import Delivered, RetryPolicy, deliver_reply, posted_before
from bridge.disk import is_disk_code
from bridge.held import Held, Phase, TurnState
from bridge.ledger import Ledger
from bridge.port import DiscordPort
from bridge.reaction import react, wants_reaction
from bridge.receipts import ReceiptIds
from bridge.service_link import ServiceLink
from clankie.appender import DiskError
from clankie.clock import Clock
from clankie.protocol import Code, Room, TurnOutcome, TurnResult
from clankie.redact import Redactor
from clankie.store.journal_ports import LEASE_GONE, JournalRefused

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Posting:
    """How a settled reply and the failure reaction reach Discord."""

    port: DiscordPort
    retry: RetryPolicy
    redact: Redactor  # a reply is redacted whole, before it is cut into messages (a cut could split a secret)
    attachment_root: Path
    upload_limit: int
    failure_reaction: str  # "" for none
    ours: Callable[[Room], bool]  # whether the room's shard is still this tree's to post in (the postgres profile)


@dataclass(frozen=True, slots=True)
class Peers:
    """What a turn works with while it runs: admission (its room settles), the service link, the tool card, the
    clock."""

    ingress: Ingress
    link: ServiceLink
    cards: Cards
    clock: Clock


@dataclass(frozen=True, slots=True)
class Signs:
    """The bridge's signs on a room, which it bounds itself (:class:`bridge.turns.Bridge`)."""

    react_refused: Callable[[str, str, str], None]  # (channel, message, emoji): a reaction, within the bound in flight
    answered: Callable[[str, tuple[str, ...]], None]  # (channel, messages that waited for their pace): their ⏳ goes


class TurnHolder:
    """Holds each started turn's delivery until its one outcome is recorded (see the module docstring)."""

    def __init__(self, turns: TurnState, ledger: Ledger, posting: Posting, peers: Peers, signs: Signs) -> None:
        self.turns = turns
        self.ledger = ledger
        self.posting = posting
        self.peers = peers
        self.signs = signs

    async def hold(self, held: Held) -> None:
        """Run one delivery's turn to its outcome. Never raises but for cancellation: a refused journal line fails
        the delivery (it may come again), and a bug here fails only this delivery, ``bridge_internal_error``."""
        did = held.submit.delivery_id
        self.turns.hold(held)
        cards, failure_reaction = self.peers.cards, self.posting.failure_reaction
        try:
            await self._run(held)
        except asyncio.CancelledError:
            raise
        except (DiskError, JournalRefused) as exc:  # the delivery could not be written down: it fails, visibly, and may come again
            log.error("delivery %s: journal refused it (%s)", did, exc.code)
            lease_gone = isinstance(exc, JournalRefused) and exc.code in LEASE_GONE  # the shard's taker answers it
            if not lease_gone:
                self.ledger.disk.refused(exc.code)
            if not lease_gone and wants_reaction(TurnOutcome.FAILED, unprompted=held.submit.trigger.unprompted,
                                                 catching_up=held.catching_up, emoji=failure_reaction):
                self.signs.react_refused(held.room.channel_id, held.trigger_id, failure_reaction)  # as any failed turn
            await cards.end(did)
            self.peers.ingress.forget(did, held.room)
            self.ledger.receipts.record(TurnOutcome.FAILED, reason=exc.code, **_ids(held))
        except Exception:  # a bug here must not take other deliveries down
            log.exception("delivery %s failed inside the bridge", did)
            await cards.end(did)
            self.peers.ingress.forget(did, held.room)
            self._close(held, TurnResult.failed(Code.BRIDGE_INTERNAL_ERROR))
            self.turns.ended(TurnOutcome.FAILED, replied=False, reply_failed=False)
        finally:
            held.stop_typing()
            cards.abandon(did)  # only a cancelled turn still has one here: it runs again after a restart
            self.turns.let_go(did)

    async def _run(self, held: Held) -> None:
        """Journal, submit, wait for the result however long it takes, deliver it, record it."""
        did, room = held.submit.delivery_id, held.room
        peers, receipts, emoji = self.peers, self.ledger.receipts, self.posting.failure_reaction
        recovered = held.recovered
        if recovered is None:
            self.ledger.journal.admit(held.submit, held.fingerprint, peers.clock.wall(),
                                      catching_up=held.catching_up, folds=held.folds)
        submit = asyncio.get_running_loop().create_task(peers.link.submit(held.submit))
        await asyncio.sleep(0)  # let the submission reach the socket before the receipt is written
        receipts.record("accepted" if recovered is None else "recovered", **_ids(held))
        try:
            result = await submit
        finally:
            submit.cancel()
        if result.outcome.visible and not self.posting.ours(room):  # the shard moved meanwhile: its new tree answers
            log.warning("delivery %s: its room's shard is another tree's now; the reply is not posted", did)
            result = TurnResult.failed(Code.CAPTAIN_SHARD_MOVED, turn_id=result.turn_id)
        self._answered_meanwhile(peers.ingress.settle(room.channel_id, result.outcome, peers.clock.wall()), room)
        await peers.cards.end(did)  # however the turn ended, before its reply goes out
        delivered = await self._post(held, result) if result.outcome.visible else Delivered(())
        held.stop_typing()
        if wants_reaction(result.outcome, unprompted=held.submit.trigger.unprompted, catching_up=held.catching_up,
                          emoji=emoji, code=result.code):
            if await react(self.posting.port, room.channel_id, held.trigger_id, emoji) is None:
                receipts.record("reacted", reason=result.code, turn_id=result.turn_id, **_ids(held))
        held.move(Phase.DONE)
        self._close(held, result, delivered.message_ids)
        self.turns.ended(result.outcome, replied=bool(delivered.message_ids), reply_failed=delivered.error is not None)
        if delivered.error is not None:
            receipts.record("reply_failed", reason=delivered.error, turn_id=result.turn_id, **_ids(held))

    async def _post(self, held: Held, result: TurnResult) -> Delivered:
        """Post a visible result's reply to the trigger (a recovered delivery looks first for one posted before a
        crash)."""
        did, room, posting, clock = held.submit.delivery_id, held.room, self.posting, self.peers.clock
        held.move(Phase.DELIVERING)
        already = await posted_before(posting.port, clock, posting.retry, room.channel_id, held.trigger_id,
                                      did) if held.recovered is not None else ()
        return await deliver_reply(
            posting.port, clock, posting.retry,
            delivery_id=did, channel_id=room.channel_id, guild_id=room.guild_id,
            reply_to=held.trigger_id, text=posting.redact(result.text), media=result.media,
            attachment_root=posting.attachment_root,
            upload_limit=min(posting.upload_limit, posting.port.upload_limit(room.guild_id)),
            already=already,
        )

    def _close(self, held: Held, result: TurnResult, message_ids: tuple[str, ...] = ()) -> None:
        """The delivery's one outcome: its receipt, its folded messages' receipts (:attr:`TurnOutcome.folded`), and
        the journal lines."""
        did, code = held.submit.delivery_id, result.code
        if is_disk_code(code):
            self.ledger.disk.refused(code)
        self.ledger.closed(held.room, did, result.outcome, self.peers.clock.wall(), folds=held.folds, code=code,
                           turn_id=result.turn_id, message_ids=message_ids)
        entries = self.ledger.journal.state.entries
        paced = tuple(d for d in (held.submit.delivery_id, *held.folds) if (e := entries.get(d)) is not None and e.paced)
        self.signs.answered(held.room.channel_id, paced)

    def _answered_meanwhile(self, message_ids: Iterable[str], room: Room) -> None:
        """Close buffered messages an answer in their room took out of its backlog: ``absorbed``, no catch-up turn."""
        for message_id in message_ids:
            self.ledger.closed(room, message_id, TurnOutcome.ABSORBED, self.peers.clock.wall())


def _ids(held: Held, did: str | None = None) -> ReceiptIds:
    """The ids every receipt of a held delivery (or of one of its folds, ``did``) carries."""
    return {"delivery_id": did or held.submit.delivery_id, "channel_id": held.room.channel_id,
            "guild_id": held.room.guild_id}
