"""Provider failures and their pure classification.

The provider turns every SDK exception into a :class:`ProviderError` whose
``kind`` says what the runtime should do: retry, compact, or give up with
which outcome. Classification looks at the stable signals first (HTTP status,
``error.type``, ``error.details.error_code``) and at message text last.
"""

from __future__ import annotations

import enum
import re

from clankie.errors import ClankieError

USAGE_LIMIT_CODES = frozenset(
    {
        "enforced_spend_limit_reached",
        "contract_spend_limit_reached",
        "linked_organization_spend_limit_reached",
    }
)
_USAGE_TEXT = re.compile(
    r"usage.?limit|specified api usage limits|quota exceeded|insufficient_quota|billing"
    r"|out of budget|available balance|extra usage is required",
    re.IGNORECASE,
)
_OVERFLOW_TEXT = re.compile(r"prompt is too long|context.?window|too many tokens", re.IGNORECASE)
_TRANSIENT_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


class FailureKind(enum.StrEnum):
    """What a provider failure means for the run."""

    TRANSIENT = "transient"  # overloaded, 5xx, transient 429, connection: retried
    USAGE_LIMIT = "usage_limit"  # spend/usage/billing: never retried
    CONTEXT_OVERFLOW = "context_overflow"  # compact and retry once
    TRUNCATED = "truncated"  # stream ended without message_stop
    FATAL = "fatal"  # anything else (bad request, auth …): not retried


class ProviderError(ClankieError):
    """Raised by a provider when a model call did not produce a complete message.

    ``detail`` is the provider's own text; it is written to the session tree
    and never logged or returned to callers. ``retry_after`` is the server's
    requested wait in seconds, when it sent one; ``rate_limits`` the
    response's ``anthropic-ratelimit-*`` headers.
    """

    def __init__(
        self,
        kind: FailureKind,
        detail: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        error_code: str | None = None,
        retry_after: float | None = None,
        rate_limits: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"provider failure: {kind}")
        self.kind = kind
        self.detail = detail
        self.status = status
        self.error_type = error_type
        self.error_code = error_code
        self.retry_after = retry_after
        self.rate_limits = rate_limits or {}

    @property
    def rate_limited(self) -> bool:
        """A transient 429 ``rate_limit_error`` (a spend limit is not one): the account's pace, not a fault."""
        return self.kind is FailureKind.TRANSIENT and self.status == 429 and self.error_type == "rate_limit_error"


def classify_status(
    status: int, error_type: str | None, error_code: str | None, message: str
) -> FailureKind:
    """Classify an HTTP error (or a mid-stream ``error`` event, status 200).

    Order: spend ``error_code``, then billing type / 402, then context
    overflow, then usage-limit text, then transient status or type.
    """
    if error_code in USAGE_LIMIT_CODES:
        return FailureKind.USAGE_LIMIT
    if error_type == "billing_error" or status == 402:
        return FailureKind.USAGE_LIMIT
    if status in (400, 413) and _OVERFLOW_TEXT.search(message):
        return FailureKind.CONTEXT_OVERFLOW
    if _USAGE_TEXT.search(message):
        return FailureKind.USAGE_LIMIT
    if status in (408, 409, 429) or status >= 500:
        return FailureKind.TRANSIENT
    if status == 200 and (error_type in _TRANSIENT_TYPES or error_type is None):
        return FailureKind.TRANSIENT
    return FailureKind.FATAL
