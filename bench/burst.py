"""Bench: a burst of messages in one room, durable lanes vs one-shot-per-message, side by side.

Each scenario boots the real service in-process on its own state dir, the
real Anthropic SDK against the loopback fake, and a client playing the
bridge (10 backlog messages for a cold lane). The first model call of a run
streams for about 10 s; the burst's messages arrive 2–6 s apart inside it.
Durable mode (``captain_durable=True``) steers the later messages into the
live run; one-shot mode (``captain_durable=False``, the pre-ADR-0118 shape)
runs each message alone with the backlog. Durable is measured twice: the
burst opening a cold lane (``durable``, the summary's ``input_ratio_vs_oneshot``)
and the burst reaching a lane already live from an earlier exchange (``warm``,
``input_ratio_warm_lane``; only the burst's own tokens are counted). The
bridge double returns the channel's real last-N messages before each trigger.

Input tokens are read from the session trees the runtime wrote (the fake's
usage, which responds to prompt caching). "prompt" counts every input token
(uncached + cache read + cache write); "billed" weighs cache reads 0.1× and
cache writes 1.25×, as the API bills them. ``warm_backlog_chars`` is the
backlog text carried by turns that reached a lane already live (must be 0).

Run: ``.venv/bin/python bench/burst.py``; the last line is the summary for the burst of 3
(``input_ratio_*`` use billed input; prompt-token ratios are printed above it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clankie import settings as settings_mod  # noqa: E402
from clankie.protocol import HistoryMessage  # noqa: E402
from clankie.testing import fake_anthropic as fa  # noqa: E402
from clankie.testing.fake_anthropic import FakeAnthropic  # noqa: E402
from service.app import ServiceApp  # noqa: E402
from clankie import ipc  # noqa: E402
from clankie.protocol import HistoryReply, HistoryRequest, Record  # noqa: E402
from tests.service.captain.harness import FakeBridge, msg  # noqa: E402

RUN_SECONDS = 10.0
BURSTS = {3: [0.0, 4.0, 8.0], 5: [0.0, 2.0, 4.5, 6.5, 9.0]}
TEXTS = [
    "clankie why did that happen",
    "it's very rude",
    "like the lobby just closed on us",
    "is that a server thing or a timer",
    "anyone else seeing it",
]
HEADER = "Channel conversation (untrusted):"
MODES = ("oneshot", "durable", "warm")
"""oneshot: a cold one-shot run per message; durable: the burst opens a cold lane; warm: the lane is already live."""


def backlog() -> list[HistoryMessage]:
    line = "we queued for the deadlock lobby again and the timer kept resetting before anyone could lock in, "
    return [
        HistoryMessage(id=f"h{i}", author_id=str(100 + i % 4), text=(line * 3)[: 240 + 7 * i], at=1_799_999_000.0 + 30 * i)
        for i in range(10)
    ]


def slow_answer() -> fa.Reply:
    text = "Lobby timers reset when the host's client re-syncs; it's a known issue on their side, not you. " * 2
    events = len(text) // 12 + 8
    return fa.text(text, delay=RUN_SECONDS / events)


class ChannelBridge(FakeBridge):
    """Plays the bridge over a live channel: history is the last N messages before the trigger, as Discord returns it."""

    def __init__(self, backlog: list[HistoryMessage]) -> None:
        super().__init__(history=[])
        self.channel = list(backlog)

    async def handle(self, conn: ipc.Connection, method: str, params: Record) -> Record | None:
        if method != "history":
            return await super().handle(conn, method, params)
        assert isinstance(params, HistoryRequest)
        self.history_calls.append(params)
        ids = [m.id for m in self.channel]
        end = ids.index(params.before_message_id) if params.before_message_id in ids else len(ids)
        return HistoryReply(messages=tuple(self.channel[max(0, end - params.limit) : end]))

    async def say(self, message_id: str, text: str, at: float) -> str:
        self.channel.append(HistoryMessage(id=message_id, author_id="42", text=text, at=at))
        result = await self.submit(msg(message_id, text))
        if result.outcome == "settled":
            self.channel.append(HistoryMessage(id=f"r-{message_id}", author_id="999", is_self=True, text=result.text, at=at + 10))
        return result.outcome


@dataclass
class Outcome:
    mode: str  # one of MODES
    size: int
    replies: int
    absorbed: int
    model_requests: int
    prompt_tokens: int
    billed_tokens: float
    warm_backlog_chars: int
    seconds: float


def _usage(state: Path) -> tuple[int, float]:
    prompt, billed = 0, 0.0
    for tree in (state / "captain").rglob("*.jsonl"):
        if tree.parent.name == "lanes" or tree.name == "evidence.jsonl":
            continue
        for line in tree.read_text().splitlines():
            entry = json.loads(line)
            usage = entry.get("usage") if entry.get("type") == "message" else None
            if usage:
                prompt += usage["input"] + usage["cache_read"] + usage["cache_write"]
                billed += usage["input"] + 0.1 * usage["cache_read"] + 1.25 * usage["cache_write"]
    return prompt, billed


def _warm_backlog(requests: list[dict], warm_triggers: list[str]) -> int:
    """Backlog characters in the user blocks of turns that reached an already live lane."""
    seen: set[str] = set()
    chars = 0
    for body in requests:
        for m in body["messages"]:
            if m["role"] != "user" or isinstance(m["content"], str):
                continue
            for b in m["content"]:
                text = b.get("text", "") if b.get("type") == "text" else ""
                if "Trigger message from" not in text or text in seen:
                    continue
                if not any(text.rstrip().endswith(t) for t in warm_triggers):
                    continue
                seen.add(text)
                if HEADER in text:
                    chars += text.index("Trigger message from") - text.index(HEADER)
    return chars


async def scenario(mode: str, size: int) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="ckb-") as tmp:
        state, rt = Path(tmp) / "state", Path(tmp) / "rt"
        rt.mkdir(mode=0o700)
        async with FakeAnthropic() as fake:
            warmup = [fa.text("hey, I'm around.")] if mode == "warm" else []
            replies = [slow_answer() for _ in range(size)] if mode == "oneshot" else [slow_answer()]
            fake.script(*warmup, *replies, *[fa.text("One answer for all of you: it's the host re-sync bug.") for _ in range(size)])
            env = {
                "CLANKIE_STATE": str(state),
                "CLANKIE_RUNTIME_DIR": str(rt),
                "HOME": str(state),
                "ANTHROPIC_API_KEY": "sk-bench",
                "ANTHROPIC_BASE_URL": fake.base_url,
            }
            settings = settings_mod.load(env, captain_durable=(mode != "oneshot"))
            app = ServiceApp(settings)
            await app.start()
            try:
                bridge = ChannelBridge(backlog())
                await bridge.connect(app)
                if mode == "warm":  # he already spoke in this room a minute ago: the lane is live
                    await bridge.say("w0", "clankie you around?", 1_799_999_940.0)
                before = _usage(state)
                skip = len(fake.requests)
                loop = asyncio.get_running_loop()
                start = loop.time()

                async def send(i: int, at: float) -> str:
                    await asyncio.sleep(max(0.0, start + at - loop.time()))
                    return await bridge.say(f"b{size}-{i}", TEXTS[i], 1_800_000_000.0 + at)

                outcomes = await asyncio.gather(*(send(i, at) for i, at in enumerate(BURSTS[size])))
                seconds = loop.time() - start
            finally:
                await app.close()
            prompt, billed = _usage(state)
            prompt, billed = prompt - before[0], billed - before[1]
            return Outcome(
                mode=mode,
                size=size,
                replies=outcomes.count("settled"),
                absorbed=outcomes.count("absorbed"),
                model_requests=len(fake.requests) - skip,
                prompt_tokens=prompt,
                billed_tokens=billed,
                warm_backlog_chars=_warm_backlog(fake.requests[skip:], TEXTS[1 if mode == "durable" else 0 : size])
                if mode != "oneshot"
                else 0,
                seconds=seconds,
            )


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    results = await asyncio.gather(*(scenario(mode, size) for size in BURSTS for mode in MODES))
    by = {(r.mode, r.size): r for r in results}
    print(f"{'burst':>5} {'mode':>8} {'replies':>7} {'absorbed':>8} {'requests':>8} {'prompt_in':>9} {'billed_in':>9} {'warm_backlog':>12} {'secs':>5}")
    for size in BURSTS:
        for mode in MODES:
            r = by[(mode, size)]
            print(
                f"{size:>5} {mode:>8} {r.replies:>7} {r.absorbed:>8} {r.model_requests:>8} {r.prompt_tokens:>9} "
                f"{r.billed_tokens:>9.0f} {r.warm_backlog_chars:>12} {r.seconds:>5.1f}"
            )
        o = by[("oneshot", size)]
        for mode in ("durable", "warm"):
            d = by[(mode, size)]
            print(
                f"      burst of {size}, {mode} lane vs oneshot: prompt tokens {d.prompt_tokens / o.prompt_tokens:.2f}x, "
                f"billed {d.billed_tokens / o.billed_tokens:.2f}x, requests {d.model_requests}/{o.model_requests}, "
                f"replies {d.replies}/{o.replies}"
            )
    d, w, o = by[("durable", 3)], by[("warm", 3)], by[("oneshot", 3)]
    print(
        f"bench burst: replies={d.replies} model_requests={d.model_requests} "
        f"input_ratio_vs_oneshot={d.billed_tokens / o.billed_tokens:.2f} "
        f"warm_backlog_chars={d.warm_backlog_chars + w.warm_backlog_chars} "
        f"input_ratio_warm_lane={w.billed_tokens / o.billed_tokens:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
