"""How a run ends: the classified outcome the captain maps to failure codes, and token usage (pure records)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class OutcomeKind(enum.StrEnum):
    """The terminal state of a run.

    ``OK`` carries the final answer's text. The others are failures the
    captain maps to its codes (``captain_usage_limit_reached`` …); provider
    error text is never carried here, only in the session tree.
    """

    OK = "ok"
    USAGE_LIMIT = "usage_limit"
    MODEL_FAILED = "model_failed"
    RESPONSE_MISSING = "response_missing"
    ABORTED = "aborted"
    BUDGET_EXHAUSTED = "budget_exhausted"  # a day budget was spent: the call was never made
    RUN_BUDGET_EXCEEDED = "run_budget_exceeded"  # a per-run cap was reached; ``text`` holds the words so far


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts as the provider bills them (input is the uncached remainder).

    ``cache_write`` counts every token written to the prompt cache;
    ``cache_write_1h`` is the part of it written with the 1-hour lifetime
    (billed 2x input, the rest 1.25x).
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            cache_write_1h=self.cache_write_1h + other.cache_write_1h,
        )

    @property
    def context_tokens(self) -> int:
        """Tokens the request and its answer occupy in the context window."""
        return self.input + self.output + self.cache_read + self.cache_write

    def to_json(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cache_write_1h": self.cache_write_1h,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage:
        return cls(
            input=int(data.get("input", 0)),
            output=int(data.get("output", 0)),
            cache_read=int(data.get("cache_read", 0)),
            cache_write=int(data.get("cache_write", 0)),
            cache_write_1h=int(data.get("cache_write_1h", 0)),
        )


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """What :meth:`Agent.run` returns once the (possibly steered) run settles.

    ``text`` is the final answer for ``OK``, and the words the run wrote
    before it was stopped for ``RUN_BUDGET_EXCEEDED`` (empty for the others). ``steered``
    counts the messages absorbed into this run through :meth:`Agent.steer`.
    ``usage`` sums every model call of the run, compaction included.
    ``abort_reason`` is the reason given to :meth:`Agent.abort` (``stalled``,
    ``cancelled`` …) when the run was aborted.
    """

    kind: OutcomeKind
    run_id: str
    text: str = ""
    usage: Usage = Usage()
    turns: int = 0
    steered: int = 0
    abort_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.OK
