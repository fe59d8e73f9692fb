"""The built-in offline model for demo mode (``scripts/run --demo``): no key, no network.

:class:`DemoProvider` is a :class:`~service.agent.model.Provider` that never
calls out: a scripted model that reads the trigger message, picks a plan by
keywords (:func:`plan_for`) and drives the real agent runtime through it, one
tool call per model call, so the real tools run against the real hosts:

* ``screenshot`` (or ``page``, ``browser``): ``browser_screenshot`` of the
  demo page (:data:`DEMO_URL`), which the browser host's policy proxy serves
  itself in demo mode only (``hosts/browser/demo_site.py``);
* ``sequence`` (or ``flow``): ``draw_sequence_diagram`` of a picture's trip
  through the tree, drawn by the tldraw host;
* ``diagram`` (or ``draw``, ``schema``): ``draw_er_diagram`` of lanes, turns
  and pictures, drawn by the tldraw host;
* ``long`` (or ``task``, ``slow``): ``send_text_update``, then a screenshot of
  the demo's slow page, long enough for the bridge's tool-activity card;
* anything else: :data:`DEMO_REPLY`, which says what to ask for.

Every reply says it is a demo, and names where each picture was written
(the bridge attaches it where there is a Discord body; ``clankiectl say`` has
none). It bills nothing (usage is all zeros). The settings refuse demo mode
when a real ``ANTHROPIC_API_KEY`` is configured, so it can never stand in for
one.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clankie.artifacts import ArtifactError, parse_ref
from service.agent.content import Block, Message
from service.agent.model import ModelRequest, ModelResponse, Signal
from service.agent.outcome import Usage

DEMO_MODEL = "clankie-demo"
DEMO_HOST = "demo.clankie.invalid"  # hosts/browser/demo_site.py serves it (the service may not import hosts/)
DEMO_URL = f"http://{DEMO_HOST}/"
DEMO_LONG_URL = f"http://{DEMO_HOST}/long"
DEMO_MARK = "This is a demo"
"""Every demo reply starts with it."""
DEMO_REPLY = (
    "Hi! This is a demo: I'm running on the built-in offline model, so this is a canned answer "
    "and nothing you say leaves this machine. Ask me for a screenshot, a diagram, a sequence diagram "
    "or a long task to see the real hosts at work. Set ANTHROPIC_API_KEY and run ./scripts/run "
    "without --demo to talk to the real me."
)
TEXT_UPDATE = (
    "This is a demo: a long task. I'm off to photograph the demo's slow page; "
    "this note is a text update, and the card below shows what I'm doing."
)
NO_ROOM = (
    "my text update had no Discord room to go to (a `clankiectl say` turn has none; run the demo against the "
    "loopback stand-in, python -m clankie.testing.fake_discord, to see it and the tool card)"
)
SUMMARY = "This is a demo conversation with the built-in offline model."
_REF = re.compile(r"\((sha256:[^)\s]+)\)")

ER_SPEC: dict[str, Any] = {
    "title": "This is a demo: what Clankie keeps",
    "entities": [
        {"name": "Room", "fields": [{"name": "channel_id", "type": "snowflake", "key": "pk"},
                                    {"name": "guild_id", "type": "snowflake"}]},
        {"name": "Lane", "fields": [{"name": "lane_key", "type": "text", "key": "pk"},
                                    {"name": "channel_id", "type": "snowflake", "key": "fk"}]},
        {"name": "Turn", "fields": [{"name": "delivery_id", "type": "text", "key": "pk"},
                                    {"name": "lane_key", "type": "text", "key": "fk"},
                                    {"name": "outcome", "type": "text"}]},
        {"name": "Picture", "fields": [{"name": "sha256", "type": "hex", "key": "pk"},
                                       {"name": "delivery_id", "type": "text", "key": "fk"}]},
    ],
    "relations": [
        {"from": "Room", "to": "Lane", "cardinality": "one_to_one", "label": "one durable lane"},
        {"from": "Lane", "to": "Turn", "cardinality": "one_to_many", "label": "runs"},
        {"from": "Turn", "to": "Picture", "cardinality": "one_to_many", "label": "makes"},
    ],
}
SEQUENCE_SPEC: dict[str, Any] = {
    "title": "This is a demo: a picture's trip through the tree",
    "participants": [{"name": "Discord"}, {"name": "bridge"}, {"name": "service"}, {"name": "tldraw host"}],
    "messages": [
        {"from": "Discord", "to": "bridge", "text": "draw me a sequence diagram"},
        {"from": "bridge", "to": "service", "text": "turn"},
        {"from": "service", "to": "tldraw host", "text": "draw_sequence_diagram"},
        {"from": "tldraw host", "to": "service", "text": "ref (PNG under the root)", "kind": "reply"},
        {"from": "service", "to": "bridge", "text": "words + ref", "kind": "reply"},
        {"from": "bridge", "to": "Discord", "text": "one message, picture attached", "kind": "reply"},
    ],
}


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call of a plan, and what the reply says when it worked."""

    tool: str
    args: dict[str, Any]
    done: str  # what the reply says when the call worked


