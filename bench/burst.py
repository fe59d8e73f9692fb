"""Bench: a burst of messages in one room, durable lanes vs one-shot-per-message, side by side.

What a "10 s run" is here (ADR 0118): a turn that does work. The model's
first call asks for a screenshot of a bracket page; the browser host takes
about 10 s to answer; the model's second call writes the reply. Each turn is
therefore two model calls in *both* modes. The burst's later messages arrive
2–6 s apart while the screenshot is being taken:

* ``oneshot`` (``captain_durable=False``, the pre-ADR-0118 shape): every
  message runs its own cold one-shot turn (backlog included), concurrently.
* ``durable`` (``captain_durable=True``): the first message owns the run; the
  later ones are steered and delivered together with the tool result, so the
  second model call answers all of them at once.

Everything is the real service in-process on its own state dir: the real
captain tool path (``browser_screenshot`` → a loopback browser host on the
real ``browser.sock`` that sleeps, writes a real artifact and returns it),
the real Anthropic SDK and the real provider (same prompt caching in both
modes) against the loopback fake, and a client playing the bridge over a
live channel (history = the last 10 messages before the trigger).

Prompt size resembles the seed's ~16,600 input tokens per one-shot call: the
captain's system prompt is padded with a bench-local character sheet (the
seed loaded a persona; the same pad in both modes), plus the real tool
schemas and a 10-message backlog of ordinary chat. The screenshot is a small
noisy PNG so the fake tokenizer (4 chars of JSON per token) charges it about
what the API charges a screenshot (~1,000 tokens). The fake caches only
prefixes of ≥ 1,024 tokens, like the API.

Lanes: ``cold`` — the burst is the first thing in the room since start; in
one-shot mode the prompt cache is cold too. ``warm`` — one earlier exchange
in the room (durable: the lane is live; one-shot: the prompt cache holds the
system prompt and tools); only the burst's own tokens are counted.

Input tokens come from the usage the runtime persisted in the session trees.
``raw`` = uncached + cache read + cache write (every input token the model
read); ``billed`` = uncached + 0.1 × cache read + 1.25 × cache write.

Run: ``.venv/bin/python bench/burst.py [--scale 1.0]`` (``--scale`` shrinks
every delay, keeping the order). The last line is for the burst of 3.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PIL import Image

from clankie import artifacts, ipc
from clankie import settings as settings_mod
from clankie.paths import socket_path
from clankie.protocol import Artifact, HistoryMessage, HistoryReply, HistoryRequest, Record, ScreenshotRequest
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_anthropic import FakeAnthropic
from service.app import ServiceApp
from service.captain.lanes import prompt as prompt_mod
from tests.service.captain.harness import FakeBridge, msg

TOOL_SECONDS = 10.0
ANSWER_SECONDS = 1.5
BURSTS = {3: [0.0, 4.0, 8.0], 5: [0.0, 2.0, 4.5, 6.5, 9.0]}
TEXTS = [
    "clankie can you check the start.gg bracket for tonight's deadlock lobby",
    "it's the one from the weekly, not the open",
    "also did they move the start time?",
    "i think it said 8 but someone said 9",
    "anyone else seeing the lobby close on them",
]
WARMUP = "clankie you around?"
HEADER = "Channel conversation (untrusted):"
MODES = ("oneshot", "durable")
LANES = ("cold", "warm")
CACHE_MIN_TOKENS = 1024
PERSONA_LINES = 495
"""Lines of the bench-local character sheet; sized so a one-shot call is ~16,600 input tokens."""


def persona() -> str:
    rng = random.Random(118)
    topics = ["Deadlock", "start.gg brackets", "lobby timers", "patch notes", "scrims", "the weekly", "hero drafts"]
    moods = ["dry", "warm", "curious", "blunt", "patient", "playful"]
    lines = ["# Character sheet (bench-local stand-in for the seed's persona files)"]
    for i in range(PERSONA_LINES):
        lines.append(
            f"- Note {i}: when people talk about {rng.choice(topics)}, he is {rng.choice(moods)}; "
            f"he keeps it to a sentence or two and never repeats an opener."
        )
    return "\n".join(lines)


def backlog() -> list[HistoryMessage]:
    chat = [
        "anyone up for deadlock tonight",
        "yeah after 8, need to finish work first",
        "the weekly bracket is up on start.gg btw",
        "did they fix the lobby timer thing from last week? it kept resetting before anyone could lock in",
        "no idea, patch notes didn't mention it",
        "we got kicked twice on sunday, super annoying",
        "i'll bring the usual stack",
        "can someone ping the organiser about check-in",
        "check-in opens 30 min before start i think",
        "cool see you all there",
    ]
    return [HistoryMessage(id=f"h{i}", author_id=str(100 + i % 4), text=t, at=1_799_999_000.0 + 30 * i) for i, t in enumerate(chat)]


def screenshot_png() -> bytes:
    rng = random.Random(7)
    img = Image.new("RGB", (36, 36))
    img.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(36 * 36)])
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


class BurstModel(FakeAnthropic):
    """The fake model's behaviour by state, not by a FIFO script (one-shot runs overlap): tool first, then answer."""

    def __init__(self, scale: float) -> None:
        super().__init__(cache_min_tokens=CACHE_MIN_TOKENS)
        self.scale = scale

    def _default(self, body: dict[str, Any]) -> fa.Scenario:
        last = body["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
        if any(b.get("type") == "tool_result" for b in blocks):
            answer = (
                "Bracket's up: weekly, round one at 21:00 CET (they pushed it an hour), check-in closes 20:45. "
                "The lobby closing on you is the host re-sync bug, not your client."
            )
            return fa.text(answer, delay=self.scale * ANSWER_SECONDS / (len(answer) // 12 + 8))
        if any(b.get("text", "").rstrip().endswith(WARMUP) for b in blocks):  # the trigger, not the backlog
            return fa.text("yeah, I'm around.")
        tool = next(t["name"] for t in body["tools"] if "screenshot" in t["name"])
        return fa.tool_use((tool, {"url": "https://start.gg/tournament/deadlock-weekly/bracket"}))


class ChannelBridge(FakeBridge):
    """Plays the bridge over a live channel: history is the last N messages before the trigger, as Discord returns it."""

    def __init__(self, messages: list[HistoryMessage]) -> None:
        super().__init__(history=[])
        self.channel = list(messages)

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
        if result.outcome.visible:  # a settled turn posts its reply into the channel
            self.channel.append(HistoryMessage(id=f"r-{message_id}", author_id="999", is_self=True, text=result.text, at=at + 10))
        return result.outcome


async def browser_host(path: Path, root: Path, seconds: float) -> ipc.Server:
    """A loopback browser host on the real socket: a screenshot takes ``seconds`` and yields a real artifact."""
    png = screenshot_png()

    async def handle(conn: ipc.Connection, method: str, params: Record) -> Record:
        assert method == "screenshot" and isinstance(params, ScreenshotRequest)
        await asyncio.sleep(seconds)
        ref = artifacts.write_artifact(root, "browser", png, "png")
        return Artifact(ref=ref, sha256=ref.split(":")[1], size=len(png), mime="image/png")

    return await ipc.serve(path, "browser", handle)


@dataclass
class Outcome:
    mode: str
    lane: str
    size: int
    replies: int
    absorbed: int
    model_requests: int
    raw: int
    billed: float
    first_call_raw: int
    warm_backlog_chars: int
    seconds: float


def _usage(state: Path) -> tuple[int, float, list[int]]:
    raw, billed, per_call = 0, 0.0, []
    for tree in sorted((state / "captain").rglob("*.jsonl")):
        if tree.parent.name == "lanes" or tree.name == "evidence.jsonl":
            continue
        for line in tree.read_text().splitlines():
            entry = json.loads(line)
            usage = entry.get("usage") if entry.get("type") == "message" else None
            if usage:
                call = usage["input"] + usage["cache_read"] + usage["cache_write"]
                per_call.append(call)
                raw += call
                billed += usage["input"] + 0.1 * usage["cache_read"] + 1.25 * usage["cache_write"]
    return raw, billed, per_call


def _warm_backlog(requests: list[dict[str, Any]], warm_triggers: list[str]) -> int:
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
                if not any(prompt_mod.quoted(t) in text.splitlines() for t in warm_triggers):  # the trigger's own line
                    continue
                seen.add(text)
                if HEADER in text:
                    chars += text.index("Trigger message from") - text.index(HEADER)
    return chars


async def scenario(mode: str, lane: str, size: int, scale: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="ckb-") as tmp:
        state, rt = Path(tmp) / "state", Path(tmp) / "rt"
        rt.mkdir(mode=0o700)
        async with BurstModel(scale) as fake:
            env = {
                "CLANKIE_STATE": str(state),
                "CLANKIE_RUNTIME_DIR": str(rt),
                "HOME": str(state),
                "ANTHROPIC_API_KEY": "sk-bench",
                "ANTHROPIC_BASE_URL": fake.base_url,
            }
            settings = settings_mod.load(env, captain_durable=(mode == "durable"))
            host = await browser_host(socket_path(rt, "browser"), settings.attachment_root, TOOL_SECONDS * scale)
            app = ServiceApp(settings)
            await app.start()
            try:
                bridge = ChannelBridge(backlog())
                await bridge.connect(app)
                if lane == "warm":  # he already spoke in this room a minute ago
                    await bridge.say("w0", WARMUP, 1_799_999_940.0)
                before = _usage(state)
                skip = len(fake.requests)
                loop = asyncio.get_running_loop()
                start = loop.time()

                async def send(i: int, at: float) -> str:
                    await asyncio.sleep(max(0.0, start + at * scale - loop.time()))
                    return await bridge.say(f"b{size}-{i}", TEXTS[i], 1_800_000_000.0 + at)

                outcomes = await asyncio.gather(*(send(i, at) for i, at in enumerate(BURSTS[size])))
                seconds = (loop.time() - start) / scale
            finally:
                await app.close()
                await host.close()
            raw, billed, calls = _usage(state)
            live_lane = mode == "durable"
            warm_triggers = [WARMUP, *TEXTS[:size]] if lane == "warm" else TEXTS[1:size]
            return Outcome(
                mode=mode,
                lane=lane,
                size=size,
                replies=outcomes.count("settled"),
                absorbed=outcomes.count("absorbed"),
                model_requests=len(fake.requests) - skip,
                raw=raw - before[0],
                billed=billed - before[1],
                first_call_raw=calls[len(before[2])] if len(calls) > len(before[2]) else 0,
                warm_backlog_chars=_warm_backlog(fake.requests[skip:], warm_triggers[1:] if lane == "warm" else warm_triggers)
                if live_lane
                else 0,
                seconds=seconds,
            )


async def main(scale: float) -> None:
    logging.basicConfig(level=logging.ERROR)
    prompt_mod.SYSTEM_PROMPT = prompt_mod.SYSTEM_PROMPT + "\n\n" + persona()  # same pad in both modes
    combos = [(mode, lane, size) for size in BURSTS for lane in LANES for mode in MODES]
    results = await asyncio.gather(*(scenario(mode, lane, size, scale) for mode, lane, size in combos))
    by = {(r.mode, r.lane, r.size): r for r in results}
    print(f"burst.py: scale={scale:g}; each turn = tool call (~{TOOL_SECONDS:g} s screenshot) + answer;"
          f" cache min {CACHE_MIN_TOKENS} tokens")
    print("raw = every input token read (uncached + cache read + cache write); billed = uncached + 0.1×read + 1.25×write")
    print("input_ratio_vs_oneshot = durable raw input tokens / one-shot raw input tokens, cold lane, burst of 3")
    print()
    print(
        f"{'burst':>5} {'lane':>4} {'mode':>8} {'replies':>7} {'absorbed':>8} {'requests':>8} "
        f"{'1st_call':>8} {'raw_in':>7} {'billed_in':>9} {'raw×':>5} {'billed×':>7} {'warm_backlog':>12} {'secs':>5}"
    )
    for size in BURSTS:
        for lane in LANES:
            o = by[("oneshot", lane, size)]
            for mode in MODES:
                r = by[(mode, lane, size)]
                print(
                    f"{size:>5} {lane:>4} {mode:>8} {r.replies:>7} {r.absorbed:>8} {r.model_requests:>8} "
                    f"{r.first_call_raw:>8} {r.raw:>7} {r.billed:>9.0f} {r.raw / o.raw:>5.2f} {r.billed / o.billed:>7.2f} "
                    f"{r.warm_backlog_chars:>12} {r.seconds:>5.1f}"
                )
    d, o = by[("durable", "cold", 3)], by[("oneshot", "cold", 3)]
    dw, ow = by[("durable", "warm", 3)], by[("oneshot", "warm", 3)]
    warm_backlog = sum(r.warm_backlog_chars for r in results if r.size == 3)
    print(
        f"bench burst: replies={d.replies} model_requests={d.model_requests} "
        f"input_ratio_vs_oneshot={d.raw / o.raw:.2f} warm_backlog_chars={warm_backlog} "
        f"billed_ratio_vs_oneshot={d.billed / o.billed:.2f} "
        f"warm_lane_input_ratio={dw.raw / ow.raw:.2f} warm_lane_billed_ratio={dw.billed / ow.billed:.2f} "
        f"oneshot_model_requests={o.model_requests} oneshot_replies={o.replies}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every delay (keeps the order)")
    asyncio.run(main(parser.parse_args().scale))
