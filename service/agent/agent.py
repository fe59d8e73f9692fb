"""The agent's run loop: one session tree, one live run at a time, steering and abort.

Retry lives in :mod:`service.agent.attempts` and compaction driving in
:mod:`service.agent.compactor`; this module is the loop. ``run()`` persists the user message, streams model calls, executes tool
batches and repeats until the model stops *and* the steering queue is empty.
``steer()`` queues a message into the live run; at the next turn boundary
(after the current model call and its whole tool batch) every queued message
is delivered together as one user turn. A steer that lands while the final
answer streams makes the run take one more model call instead of settling,
so a burst still gets one answer (the last one). See ``docs/agent-runtime.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from clankie.clock import Clock
from clankie.errors import ClankieError
from clankie.metrics import METER, RUN_CAPS
from service.agent.attempts import Attempts, RunFailed
from service.agent.compactor import Compactor
from service.agent.config import AgentConfig, Meter
from service.agent.content import Block, UserMessage, as_user_message, text_of, tool_uses
from service.agent.events import (
    AgentEvent,
    RunEnd,
    RunStart,
    SteerDelivered,
    SteerQueued,
    StreamProgress,
    TextDelta,
    ToolEnd,
    ToolStart,
    ToolUpdate,
    TurnEnd,
    TurnStart,
)
from service.agent.governor import Governor
from service.agent.model import ModelRequest, ModelResponse, Provider, Signal
from service.agent.outcome import OutcomeKind, RunOutcome, Usage
from service.agent.routes import Routes
from service.agent.session import SessionTree
from service.agent.tools import Tool, Toolbox, ToolCallHooks, run_batch

__all__ = ["ABORTED_RESULT", "Agent", "AgentBusy", "AgentConfig"]

log = logging.getLogger(__name__)

ABORTED_RESULT = "Not run to completion: the run was aborted."
CAPPED_RESULT = "Not run: this run reached its tool-call cap."


class AgentBusy(ClankieError):
    """Raised when ``run()`` is called while a run is live: the caller should ``steer()``."""


@dataclass
class _Run:
    run_id: str
    turn: int = 0
    usage: Usage = field(default_factory=Usage)
    steered: int = 0
    delivered_first: bool = False
    text: str = ""
    calls: int = 0  # model requests made (retries and summaries count)
    tool_calls: int = 0
    words: list[str] = field(default_factory=list)  # each answer's text, for a run stopped by a cap
    capped: str = ""  # the run cap that stopped the run (model_calls, tokens, tool_calls), for its metric
    tainted: bool = False  # a tool brought outside content (a web page) into the run: clean_only tools are withdrawn


Subscriber = Callable[[AgentEvent], None]


class Agent:
    """Runs one session tree against one provider with a fixed tool set and system prompt."""

    def __init__(
        self,
        *,
        session: SessionTree,
        provider: Provider,
        tools: Sequence[Tool],
        clock: Clock,
        system_prompt: str,
        config: AgentConfig | None = None,
        governor: Governor | None = None,
        meter: Meter | None = None,
        routes: Routes | None = None,
    ) -> None:
        self.session = session
        self._provider = provider
        self._tools = Toolbox(tools)  # a run that read a web page loses its clean_only tools (service.agent.tools)
        self._clock = clock
        self._system = system_prompt
        self._config = config or AgentConfig()
        self._meter = meter
        self._attempts = Attempts(
            provider=provider, session=session, clock=clock, policy=self._config.retry, emit=self._emit,
            governor=governor, rate_limit_retries=self._config.rate_limit_retries, routes=routes,
        )
        self._compactor = Compactor(
            session=session,
            attempts=self._attempts,
            emit=self._emit,
            limit_tokens=self._config.context_window - self._config.reserve_tokens,
            keep_recent_tokens=self._config.keep_recent_tokens,
            summary_max_tokens=self._config.summary_max_tokens,
        )
        self._queue: list[list[Block]] = []  # content blocks of each queued message
        self._run: _Run | None = None
        self._task: asyncio.Task[RunOutcome] | None = None
        self._abort_reason = ""
        self._started = False
        self._subscribers: list[Subscriber] = []
        self._last_event_at: float | None = None

    # -- public surface --------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """True from ``run()`` until its outcome is settled (steers are accepted)."""
        return self._run is not None

    @property
    def run_id(self) -> str | None:
        return self._run.run_id if self._run else None

    @property
    def last_event_at(self) -> float | None:
        """``clock.boottime()`` of the most recent event (for the stall watchdog)."""
        return self._last_event_at

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` with every event; returns the unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    async def run(self, message: UserMessage | str, *, run_id: str | None = None) -> RunOutcome:
        """Run until the model stops and no steered message is waiting; never raises for model failures.

        Raises :class:`AgentBusy` if a run is live, and ``OSError`` /
        ``UnsupportedImage`` if an image attachment cannot be read (before
        anything is persisted). Cancelling the caller aborts the run (reason
        ``cancelled``) and re-raises. ``run_id`` names the run (the captain's
        id); without it one is minted.
        """
        if self._run is not None:
            raise AgentBusy("a run is live; steer() instead")
        blocks = as_user_message(message).blocks()
        state = _Run(run_id=run_id or uuid.uuid4().hex[:12])  # the caller's id (the captain's), else a new one
        self._run = state
        self._abort_reason = ""
        self._started = False
        self._queue = [blocks]
        task = asyncio.create_task(self._drive(state), name=f"agent-run-{state.run_id}")
        self._task = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self.abort("cancelled")
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise

    @property
    def queued_images(self) -> int:
        """Image blocks waiting in the steering queue (read into memory when they were steered)."""
        return sum(1 for blocks in self._queue for block in blocks if block.get("type") == "image")

    def steer(self, message: UserMessage | str) -> bool:
        """Queue ``message`` into the live run; False (nothing queued) if no run is live.

        Image attachments are read now, so an unreadable file raises here.
        """
        if self._run is None:
            return False
        self._queue.append(as_user_message(message).blocks())
        self._emit(SteerQueued(run_id=self._run.run_id, pending=len(self._queue)))
        return True

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the live model call, tools or retry wait; the run ends ``aborted``."""
        if self._task is not None and not self._task.done() and not self._abort_reason:
            self._abort_reason = reason
            log.info("aborting run %s (%s)", self.run_id, reason)
            if self._started:  # else _drive sees the reason before its first await
                self._task.cancel()

    # -- the run ---------------------------------------------------------------

    async def _drive(self, state: _Run) -> RunOutcome:
        self._started = True
        try:
            try:
                if self._abort_reason:
                    raise asyncio.CancelledError
                return await self._loop(state)
            except RunFailed as failed:
                return self._settle(state, failed.kind)
            except OSError:  # the disk refused a session line (or an image could not be read): the caller's to name
                with contextlib.suppress(OSError):  # a disk that refused one line may refuse this one too
                    self._close_orphans()
                raise
            except Exception as exc:  # a bug, or a failure nothing classified: end the run, keep the lane
                tb = "".join(traceback.format_tb(exc.__traceback__))
                log.error("run %s failed unexpectedly: %s\n%s", state.run_id, type(exc).__name__, tb.rstrip())
                self._close_orphans()
                return self._settle(state, OutcomeKind.MODEL_FAILED)
        except asyncio.CancelledError:
            self._close_orphans()
            return self._settle(state, OutcomeKind.ABORTED)
        finally:
            self._run = None
            self._task = None

    def _gate(self, state: _Run) -> OutcomeKind | None:
        """Before every model call: the run's caps, then the meter's budgets; a call let through is counted."""
        if self._config.caps.refuses_call(state.calls, state.usage.context_tokens):
            log.warning("run %s reached its cap (%d model calls, %d tokens)", state.run_id, state.calls, state.usage.context_tokens)
            state.capped = "model_calls" if state.calls >= self._config.caps.max_model_calls else "tokens"
            return OutcomeKind.RUN_BUDGET_EXCEEDED
        refused = self._meter.refusal() if self._meter is not None else None
        if refused is None:
            state.calls += 1
        return refused

    def _charged(self, usage: Usage, model: str, summary: bool) -> None:
        if self._meter is not None:
            self._meter.charged(usage, model, summary)

    async def _loop(self, state: _Run) -> RunOutcome:
        self._attempts.gate = lambda: self._gate(state)
        self._attempts.charged = self._charged
        self._emit(RunStart(run_id=state.run_id))
        if self.session.last_model() != self._provider.model:
            self.session.append_model_change(self._provider.model)
        while True:
            self._deliver(state)
            state.usage += await self._compactor.maybe_compact(state.run_id)
            self._deliver(state)
            state.turn += 1
            self._emit(TurnStart(run_id=state.run_id, turn=state.turn))
            response = await self._call(state)
            state.usage += response.usage
            self.session.append_message(
                {"role": "assistant", "content": response.content}, usage=response.usage.to_json(),
                stop_reason=response.stop_reason, **(self._meter.tags() if self._meter is not None else {}),
            )
            self.session.sync()
            if response.stop_reason == "refusal":
                self._turn_end(state, response, 0)
                raise RunFailed(OutcomeKind.MODEL_FAILED)
            if said := text_of(response.content).strip():
                state.words.append(said)
            calls = tool_uses(response.content)
            if calls and self._config.caps.refuses_tools(state.tool_calls, len(calls)):
                log.warning("run %s reached its cap of %d tool calls", state.run_id, self._config.caps.max_tool_calls)
                state.capped = "tool_calls"
                self._close_orphans(CAPPED_RESULT)
                self._turn_end(state, response, 0)
                raise RunFailed(OutcomeKind.RUN_BUDGET_EXCEEDED)
            if calls:
                state.tool_calls += len(calls)
                results = await run_batch(calls, self._tools.usable(state.tainted), self._clock, self._tool_hooks(state))
                state.tainted = state.tainted or self._tools.taints(calls)
                self.session.append_message({"role": "user", "content": results})
                self.session.sync()
                self._turn_end(state, response, len(calls))
                continue
            self._turn_end(state, response, 0)
            state.text = text_of(response.content)
            if self._queue:
                continue  # a steer arrived while the answer streamed: answer the burst once
            if not state.text.strip():
                raise RunFailed(OutcomeKind.RESPONSE_MISSING)
            return self._settle(state, OutcomeKind.OK)

    def _deliver(self, state: _Run) -> None:
        """Persist every queued message as one user turn (written before the model call; synced off the loop)."""
        if not self._queue:
            return
        queued, self._queue = self._queue, []
        blocks: list[Block] = [block for message in queued for block in message]
        self.session.append_message({"role": "user", "content": blocks})
        self.session.sync()
        steered = len(queued) - (0 if state.delivered_first else 1)
        state.delivered_first = True
        if steered > 0:
            state.steered += steered
            self._emit(SteerDelivered(run_id=state.run_id, count=steered))

    def _settle(self, state: _Run, kind: OutcomeKind) -> RunOutcome:
        if self._queue:  # undelivered steers stay in the transcript for the next run
            self._deliver(state)
        text = state.text if kind is OutcomeKind.OK else ""
        if kind is OutcomeKind.RUN_BUDGET_EXCEEDED:
            text = "\n\n".join(state.words)  # the words written so far go to the room
            METER.count(RUN_CAPS.of(state.capped or "other", "yes" if text.strip() else "no"))
        outcome = RunOutcome(
            kind=kind, run_id=state.run_id, text=text, usage=state.usage, turns=state.turn, steered=state.steered,
            abort_reason=(self._abort_reason or "aborted") if kind is OutcomeKind.ABORTED else None,
        )
        data: dict[str, object] = {
            "run_id": state.run_id,
            "outcome": kind.value,
            "usage": state.usage.to_json(),
            "turns": state.turn,
            "steered": state.steered,
        }
        if outcome.abort_reason is not None:
            data["reason"] = outcome.abort_reason
        self.session.append_custom("run_end", data)
        self.session.sync()
        self._run = None
        log.info("run %s settled: %s after %d turns", state.run_id, kind.value, state.turn)
        self._emit(RunEnd(run_id=state.run_id, outcome=outcome))
        return outcome

    def _close_orphans(self, why: str = ABORTED_RESULT) -> None:
        """Give every unanswered tool call of the leaf an error result (after an abort, or past the cap)."""
        path = self.session.path_to_leaf()
        last = next((e for e in reversed(path) if e["type"] == "message"), None)
        if last is None or last["message"]["role"] != "assistant":
            return
        calls = tool_uses(last["message"]["content"])
        if calls:
            results = [
                {"type": "tool_result", "tool_use_id": c["id"], "content": why, "is_error": True}
                for c in calls
            ]
            self.session.append_message({"role": "user", "content": results})

    # -- model calls -------------------------------------------------------------

    async def _call(self, state: _Run) -> ModelResponse:
        def request() -> ModelRequest:
            plain = ModelRequest(
                system=self._system, messages=self.session.messages(), tools=self._tools.specs(state.tainted),
                max_tokens=self._config.max_tokens,
            )
            if self._meter is None:
                return plain
            prefix_ttl, cache_ttl = self._meter.lifetimes()
            return replace(plain, prefix_ttl=prefix_ttl, cache_ttl=cache_ttl)

        async def overflow() -> bool:  # compact once, then the call is tried again
            done = await self._compactor.compact(state.run_id, "overflow")
            state.usage += done.usage
            if done.ok:
                self._deliver(state)
            return done.ok

        return await self._attempts.complete(state.run_id, request, self._on_signal(state), on_overflow=overflow)

    # -- events ----------------------------------------------------------------

    def _on_signal(self, state: _Run) -> Callable[[Signal], None]:
        def on_signal(signal: Signal) -> None:
            if signal.kind == "text":
                self._emit(TextDelta(run_id=state.run_id, turn=state.turn, text=signal.text))
            else:
                self._emit(StreamProgress(run_id=state.run_id, what=signal.kind))

        return on_signal

    def _tool_hooks(self, state: _Run) -> ToolCallHooks:
        rid = state.run_id
        return ToolCallHooks(
            started=lambda cid, name, subject: self._emit(ToolStart(run_id=rid, call_id=cid, name=name, subject=subject)),
            updated=lambda cid, name: self._emit(ToolUpdate(run_id=rid, call_id=cid, name=name)),
            ended=lambda cid, name, err: self._emit(
                ToolEnd(run_id=rid, call_id=cid, name=name, is_error=err)
            ),
        )

    def _turn_end(self, state: _Run, response: ModelResponse, calls: int) -> None:
        self._emit(
            TurnEnd(run_id=state.run_id, turn=state.turn, stop_reason=response.stop_reason, tool_calls=calls)
        )

    def _emit(self, event: AgentEvent) -> None:
        self._last_event_at = self._clock.boottime()
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:
                log.exception("agent event subscriber failed on %s", type(event).__name__)
