"""The turn protocol on ``service.sock``: ``turn.submit`` with idempotency by delivery id, plus ``say``.

One delivery id is one turn. A re-submission with the same body attaches to
the running turn (a reconnected bridge becomes the connection the turn
answers on) or gets the retained result; a different body is refused with
``delivery_conflict``. Results are retained on disk for seven hours, so a
restarted service answers a re-submitted delivery the same way. The turn
itself runs in its own task: a bridge that goes away does not cancel it.

A delivery the service died with is run again, unless it was part of
``poison_runs`` runs that the service crashed in: then it is a poison message
and fails ``captain_session_failed`` (evidence ``cause: poison``), and it
leaves its room for good (:mod:`service.captain.lanes.dropped`). Which deaths count
is decided in :mod:`service.captain.deliveries.store`: only a crash the supervisor
lived through; a stop, and a death with the whole tree, count for nobody.

A delivery whose record the disk refuses is not run: the submission fails
``service_disk_full`` (no space, quota or file size limit) or
``service_disk_error`` (anything else), so no turn runs that a restart could
not recognise. A result that cannot be retained is still answered.

In the PostgreSQL profile the records are the database's, shared by the
trees (:mod:`clankie.store.deliveries_pg`): a submission first waits (bounded)
until this tree may write for the room's shard (``held``), so it reads what
the shard's last holder recorded, and a delivery that tree settled is
answered with its result, not run again. A record the database refuses
because the shard is another tree's now fails the turn
``captain_shard_moved`` (that tree answers it); one the database does not
answer fails the submission ``service_disk_error``, nothing run. A turn that
ends ``captain_shard_moved`` keeps no result: its record is handed back
unsettled, its run forgotten, so the tree that took the shard runs it,
uncharged, instead of finding this tree's failure as its answer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import assert_never

from clankie import ipc, journald
from clankie.appender import DiskError
from clankie.clock import Clock
from clankie.errors import RemoteError
from clankie.metrics import METER, TURN_DURATION, TURNS
from clankie.protocol import Author, Code, Room, SayRequest, Trigger, TurnOutcome, TurnResult, TurnSubmit
from clankie.router import Router
from clankie.store.delivery_ports import LEASE_GONE, DeliveryRefused
from clankie.store.ports import Shard
from service import telemetry
from service.captain.deliveries import Answer, Conflict, DeliveryStore, Evidence, Poison, Retained, fingerprint, reckon
from service.captain.lanes import SESSION_FAILED, SHUTDOWN_CODE, Captain, parse_room, room_lane_key
from service.captain.records import disk_failure
from service.captain.tools import DeliveryContext

log = logging.getLogger(__name__)

# the disk refused a delivery's record: the turn is not run, since what it did could not be remembered
DISK_FULL_CODE, DISK_ERROR_CODE = Code.SERVICE_DISK_FULL, Code.SERVICE_DISK_ERROR
OPERATOR = Author(id="operator", name="operator")


@dataclass
class InFlight:
    fingerprint: str
    delivery: DeliveryContext
    task: asyncio.Task[TurnResult]
    attached: int = 0


class TurnService:
    """Accepts turns from the bridge (and the operator) and answers each exactly once per delivery."""

    def __init__(self, captain: Captain, store: DeliveryStore, evidence: Evidence, clock: Clock, *, poison_runs: int,
                 held: Callable[[Room], Awaitable[bool]] | None = None,
                 shard: Callable[[Room], Shard] | None = None) -> None:
        self.captain = captain
        self.held = held  # the PostgreSQL profile: waits (bounded) until this tree may write for a room
        self.shard = shard or (lambda room: (0, 1))  # the shard a room's records are fenced by
        self.store = store
        self.evidence = evidence
        self._clock = clock
        self.poison_runs = poison_runs
        self._inflight: dict[str, InFlight] = {}
        self.closing = False

    def begin_shutdown(self) -> None:
        """Refuse new submissions with ``shutting_down`` (the bridge re-submits to the restarted service).

        Every run a delivery joined is forgotten first, so a stop charges
        nobody even if it does not finish and the supervisor kills us.
        """
        self.closing = True
        self.store.release_all()

    async def drain(self) -> None:
        """Wait for every turn in flight to end (after the captain aborted them)."""
        tasks = [live.task for live in self._inflight.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    @functools.cached_property
    def handle(self) -> Router:
        """The ``service.sock`` handler."""
        return Router("service", {"turn.submit": self._on_submit})

    async def _on_submit(self, conn: ipc.Connection, params: TurnSubmit) -> TurnResult:
        return await self.submit(params, conn)

    async def submit(self, submit: TurnSubmit, conn: ipc.Connection | None) -> TurnResult:
        did = submit.delivery_id
        if self.closing:
            raise RemoteError(Code.SHUTTING_DOWN, "the service is stopping; submit again when it is back")
        if self.held is not None and not await self.held(submit.room):  # before the record is read: the last
            # holder's writes have landed once the lease is ours (the PostgreSQL profile)
            log.warning("delivery %s: this tree does not hold its room's shard; its first write will be refused", did)
            if self.closing:
                raise RemoteError(Code.SHUTTING_DOWN, "the service is stopping; submit again when it is back")
        fp = fingerprint(submit)
        live = self._inflight.get(did)
        if live is not None:
            if live.fingerprint != fp:
                raise RemoteError(Code.DELIVERY_CONFLICT, "this delivery id was submitted with a different body")
            if conn is not None:
                live.delivery.conn = conn  # the bridge reconnected: answer on the new connection
            log.info("delivery %s re-submitted while running; attached", did)
            live.attached += 1
            return _answer(await asyncio.shield(live.task))
        try:
            retained = self.store.load(did)
        except DeliveryRefused as exc:  # the database's record may hold a result: never run it blind
            log.error("delivery %s refused: its record cannot be read (%s)", did, exc.code)
            raise RemoteError(DISK_ERROR_CODE, f"the service cannot read this delivery's record ({exc.code}); "
                              "nothing was run") from None
        decision = reckon(retained, fp, self.poison_runs, tree=self.store.tree)
        if isinstance(decision, Conflict):
            raise RemoteError(Code.DELIVERY_CONFLICT, "this delivery id was submitted with a different body")
        if isinstance(decision, Answer):
            log.info("delivery %s re-submitted; returning the retained result", did)
            return decision.result
        lane = room_lane_key(self.captain.character, submit.room)
        crashed = len(decision.crashed_runs)
        if isinstance(decision, Poison):
            assert retained is not None
            return self._poison(submit, replace(retained, crashed_runs=decision.crashed_runs), lane)
        if crashed:
            log.info("delivery %s was part of %d runs the service died in; running it again", did, crashed)
        try:
            self.store.accept(did, fp, decision.crashed_runs, shard=self.shard(submit.room))
        except DiskError as exc:
            log.error("delivery %s refused: its record cannot be written (%s)", did, exc.code)
            code = disk_failure(exc) or DISK_ERROR_CODE  # any other refusal of the record is still the disk's
            raise RemoteError(code, f"the service cannot record this delivery ({exc.code}); nothing was run") from None
        except DeliveryRefused as exc:
            if exc.code in LEASE_GONE:  # the room's shard is another tree's: it answers the delivery
                log.warning("delivery %s: not run, this tree no longer holds the room's shard (%s)", did, exc.code)
                return TurnResult.failed(Code.CAPTAIN_SHARD_MOVED)
            log.error("delivery %s refused: its record cannot be written (%s)", did, exc.code)
            raise RemoteError(DISK_ERROR_CODE, f"the service cannot record this delivery ({exc.code}); "
                              "nothing was run") from None
        self.evidence.record(did, "accepted", lane=lane, crashed_runs=crashed or None)
        delivery = DeliveryContext(delivery_id=did, room=submit.room, conn=conn, accepted_at=self._clock.monotonic())
        task = asyncio.create_task(self._run(submit, delivery, lane), name=f"turn-{did}")
        self._inflight[did] = InFlight(fp, delivery, task)
        return _answer(await asyncio.shield(task))

    def _poison(self, submit: TurnSubmit, record: Retained, lane: str) -> TurnResult:
        did = submit.delivery_id
        result = TurnResult.failed(SESSION_FAILED)
        log.warning("delivery %s is a poison message: part of %d runs the service crashed in; failing it and "
                    "dropping it from its room", did, len(record.crashed_runs))
        messages = (submit.trigger.message_id, *(m.id for m in submit.backlog))
        self.captain.drop_poison(submit.room, submit.trigger.author, messages, did)  # before the verdict is kept
        self._retain(did, result, record, self.shard(submit.room))
        self.evidence.record(did, evidence_event(result.outcome), lane=lane, code=SESSION_FAILED, cause="poison",
                             crashed_runs=len(record.crashed_runs))
        METER.count(TURNS.of("dropped", SESSION_FAILED))  # it leaves its room unanswered, for good
        return result

    async def _run(self, submit: TurnSubmit, delivery: DeliveryContext, lane: str) -> TurnResult:
        did = submit.delivery_id
        started = self._clock.monotonic()
        with journald.turn_fields(did, lane):  # TURN= and LANE= on every journal entry of this turn (clankie.journald)
            return await self._turn(submit, delivery, lane, started)

    async def _turn(self, submit: TurnSubmit, delivery: DeliveryContext, lane: str, started: float) -> TurnResult:
        did = submit.delivery_id
        try:
            with telemetry.invoke_agent(self.captain.character, lane, did, self.captain.model) as span:
                try:
                    result = await self.captain.submit(submit, delivery)
                except Exception:
                    log.exception("delivery %s: captain failed", did)
                    result = TurnResult.failed(SESSION_FAILED)
                span.ended(result.outcome, result.code)
            if result.code != SHUTDOWN_CODE:
                METER.count(TURNS.of(result.outcome, result.code or ""))
                METER.observe(TURN_DURATION, self._clock.monotonic() - started)
            if result.code == SHUTDOWN_CODE:
                # not the turn's fault and not a crash: no retained result, no final evidence, and the run it
                # joined is forgotten, so the re-submission to the restarted service runs it again uncharged
                self.store.release(did)
                log.info("delivery %s interrupted by shutdown; left for the restarted service", did)
                return result
            if result.code == Code.CAPTAIN_SHARD_MOVED:
                # the room's shard is another tree's (the PostgreSQL profile): the delivery is handed back
                # unanswered, its run forgotten, for that tree to run; a failure kept here would be its answer there
                self.store.release(did)
            else:
                self._retain(did, result)
            self.evidence.record(did, evidence_event(result.outcome), lane=lane, code=result.code, turn_id=result.turn_id)
            log.info("delivery %s: %s%s", did, result.outcome, f" ({result.code})" if result.code else "",
                     extra={"code": result.code} if result.code else None)  # CODE= in the journal
            return result
        finally:
            self._inflight.pop(did, None)

    def _retain(self, did: str, result: TurnResult, record: Retained | None = None, shard: Shard | None = None) -> None:
        """Settle the delivery's record; a store that refuses it costs the retained result, not the answer."""
        try:
            self.store.settle(did, result, record, shard=shard)
        except DiskError as exc:  # a turn the disk already failed said so in its one line: this one is detail
            level = logging.DEBUG if result.code in (DISK_FULL_CODE, DISK_ERROR_CODE) else logging.ERROR
            log.log(level, "delivery %s: result not retained (%s); a re-submission would run it again", did, exc.code)
        except DeliveryRefused as exc:  # the shard moved (the taker runs it) or the database is away
            level = logging.WARNING if exc.code in LEASE_GONE else logging.ERROR
            log.log(level, "delivery %s: result not retained (%s); a re-submission would run it again", did, exc.code)

    def attached(self, delivery_id: str) -> int:
        """How many re-submissions have attached to this delivery's running turn (0 if none is running)."""
        live = self._inflight.get(delivery_id)
        return live.attached if live is not None else 0

    async def say(self, request: SayRequest) -> TurnResult:
        """An operator turn in a room, through the same lanes (no bridge: cold lanes get no history)."""
        try:
            room = parse_room(request.room, self.captain.character)
        except ValueError as exc:
            raise RemoteError(Code.INVALID_ROOM, str(exc)) from None
        message_id = uuid.uuid4().hex[:20]
        lane = room_lane_key(self.captain.character, room)
        self.evidence.record(f"say-{message_id}", "operator_say", lane=lane, caller=request.caller)
        submit = TurnSubmit(
            delivery_id=f"say-{message_id}",
            room=room,
            trigger=Trigger(message_id=message_id, author=OPERATOR, text=request.text, at=self._clock.wall()),
        )
        return await self.submit(submit, None)


def evidence_event(outcome: TurnOutcome) -> str:
    """The evidence line a turn's outcome ends with: a silent turn is ``declined`` there, the rest keep their name."""
    match outcome:
        case TurnOutcome.SILENT:
            return "declined"
        case TurnOutcome.SETTLED | TurnOutcome.ABSORBED | TurnOutcome.FAILED:
            return outcome.value
        case unreachable:
            assert_never(unreachable)


def _answer(result: TurnResult) -> TurnResult:
    """The caller's answer; a turn cut by shutdown is a retryable refusal, never a result."""
    if result.code == SHUTDOWN_CODE:
        raise RemoteError(Code.SHUTTING_DOWN, "the service stopped mid-turn; submit again when it is back")
    return result
