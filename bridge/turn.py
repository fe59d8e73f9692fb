"""One held turn, from its journal line to its one outcome: submit it, wait for its result, post it, record it.

:class:`TurnHolder` carries each :class:`bridge.held.Held` delivery through its turn:
it journals the delivery before it is submitted (:mod:`bridge.journal`; a
recovered one is journaled already), submits it once over the service link
(which re-submits it by id after a reconnect), waits for the result however
long the turn takes, settles the room's engagement with the outcome, posts
the reply when the outcome is :attr:`~clankie.protocol.TurnOutcome.visible`
(:mod:`bridge.delivery`) or the failure reaction when an addressed turn
failed (:mod:`bridge.reaction`), and closes the delivery with exactly one
outcome: its receipt, its folded messages' receipts and the journal lines.
While it holds a delivery, the delivery is in the shared ``held`` table,
where the service's calls find it (:mod:`bridge.service_calls`).

Which message becomes which turn, and when each turn starts, is
:class:`bridge.turns.Bridge`'s job; this module never decides that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bridge.admission import Ingress
from bridge.card import Cards
from bridge.delivery import Delivered, RetryPolicy, deliver_reply, posted_before
from bridge.disk import DiskHold, is_disk_code
from bridge.held import Counters, Held, Phase
from bridge.journal import Journal
from bridge.port import DiscordPort
from bridge.reaction import react, wants_reaction
from bridge.receipts import Receipts
from bridge.service_link import ServiceLink
from clankie.appender import DiskError
from clankie.clock import Clock
from clankie.protocol import Code, Room, TurnOutcome, TurnResult
from clankie.redact import Redactor

log = logging.getLogger("bridge.turns")  # the bridge core's logger, as before the split


class TurnHolder:
    """Holds each started turn's delivery until its one outcome is recorded (see the module docstring)."""

    def __init__(
        self,
        *,
        held: dict[str, Held],
        counters: Counters,
        ingress: Ingress,
        link: ServiceLink,
        port: DiscordPort,
        receipts: Receipts,
        journal: Journal,
        clock: Clock,
        cards: Cards,
        disk: DiskHold,
        retry: RetryPolicy,
        redact: Redactor,
        attachment_root: Path,
        upload_limit: int,
        failure_reaction: str,
        react_refused: Callable[[str, str, str], None],
        answered: Callable[[str, tuple[str, ...]], None],
    ) -> None:
        """``held`` and ``counters`` are the bridge's own (shared with the service's calls and the status);
        ``react_refused`` shows the failure reaction within the bridge's bound on refusal reactions in flight;
        ``answered`` is told, once a delivery is closed, which of its messages waited for their pace (their ⏳ goes)."""
        self.held = held
        self.counters = counters
        self.ingress = ingress
        self.link = link
        self.port = port
        self.receipts = receipts
        self.journal = journal
        self.clock = clock
        self.cards = cards
        self.disk = disk
        self.retry = retry
        self.redact = redact  # redacted whole, before a reply is cut into messages (a cut could split a secret)
        self.attachment_root = attachment_root
        self.upload_limit = upload_limit
        self.failure_reaction = failure_reaction
        self.react_refused = react_refused
        self.answered = answered

    async def hold(self, held: Held) -> None:
        """Run one delivery's turn to its outcome. Never raises but for cancellation: a refused journal line fails
        the delivery (it may come again), and a bug here fails only this delivery, ``bridge_internal_error``."""
        did = held.submit.delivery_id
        self.held[did] = held
        self.counters.admitted += 1
        try:
            await self._run(held)
        except asyncio.CancelledError:
            raise
        except DiskError as exc:  # the delivery could not be written down: it fails, visibly, and may come again
            log.error("delivery %s: journal refused it (%s)", did, exc.code)
            self.disk.refused(exc.code)
            if wants_reaction(TurnOutcome.FAILED, unprompted=held.submit.trigger.unprompted,
                              catching_up=held.catching_up, emoji=self.failure_reaction):
                self.react_refused(held.room.channel_id, held.trigger_id, self.failure_reaction)  # as any failed turn
            await self.cards.end(did)
            self.ingress.forget(did)
            self.receipts.record(TurnOutcome.FAILED, reason=exc.code, **_ids(held))
        except Exception:  # a bug here must not take other deliveries down
            log.exception("delivery %s failed inside the bridge", did)
            await self.cards.end(did)
            self.ingress.forget(did)
            self._close(held, TurnResult.failed(Code.BRIDGE_INTERNAL_ERROR))
        finally:
            held.stop_typing()
            self.cards.abandon(did)  # only a cancelled turn still has one here: it runs again after a restart
            self.held.pop(did, None)

    async def _run(self, held: Held) -> None:
        """Journal, submit, wait for the result however long it takes, deliver it, record it."""
        did, room = held.submit.delivery_id, held.room
        recovered = held.recovered
        if recovered is None:
            self.journal.admit(held.submit, held.fingerprint, self.clock.wall(),
                               catching_up=held.catching_up, folds=held.folds)
        submit = asyncio.get_running_loop().create_task(self.link.submit(held.submit))
        await asyncio.sleep(0)  # let the submission reach the socket before the receipt is written
        self.receipts.record("accepted" if recovered is None else "recovered", **_ids(held))
        try:
            result = await submit
        finally:
            submit.cancel()
        self._answered_meanwhile(self.ingress.settle(room.channel_id, result.outcome, self.clock.wall()), room)
        await self.cards.end(did)  # however the turn ended, before its reply goes out
        delivered = await self._post(held, result) if result.outcome.visible else Delivered(())
        held.stop_typing()
        if wants_reaction(result.outcome, unprompted=held.submit.trigger.unprompted, catching_up=held.catching_up,
                          emoji=self.failure_reaction):
            if await react(self.port, room.channel_id, held.trigger_id, self.failure_reaction) is None:
                self.receipts.record("reacted", reason=result.code, turn_id=result.turn_id, **_ids(held))
        held.move(Phase.DONE)
        self.counters.by_outcome[result.outcome] = self.counters.by_outcome.get(result.outcome, 0) + 1
        self._close(held, result, delivered.message_ids)
        if delivered.message_ids:
            self.counters.replies += 1
        if delivered.error is not None:
            self.counters.reply_failures += 1
            self.receipts.record("reply_failed", reason=delivered.error, turn_id=result.turn_id, **_ids(held))

    async def _post(self, held: Held, result: TurnResult) -> Delivered:
        """Post a visible result's reply to the trigger (a recovered delivery looks first for one posted before a
        crash)."""
        did, room = held.submit.delivery_id, held.room
        held.move(Phase.DELIVERING)
        already = await posted_before(self.port, self.clock, self.retry, room.channel_id, held.trigger_id,
                                      did) if held.recovered is not None else ()
        return await deliver_reply(
            self.port, self.clock, self.retry,
            delivery_id=did, channel_id=room.channel_id, guild_id=room.guild_id,
            reply_to=held.trigger_id, text=self.redact(result.text), media=result.media,
            attachment_root=self.attachment_root,
            upload_limit=min(self.upload_limit, self.port.upload_limit(room.guild_id)),
            already=already,
        )

    def _close(self, held: Held, result: TurnResult, message_ids: tuple[str, ...] = ()) -> None:
        """The delivery's one outcome: its receipt, its folded messages' receipts (:attr:`TurnOutcome.folded`), and
        the journal lines."""
        outcome, code, turn_id = result.outcome, result.code, result.turn_id
        if is_disk_code(code):
            self.disk.refused(code)
        self.receipts.record(outcome, reason=code, turn_id=turn_id, message_ids=message_ids, **_ids(held))
        for fold in held.folds:
            self.receipts.record(outcome.folded, reason=code, turn_id=turn_id, **_ids(held, fold))
        self.journal.close(held.submit.delivery_id, outcome, self.clock.wall(), code=code, message_ids=message_ids)
        entries = self.journal.state.entries
        paced = tuple(d for d in (held.submit.delivery_id, *held.folds) if (e := entries.get(d)) is not None and e.paced)
        self.answered(held.room.channel_id, paced)

    def _answered_meanwhile(self, message_ids: Iterable[str], room: Room) -> None:
        """Close buffered messages an answer in their room took out of its backlog: ``absorbed``, no catch-up turn."""
        for message_id in message_ids:
            self.receipts.record(TurnOutcome.ABSORBED, delivery_id=message_id, channel_id=room.channel_id,
                                 guild_id=room.guild_id)
            self.journal.close(message_id, TurnOutcome.ABSORBED, self.clock.wall())


def _ids(held: Held, did: str | None = None) -> dict[str, Any]:
    """The ids every receipt of a held delivery (or of one of its folds, ``did``) carries."""
    return {"delivery_id": did or held.submit.delivery_id, "channel_id": held.room.channel_id,
            "guild_id": held.room.guild_id}
