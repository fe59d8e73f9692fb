"""Driving compaction: when to compact, the summary call, and the new session file it starts.

The planning is pure (:mod:`service.agent.compaction`); this module runs it
against the live session tree. A written compaction continues the tree in a
new file (:meth:`~service.agent.session.SessionTree.continue_with`), so the
old entries leave memory and the current file stays bounded.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from service.agent import compaction
from service.agent.attempts import Attempts, RunFailed
from service.agent.content import text_of
from service.agent.events import AgentEvent, CompactionEnd, CompactionStart, StreamProgress
from service.agent.model import ModelRequest, Signal
from service.agent.outcome import Usage
from service.agent.session import SessionTree

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compacted:
    """What one compaction did: whether an entry was written, and what the summary call cost."""

    ok: bool
    usage: Usage


class Compactor:
    """Compacts one session tree through the run's :class:`Attempts`."""

    def __init__(
        self,
        *,
        session: SessionTree,
        attempts: Attempts,
        emit: Callable[[AgentEvent], None],
        limit_tokens: int,
        keep_recent_tokens: int,
        summary_max_tokens: int,
    ) -> None:
        self._session = session
        self._attempts = attempts
        self._emit = emit
        self._limit = limit_tokens
        self._keep = keep_recent_tokens
        self._summary_max_tokens = summary_max_tokens

    async def maybe_compact(self, run_id: str) -> Usage:
        """Compact when the context exceeds the limit; a failed threshold compaction is not fatal."""
        if compaction.context_tokens(self._session.path_to_leaf()) <= self._limit:
            return Usage()
        with contextlib.suppress(RunFailed):
            return (await self.compact(run_id, "threshold")).usage
        return Usage()

    async def compact(self, run_id: str, reason: str) -> Compacted:
        """Summarise older entries and continue the tree in a new file; raises :class:`RunFailed`."""
        path = self._session.path_to_leaf()
        plan = compaction.plan(path, self._keep)
        tokens_before = compaction.context_tokens(path)
        self._emit(CompactionStart(run_id=run_id, reason=reason))
        ok = False
        usage = Usage()
        try:
            if plan is not None:
                prompt = compaction.summary_prompt(plan)
                response = await self._attempts.complete(
                    run_id,
                    lambda: ModelRequest(
                        system=compaction.SUMMARY_SYSTEM, messages=[prompt], max_tokens=self._summary_max_tokens,
                        summary=True,
                    ),
                    self._signal(run_id),
                )
                usage = response.usage
                summary = text_of(response.content).strip()
                if summary:
                    self._session.continue_with(
                        summary=summary,
                        first_kept_id=plan.first_kept_id,
                        tokens_before=plan.tokens_before,
                        usage=response.usage.to_json(),
                    )
                    ok = True
        finally:
            self._emit(CompactionEnd(run_id=run_id, reason=reason, ok=ok, tokens_before=tokens_before))
        log.info("compaction (%s): ok=%s tokens_before=%d", reason, ok, tokens_before)
        return Compacted(ok, usage)

    def _signal(self, run_id: str) -> Callable[[Signal], None]:
        def on_signal(signal: Signal) -> None:  # summary text is not the answer: no TextDelta
            self._emit(StreamProgress(run_id=run_id, what=f"compaction:{signal.kind}"))

        return on_signal
