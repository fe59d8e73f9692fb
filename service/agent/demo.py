"""The built-in offline model for demo mode (``scripts/run --demo``): no key, no network.

:class:`DemoProvider` is a :class:`~service.agent.model.Provider` that never
calls out. Every model call is answered at once with one fixed reply that
says it is a demo, so a newcomer can watch a turn go through the whole tree
(bridge or ``clankiectl say`` → captain → lane → session tree → reply)
before configuring anything. It bills nothing (usage is all zeros) and
offers no tool calls. The settings refuse demo mode when a real
``ANTHROPIC_API_KEY`` is configured, so it can never stand in for one.
"""

from __future__ import annotations

from collections.abc import Callable

from service.agent.model import ModelRequest, ModelResponse, Signal
from service.agent.outcome import Usage

DEMO_MODEL = "clankie-demo"
DEMO_REPLY = (
    "Hi! This is a demo: I'm running on the built-in offline model, so this is a canned answer "
    "and nothing you say leaves this machine. Set ANTHROPIC_API_KEY and run ./scripts/run "
    "without --demo to talk to the real me."
)


class DemoProvider:
    """Answers every call with :data:`DEMO_REPLY`, streamed as one text signal."""

    @property
    def model(self) -> str:
        return DEMO_MODEL

    @property
    def server(self) -> tuple[str, int] | None:
        return None  # it calls nowhere

    async def complete(self, request: ModelRequest, on_signal: Callable[[Signal], None]) -> ModelResponse:
        on_signal(Signal(kind="text", text=DEMO_REPLY))
        return ModelResponse(content=[{"type": "text", "text": DEMO_REPLY}], stop_reason="end_turn",
                             usage=Usage(), model=DEMO_MODEL)

    async def aclose(self) -> None:
        return None
