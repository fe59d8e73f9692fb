"""Pure cores: transcript repair, failure classification, retry schedule, import rule."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from service.agent.failures import FailureKind, classify_status
from service.agent.retry import AGENT_RETRY
from service.agent.transcript import ORPHAN_RESULT, repair

ROOT = Path(__file__).resolve().parents[3]


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def _call(call_id: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "t", "input": {}}]}


def test_repair_gives_orphaned_calls_error_results() -> None:
    """A tool_use with no result gets a synthetic is_error result before the next user text."""
    fixed = repair([_text("user", "go"), _call("a"), _text("user", "next")])
    assert fixed[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "a",
        "content": ORPHAN_RESULT,
        "is_error": True,
    }
    assert fixed[2]["content"][1]["text"] == "next"


def test_repair_merges_same_role_and_drops_stray_results() -> None:
    """Consecutive user messages merge, and a tool_result whose call is gone is dropped."""
    stray = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]}
    fixed = repair([stray, _text("user", "a"), _text("user", "b"), _text("assistant", "c")])
    assert fixed == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        _text("assistant", "c"),
    ]


def test_repair_starts_with_a_user_turn_and_skips_empty_messages() -> None:
    """A transcript that would start with the assistant gets a placeholder user turn; empty content vanishes."""
    fixed = repair([{"role": "user", "content": []}, _text("assistant", "hi")])
    assert [m["role"] for m in fixed] == ["user", "assistant"]


@pytest.mark.parametrize(
    ("status", "error_type", "code", "message", "kind"),
    [
        (429, "rate_limit_error", "enforced_spend_limit_reached", "x", FailureKind.USAGE_LIMIT),
        (429, "rate_limit_error", "contract_spend_limit_reached", "x", FailureKind.USAGE_LIMIT),
        (402, "billing_error", "linked_organization_spend_limit_reached", "x", FailureKind.USAGE_LIMIT),
        (400, "billing_error", None, "x", FailureKind.USAGE_LIMIT),
        (400, "invalid_request_error", None, "You have reached your specified API usage limits.", FailureKind.USAGE_LIMIT),
        (429, "rate_limit_error", None, "Extra usage is required for long context requests", FailureKind.USAGE_LIMIT),
        (400, "invalid_request_error", None, "prompt is too long: 5 tokens > 4 maximum", FailureKind.CONTEXT_OVERFLOW),
        (429, "rate_limit_error", None, "slow down", FailureKind.TRANSIENT),
        (429, "rate_limit_error", "ramp_limit_exceeded", "slow down", FailureKind.TRANSIENT),
        (529, "overloaded_error", None, "Overloaded", FailureKind.TRANSIENT),
        (503, "api_error", None, "x", FailureKind.TRANSIENT),
        (200, "overloaded_error", None, "Overloaded", FailureKind.TRANSIENT),
        (400, "invalid_request_error", None, "bad field", FailureKind.FATAL),
        (401, "authentication_error", None, "bad key", FailureKind.FATAL),
    ],
)
def test_classify_status(status: int, error_type: str, code: str | None, message: str, kind: FailureKind) -> None:
    """Spend codes and billing types win over status; overflow and usage text are recognised; the rest by status."""
    assert classify_status(status, error_type, code, message) is kind


def test_retry_policy_schedule() -> None:
    """Backoff is 2, 4, 8 s for three retries; retry-after up to 60 s is honoured, beyond it the call gives up."""
    policy = AGENT_RETRY
    assert [policy.delay(n, None) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, None]
    assert policy.delay(1, 30.0) == 30.0
    assert policy.delay(3, 1.0) == 8.0
    assert policy.delay(1, 61.0) is None


def test_only_the_provider_imports_anthropic() -> None:
    """No module of the project except service/agent/provider.py imports the anthropic SDK."""
    offenders = []
    for package in ("clankie", "supervisor", "service", "bridge", "hosts"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if any(n == "anthropic" or n.startswith("anthropic.") for n in names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert sorted(set(offenders)) == ["service/agent/provider.py"]
