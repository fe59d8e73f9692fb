"""Bench: a day of rooms at their own paces, billed as the API bills it: fixed 5-minute cache vs chosen by pace.

The day (fake clock, 24 h; each room's turns at its pace, in time order):

* ``burst``: five messages 20 s apart, every two hours;
* ``every3`` / ``every8`` / ``every20`` / ``every60``: one turn every 3, 8, 20 and 60 minutes all day;
* ``busy``: a turn a minute for four hours in the afternoon;
* ``quiet``: 24 rooms that speak twice a day each, beside the busy one.

Each mode replays the same day through the real service in-process (its socket, the captain, lanes, the
agent runtime, the real Anthropic SDK and provider) against the loopback fake Anthropic on the same fake
clock, which bills as the API does: 1,024-token minimum, cache entries that live 5 minutes or an hour and
are refreshed by a read, writes billed per breakpoint lifetime. Fake time, so the day takes minutes.

* ``5m``: ``CLANKIE_CACHE_LIFETIME=5m`` (every breakpoint 5 minutes: how Clankie ran before);
* ``pace``: the default, the lifetime chosen per lane by its pace, the shared prefix never shorter;
* ``none``: no ``cache_control`` at all.

Dollars are priced by ``clankie.pricing`` for ``claude-sonnet-4-5`` ($3 in, $15 out, cache read 0.1x,
5-minute write 1.25x, 1-hour write 2x), from the usage the runtime persisted in the session trees.

After the day: a **cold lane in a busy tree**: a new room's first turn (its backlog of 10 messages included),
its input billed against the same input uncached. Then the **budget overshoot**: the day again under a
tree dollar budget of half the pace day's bill, with the 24 quiet rooms speaking at the same second twice;
what was spent past the budget, in units of the dearest single call.

The system prompt is padded with the burst bench's character sheet to the seed's size (~16,600 input tokens
per cold call). Run: ``.venv/bin/python bench/cost.py [--hours 24]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.burst import backlog, persona  # the burst bench's stand-in persona and chat
from clankie import settings as settings_mod
from clankie.jsonl import read_lines
from clankie.pricing import PUBLISHED, price_of
from clankie.testing.clock import FakeClock
from clankie.testing.fake_anthropic import FakeAnthropic
from service.agent.provider import AnthropicProvider
from service.app import ServiceApp
from service.captain.lanes import prompt as prompt_mod
from service.captain.spend.ledger import usd_of
from tests.service.captain.harness import FakeBridge, msg

MODEL = "claude-sonnet-4-5"
CACHE_MIN_TOKENS = 1024
MODES = ("5m", "pace", "none")
QUIET_ROOMS = 24
MIDNIGHT = 57_600.0  # FakeClock(start=MIDNIGHT).wall() is 2027-01-16T00:00:00Z


@dataclass(frozen=True)
class Turn:
    at: float
    room: str


def day(hours: float) -> list[Turn]:
    """Every turn of the day, in time order (rooms are channel ids)."""
    end = hours * 3600
    turns: list[Turn] = []
    for start in range(0, int(end), 7200):
        turns += [Turn(start + 600 + 20 * i, "burst") for i in range(5)]
    for minutes in (3, 8, 20, 60):
        turns += [Turn(float(t), f"every{minutes}") for t in range(30, int(end), minutes * 60)]
    busy_from = min(end, 13 * 3600.0)
    turns += [Turn(busy_from + 60 * i + 7, "busy") for i in range(240) if busy_from + 60 * i + 7 < end]
    for q in range(QUIET_ROOMS):
        turns += [Turn(q * 97.0 + 3600 * 2 + 11, f"quiet{q}"), Turn(q * 113.0 + 3600 * 15 + 13, f"quiet{q}")]
    return sorted((t for t in turns if t.at < end), key=lambda t: (t.at, t.room))


def channel(room: str) -> str:
    """A stable numeric channel id for a room name."""
    return str(int.from_bytes(room.encode()[:8].ljust(8, b"_"), "big") % 10**15 + len(room) * 10**15)


@dataclass
class Bill:
    usd: float = 0.0
    calls: int = 0
    input_tokens: int = 0
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0
    uncached_usd: float = 0.0  # the same calls' input as if nothing were cached
    dearest_call: float = 0.0


def bill(captain: Path, since: dict[Path, int] | None = None) -> tuple[Bill, dict[Path, int]]:
    """What the session trees under ``captain`` record, past the line counts in ``since``."""
    out, seen = Bill(), {}
    price = price_of(PUBLISHED, MODEL)
    for tree in sorted(captain.rglob("*.jsonl")):
        if "rooms" not in tree.parts:
            continue
        lines = read_lines(tree)
        seen[tree] = len(lines)
        for entry in lines[(since or {}).get(tree, 0):]:
            usage = entry.get("usage")
            if entry.get("type") != "message" or not isinstance(usage, dict):
                continue
            cost = usd_of(PUBLISHED, MODEL, usage)
            out.usd += cost
            out.calls += 1
            total_in = usage["input"] + usage["cache_read"] + usage["cache_write"]
            out.input_tokens += total_in
            out.read += usage["cache_read"]
            out.write_1h += usage.get("cache_write_1h", 0)
            out.write_5m += usage["cache_write"] - usage.get("cache_write_1h", 0)
            out.uncached_usd += price.usd(input=total_in, output=usage["output"], cache_read=0, cache_write_5m=0,
                                          cache_write_1h=0)
            out.dearest_call = max(out.dearest_call, cost)
    return out, seen


async def replay(mode: str, turns: list[Turn], root: Path, budget_usd: float = 0.0, crowd: bool = False) -> dict[str, Any]:
    clock = FakeClock(start=MIDNIGHT)  # the replayed day is one UTC day: its budget is not reset half way
    state = root / f"{mode}-{'budget' if budget_usd else 'day'}"
    state.mkdir(parents=True)
    runtime = Path(tempfile.mkdtemp(prefix="cost-", dir="/tmp"))
    env = {"CLANKIE_STATE": str(state), "CLANKIE_RUNTIME_DIR": str(runtime), "HOME": str(state)}
    async with FakeAnthropic(clock=clock, cache_min_tokens=CACHE_MIN_TOKENS) as fake:
        env.update({"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "sk-bench"})
        settings = settings_mod.load(env, model=MODEL, cache_lifetime="5m" if mode == "none" else mode,
                                     budget_day_usd=budget_usd, lanes_max_live=1000)
        provider = AnthropicProvider(api_key="sk-bench", model=MODEL, base_url=fake.base_url, cache=mode != "none")
        app = ServiceApp(settings, clock=clock, provider=provider)
        await app.start()
        bridge = FakeBridge(history=backlog())
        await bridge.connect(app)
        started = time.perf_counter()
        outcomes: dict[str, int] = {}
        try:
            i = 0
            while i < len(turns):
                now = turns[i].at
                group = [t for t in turns[i:] if t.at == now]
                i += len(group)
                clock.advance(max(0.0, MIDNIGHT + now - clock.monotonic()))
                if crowd and len(group) == 1 and group[0].room.startswith("quiet"):
                    group = [Turn(now, f"quiet{q}") for q in range(QUIET_ROOMS)]  # the crowd speaks at once
                results = await asyncio.gather(*(
                    bridge.submit(msg(f"{t.room}-{int(t.at)}", f"{t.room} at {t.at:.0f}s: what do you think?",
                                      channel=channel(t.room), author=str(100 + len(t.room))))
                    for t in group))
                for r in results:
                    key = r.code or r.outcome
                    outcomes[key] = outcomes.get(key, 0) + 1
            day_bill, seen = bill(state / "captain")
            cold: Bill | None = None
            if not budget_usd:  # a cold lane in the busy tree: a new room's first turn, right after the busy hours
                clock.advance(1.0)
                await bridge.submit(msg("cold-1", "hey, first time here", channel="777"))
                cold, _ = bill(state / "captain", seen)
            spent = app.spending.budgets.standing("tree").spent.usd
        finally:
            await app.close()
    return {"mode": mode, "day": day_bill, "cold": cold, "outcomes": outcomes, "spent": spent,
            "seconds": time.perf_counter() - started, "requests": len(fake.requests)}


async def main(hours: float) -> None:
    logging.basicConfig(level=logging.ERROR)
    prompt_mod.SYSTEM_PROMPT = prompt_mod.SYSTEM_PROMPT + "\n\n" + persona()  # the seed's size, as in burst.py
    turns = day(hours)
    with tempfile.TemporaryDirectory(prefix="clankie-cost-") as tmp:
        root = Path(tmp)
        runs = {m: await replay(m, turns, root) for m in MODES}
        fixed, pace, none = (runs[m]["day"] for m in MODES)
        budget = round(pace.usd / 2, 4)
        capped = await replay("pace", turns, root, budget_usd=budget, crowd=True)
    print(f"cost.py: {len(turns)} turns over {hours:g} h (fake clock), {QUIET_ROOMS} quiet rooms, model {MODEL},"
          f" cache minimum {CACHE_MIN_TOKENS} tokens")
    print(f"{'mode':<6}{'calls':>7}{'input tok':>12}{'read':>12}{'write 5m':>11}{'write 1h':>11}{'billed $':>11}"
          f"{'vs 5m':>8}{'vs none':>9}{'wall s':>8}")
    for m in MODES:
        b = runs[m]["day"]
        print(f"{m:<6}{b.calls:>7}{b.input_tokens:>12,}{b.read:>12,}{b.write_5m:>11,}{b.write_1h:>11,}{b.usd:>11.4f}"
              f"{b.usd / fixed.usd:>8.2f}{b.usd / none.usd:>9.2f}{runs[m]['seconds']:>8.1f}")
    print("cold lane in the busy tree, first turn (input billed / the same input uncached):")
    shares = {}
    for m in MODES:
        c = runs[m]["cold"]
        shares[m] = (c.usd / c.uncached_usd) if c and c.uncached_usd else 0.0
        print(f"  {m:<6} read {c.read:,} written {c.write_5m + c.write_1h:,} of {c.input_tokens:,} input tokens:"
              f" {shares[m]:.2f}x")
    over = max(0.0, capped["spent"] - budget)
    dearest = capped["day"].dearest_call
    print(f"budget ${budget:.4f} (half the pace day): spent ${capped['spent']:.4f}, over by ${over:.4f} ="
          f" {over / dearest:.2f} of the dearest call (${dearest:.4f}); outcomes {capped['outcomes']}")
    print(f"bench cost: pace_vs_fixed={pace.usd / fixed.usd:.2f} pace_vs_none={pace.usd / none.usd:.2f}"
          f" fixed_vs_none={fixed.usd / none.usd:.2f} cold_share={shares['pace']:.2f}"
          f" overshoot_calls={over / dearest:.2f} day_usd_pace={pace.usd:.2f} day_usd_fixed={fixed.usd:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="how much of the day to replay (default 24)")
    asyncio.run(main(parser.parse_args().hours))
