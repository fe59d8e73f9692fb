"""What an agent is configured with: its tunables, the per-run caps, and the meter it asks before every model call.

:class:`RunCaps` bound one run's spend (model calls, tool calls, tokens);
they bound spend, never time. A :class:`Meter` is the caller's (the
captain's) view of money: before every model call the agent asks it whether
a budget is spent (:meth:`Meter.refusal`) and which cache lifetimes to ask
for (:meth:`Meter.lifetimes`), and after every answer tells it what the call
was billed (:meth:`Meter.charged`) and writes :meth:`Meter.tags` beside the
usage in the session tree. See ``docs/spend.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from clankie.settings import Settings
from service.agent.model import CacheTtl
from service.agent.outcome import OutcomeKind, Usage
from service.agent.retention import DAY, Retention
from service.agent.retry import AGENT_RETRY, RetryPolicy


@dataclass(frozen=True, kw_only=True)
class RunCaps:
    """One run's spend bounds: past one the run ends ``RUN_BUDGET_EXCEEDED`` (defaults no honest turn reaches)."""

    max_model_calls: int = 60
    max_tool_calls: int = 150
    max_tokens: int = 4_000_000

    def refuses_call(self, calls: int, tokens: int) -> bool:
        """Whether a run that made ``calls`` model calls billed ``tokens`` may not make another (pure)."""
        return calls >= self.max_model_calls or tokens >= self.max_tokens

    def refuses_tools(self, made: int, asked: int) -> bool:
        """Whether a run that made ``made`` tool calls may not run a batch of ``asked`` more (pure)."""
        return made + asked > self.max_tool_calls


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Tunables of one agent (model window, compaction budget, retry schedule, run caps)."""

    max_tokens: int = 4096
    context_window: int = 200_000
    reserve_tokens: int = 16_384
    keep_recent_tokens: int = 20_000
    summary_max_tokens: int = 2048
    retry: RetryPolicy = AGENT_RETRY
    rate_limit_retries: int = 10
    retention: Retention = field(default_factory=Retention)
    caps: RunCaps = field(default_factory=RunCaps)

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentConfig:
        """The window, compaction budget, retention and run caps from ``CLANKIE_MODEL_CONTEXT_WINDOW`` and friends."""
        return cls(
            context_window=settings.model_context_window,
            reserve_tokens=settings.compaction_reserve_tokens,
            keep_recent_tokens=settings.compaction_keep_tokens,
            rate_limit_retries=settings.model_rate_limit_retries,
            retention=Retention(
                max_age_seconds=settings.session_retention_days * DAY, max_files=settings.session_max_files
            ),
            caps=RunCaps(
                max_model_calls=settings.run_max_model_calls,
                max_tool_calls=settings.run_max_tool_calls,
                max_tokens=settings.run_max_tokens,
            ),
        )


class Meter(Protocol):
    """The caller's spend policy for one agent's model calls (the captain's lane meter)."""

    def refusal(self) -> OutcomeKind | None:
        """Before a model call: ``BUDGET_EXHAUSTED`` when a budget is spent (no request is made), else None."""
        ...

    def lifetimes(self) -> tuple[CacheTtl, CacheTtl]:
        """The cache lifetimes of the next call: (shared prefix, conversation)."""
        ...

    def tags(self) -> dict[str, object]:
        """What to write beside a call's ``usage`` in the session tree (who it was charged to)."""
        ...

    def charged(self, usage: Usage, model: str, summary: bool) -> None:
        """A call was answered and billed ``usage`` (``summary``: a compaction's summary call)."""
        ...