SCREENSHOT = Step("browser_screenshot", {"url": DEMO_URL},
                  "here is a screenshot of the demo page, taken by the real headless Chromium in the browser host")
ER = Step("draw_er_diagram", ER_SPEC, "here is an entity-relationship diagram, drawn by the real tldraw host")
SEQUENCE = Step("draw_sequence_diagram", SEQUENCE_SPEC,
                "here is a sequence diagram of a picture's trip through the tree, drawn by the real tldraw host")
LONG: tuple[Step, ...] = (
    Step("send_text_update", {"text": TEXT_UPDATE}, "I posted a text update on the way, then worked long enough for the tool card"),
    Step("browser_screenshot", {"url": DEMO_LONG_URL},
         "the long task is done: here is the demo's slow page, which took a few seconds to load"),
)
PLANS: tuple[tuple[tuple[str, ...], tuple[Step, ...]], ...] = (
    (("long", "task", "slow"), LONG),
    (("screenshot", "page", "browser"), (SCREENSHOT,)),
    (("sequence", "flow"), (SEQUENCE,)),
    (("diagram", "draw", "schema"), (ER,)),
)
"""Keywords and the plan they choose; the first row with a keyword in the message wins."""


def plan_for(text: str) -> tuple[Step, ...]:
    """The plan a message asks for (by keyword, case-insensitive), or no steps: the canned answer."""
    words = set(re.findall(r"[a-z]+", text.lower()))
    for keywords, steps in PLANS:
        if words.intersection(keywords):
            return steps
    return ()


def trigger_text(message: Message) -> str:
    """What the person said: the JSON string after the last ``Trigger message from`` line, else the whole text."""
    text = "\n".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Trigger message from") and i + 1 < len(lines):
            try:
                said = json.loads(lines[i + 1])
            except ValueError:
                break
            return said if isinstance(said, str) else text
    return text


def _is_trigger(message: Message) -> bool:
    blocks = message["content"] if isinstance(message.get("content"), list) else []
    return message.get("role") == "user" and any(b.get("type") == "text" for b in blocks) and not any(
        b.get("type") == "tool_result" for b in blocks)


def _result_text(result: Block) -> str:
    content = result.get("content", "")
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


class DemoProvider:
    """A scripted offline model: one plan per trigger message, one tool call per model call, then the reply."""

    def __init__(self, attachment_root: Path | None = None) -> None:
        self.attachment_root = attachment_root  # where the hosts write pictures: the reply names the file

    @property
    def model(self) -> str:
        return DEMO_MODEL

    @property
    def server(self) -> tuple[str, int] | None:
        return None  # it calls nowhere

    async def complete(self, request: ModelRequest, on_signal: Callable[[Signal], None]) -> ModelResponse:
        if request.summary:
            return self._text(SUMMARY, on_signal)
        messages = request.messages
        start = next((i for i in range(len(messages) - 1, -1, -1) if _is_trigger(messages[i])), None)
        if start is None:
            return self._text(DEMO_REPLY, on_signal)
        steps = plan_for(trigger_text(messages[start]))
        since = messages[start + 1:]
        taken = sum(1 for m in since if m.get("role") == "assistant")
        if taken < len(steps):
            step = steps[taken]
            on_signal(Signal(kind="message_start"))
            call = {"type": "tool_use", "id": f"toolu_demo_{uuid.uuid4().hex[:16]}", "name": step.tool,
                    "input": step.args}
            on_signal(Signal(kind="message_stop"))
            return ModelResponse(content=[call], stop_reason="tool_use", usage=Usage(), model=DEMO_MODEL)
        if not steps:
            return self._text(DEMO_REPLY, on_signal)
        results = [b for m in since if m.get("role") == "user" for b in m["content"] if b.get("type") == "tool_result"]
        return self._text(self.reply(steps, results), on_signal)

    def reply(self, steps: tuple[Step, ...], results: list[Block]) -> str:
        """The words after the plan ran: per step, what it made (and where) or what the host said instead."""
        parts = []
        for step, result in zip(steps, results, strict=False):
            said = _result_text(result)
            if result.get("is_error") and step.tool == "send_text_update":
                parts.append(NO_ROOM)
                continue
            if result.get("is_error"):
                parts.append(f"{step.tool} did not work out: {said[:300]}")
                continue
            where = self._where(said)
            parts.append(step.done + (f" (written to {where})" if where else ""))
        body = "; ".join(parts) if parts else "nothing ran"
        return f"{DEMO_MARK} (the built-in offline model): {body}. Set ANTHROPIC_API_KEY and run without --demo for the real me."

    def _where(self, said: str) -> str | None:
        match = _REF.search(said)
        if match is None or self.attachment_root is None:
            return None
        try:
            digest, sub, ext = parse_ref(match.group(1))
        except ArtifactError:
            return None
        return str(self.attachment_root / sub / f"{digest}.{ext}")

    @staticmethod
    def _text(text: str, on_signal: Callable[[Signal], None]) -> ModelResponse:
        on_signal(Signal(kind="text", text=text))
        return ModelResponse(content=[{"type": "text", "text": text}], stop_reason="end_turn",
                             usage=Usage(), model=DEMO_MODEL)

    async def aclose(self) -> None:
        return None
