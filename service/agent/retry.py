"""The agent's retry schedule: 2 s, 4 s, 8 s, at most three retries, server waits ≤ 60 s.

The runtime is the only retry owner: the SDK client runs with ``max_retries=0``.
The schedule is an instance of the one :class:`clankie.backoff.RetryPolicy`.
"""

from __future__ import annotations

from clankie.backoff import RetryPolicy

AGENT_RETRY = RetryPolicy(attempts=4, base=2.0, cap=float("inf"), jitter=False, max_retry_after=60.0, give_up_beyond=True)
"""A server ``retry-after`` beyond 60 s means give up now rather than sleep."""

__all__ = ["AGENT_RETRY", "RetryPolicy"]
