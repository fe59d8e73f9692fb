"""The retry schedule, pure: 2 s, 4 s, 8 s, at most three retries, server waits ≤ 60 s."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When to retry a transient provider failure, and after how long.

    The runtime is the only retry owner: the SDK client runs with
    ``max_retries=0``.
    """

    base_delay: float = 2.0
    max_retries: int = 3
    max_server_delay: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number ``attempt`` (1-based), or None to give up.

        A server ``retry-after`` replaces the backoff when it is longer;
        one beyond ``max_server_delay`` means give up now rather than sleep.
        """
        if attempt > self.max_retries:
            return None
        backoff = self.base_delay * 2 ** (attempt - 1)
        if retry_after is None:
            return backoff
        if retry_after > self.max_server_delay:
            return None
        return max(backoff, retry_after)
