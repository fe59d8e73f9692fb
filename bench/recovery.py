"""Recovery: SIGKILL of a child during traffic → the next reply posted in the room, on the real tree.

The real tree (``clankie run``: browser, tldraw, service, bridge as processes)
against the project's loopback fakes (:mod:`clankie.testing`: Discord gateway
and REST, Anthropic), which run in this process, so every timestamp is read
on one clock (``time.monotonic``): the kill is stamped just before
``os.kill``, the reply when its ``POST /channels/…/messages`` reaches the
fake Discord.

* **service**: a person's turn is in flight (the fake model holds its answer)
  when the service is SIGKILLed; the bridge re-submits it to the next
  service, which runs it again (its lane now cold) and the reply is posted.
  Measured three ways in the same run: our tree with the hand-over and warm
  spares (the default), the same tree with ``CLANKIE_HANDOVER=false``
  (cold restarts, clients dial with backoff), and supervisord running the
  same four real children.
* **bridge** (ours): SIGKILL of the bridge, then a person says something
  every 50 ms until one is answered (a message sent while no bridge holds a
  gateway session is never seen, as on Discord).
* **browser** (ours): SIGKILL of the browser host, then screenshot turns
  until a reply carries a picture again (the first may come back without
  one: the captain's connection to the dead host fails the tool).

Before each kill the room is warm (a turn just settled), the child has been up
for 1.5 s and, in our tree, its spare is parked: that is the designed steady
state. The bench's tree sets ``stable_after`` to 1 s (production: 10 s) so
that kills a few seconds apart each count as an isolated crash, as production
crashes minutes apart would, not as crashes in a row; restart intensity is
raised so 20 kills do not make the service fatal.

Protocol vs defaults: 20 service kills and 10 each of bridge and browser in
our tree, where each service kill is followed by one bridge or browser kill
while the service's next spare warms (so the 40 kills fit in 20 rounds); the
comparison trees default to **3** service kills each (each takes seconds
there), printed as used. The full protocol:
``bench/recovery.py --cold-kills 20 --supervisord-kills 20`` (about 5 minutes).
supervisord is installed with pip into a throwaway virtualenv under /tmp, as
``bench/restart.py`` does.

Last line: ``bench recovery: service_p50_ms=… service_p99_ms=… bridge_p50_ms=… browser_p50_ms=…
cold_p50_ms=… supervisord_p50_ms=…``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.restart import ensure_supervisord, pct
from clankie import ipc
from clankie.errors import ChannelBroken, ChannelClosed, RequestTimeout
from clankie.protocol import Empty, StatusReply
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord, Post
from supervisor.spec import PASSTHROUGH_OF, SECRETS_OF

REPO = Path(__file__).resolve().parents[1]
GUILD, CHAN = "100", "101"
PERSON = "500000000000000001"
CHILDREN = (("browser", "hosts.browser"), ("tldraw", "hosts.tldraw"), ("service", "service"), ("bridge", "bridge"))
STABLE = 1.5
"""Seconds a child is up before it is killed: above the bench's stable_after (1 s), so no kill is one of a row."""
PAGE = "<!doctype html><html><body style='background:#3a6'><h1>recovery bench</h1></body></html>"


def spec(*, bridge_spare: bool = False) -> list[dict[str, Any]]:
    """The default tree as a spec file, with the bench's policy (module docstring); ``bridge_spare``: the bridge
    keeps a parked spare too (bench/resume.py's ``spare`` mode)."""
    out = []
    for name, module in CHILDREN:
        item: dict[str, Any] = {
            "name": name,
            "argv": ["{python}", "-m", module],
            "policy": {"stable_after": 1.0, "intensity": 1000},
            "spare": name != "bridge" or bridge_spare,
            # as the default tree: each secret on a pipe to the one child that needs it, and that child's variables
            "secrets": list(SECRETS_OF.get(name, ())),
            "passthrough": list(PASSTHROUGH_OF.get(name, ())),
        }
        if name != "bridge":
            item["sockets"] = [name]
        if name == "service":
            item.update(watch_stalls=True, proxy=True)
        out.append(item)
    return out


class Model(fa.FakeAnthropic):
    """The fake model, answering every unscripted turn with one short line (an echo of a cold
    lane's backlog would make the reply, not the recovery, the thing measured)."""

    def _default(self, body: dict[str, Any]) -> fa.Scenario:
        return fa.text("ok")


class Site:
    """A page on 127.0.0.1 for the screenshot turns."""

    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class Tree:
    """One tree under one supervisor (``ours``, ``cold`` or ``supervisord``) and the fakes it talks to."""

    def __init__(self, kind: str, work: Path, site: Site, supervisord: Path | None) -> None:
        self.kind = kind
        self.work = work
        self.site = site
        self.supervisord = supervisord
        self.discord = FakeDiscord(guilds={GUILD: [CHAN]})
        self.anthropic = Model()
        self.proc: subprocess.Popen[bytes] | None = None
        self.runtime = work / "run"
        self.state = work / "state"
        self.asked = 0
        self.bridge_spare = False  # bench/resume.py's spare mode sets it

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.state),
            "CLANKIE_STATE": str(self.state),
            "CLANKIE_RUNTIME_DIR": str(self.runtime),
            "CLANKIE_DISCORD_ATTACHMENT_ROOT": str(self.state / "attachments"),
            "PYTHONPATH": str(REPO),
            "CLANKIE_HEARTBEAT_SECONDS": "0.5",
            "CLANKIE_STALL_TICK_SECONDS": "1",
            "DISCORD_TOKEN": self.discord.token,
            "CLANKIE_DISCORD_API_BASE": self.discord.api_base,
            "CLANKIE_DISCORD_GUILD_IDS": GUILD,
            "CLANKIE_USER_TURNS_PER_MINUTE": "0", "CLANKIE_ROOM_TURNS_PER_MINUTE": "0",  # one author speaks for the crowd
            "CLANKIE_BUDGET_USER_DAY_USD": "0", "CLANKIE_BUDGET_ROOM_DAY_USD": "0",  # ... and pays for it: no day budgets
            "ANTHROPIC_API_KEY": "sk-bench-fake",
            "ANTHROPIC_BASE_URL": self.anthropic.base_url,
            "CLANKIE_BROWSER_ALLOW_PRIVATE": "true",
            "CLANKIE_HANDOVER": "false" if self.kind == "cold" else "true",
        }

    async def start(self) -> None:
        await self.discord.start()
        await self.anthropic.start()
        for d in (self.state, self.runtime):
            d.mkdir(parents=True, mode=0o700)
        log = (self.work / "supervisor.log").open("wb")
        if self.kind == "supervisord":
            assert self.supervisord is not None
            conf = self.work / "supervisord.conf"
            env = ",".join(f'{k}="{v.replace("%", "%%")}"' for k, v in self.env().items())
            programs = "".join(
                f"[program:{name}]\ncommand={sys.executable} -m {module}\ndirectory={REPO}\nenvironment={env}\n"
                "autorestart=true\nstartsecs=0\nstartretries=1000\nstopwaitsecs=5\nstopasgroup=true\nkillasgroup=true\n"
                f"stdout_logfile={self.work / (name + '.log')}\nredirect_stderr=true\n\n"
                for name, module in CHILDREN
            )
            conf.write_text(
                f"[supervisord]\nnodaemon=true\nlogfile={self.work / 'supervisord.log'}\n"
                f"pidfile={self.work / 'sd.pid'}\nchildlogdir={self.work}\n\n{programs}"
            )
            self.proc = subprocess.Popen([str(self.supervisord), "-c", str(conf)], stdout=log, stderr=log, cwd=self.work)
        else:
            (self.work / "spec.json").write_text(json.dumps(spec(bridge_spare=self.bridge_spare)))
            argv = [sys.executable, "-m", "supervisor", "run", "--spec-file", str(self.work / "spec.json")]
            self.proc = subprocess.Popen(argv, env=self.env(), stdout=log, stderr=log, cwd=REPO)
        end = time.monotonic() + 120
        while True:  # the whole tree answers: it is up (until then a message may reach no bridge)
            mid = await self.say("clankie, are you up?")
            with contextlib.suppress(TimeoutError):
                await self.discord.wait_for(functools.partial(self.has_reply, mid), 2.0)
            if self.reply(mid) is not None:
                break
            if time.monotonic() > end or (self.proc is not None and self.proc.poll() is not None):
                raise SystemExit(f"{self.kind}: the tree never answered; see {self.work}")

    async def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            for _ in range(300):
                if self.proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                self.proc.kill()
                self.proc.wait()
        await self.anthropic.close()
        await self.discord.close()

    # ------------------------------------------------------------ observing

    async def status(self) -> StatusReply:
        """The supervisor's status; a connection the supervisor dropped or left unanswered is tried again (up to 3
        times): on a loaded machine this process, which also serves the fakes, can miss the control socket's 5 s hello
        window, or the supervisor its 10 s answer."""
        for attempt in range(3):
            try:
                conn = await ipc.connect(self.runtime / "control.sock", "bench", timeout=10)
                try:
                    reply = await conn.request("status", Empty(), timeout=10)
                finally:
                    await conn.aclose()
            except (ChannelBroken, ChannelClosed, RequestTimeout):
                if attempt == 2:
                    raise
                await asyncio.sleep(0.5)
                continue
            assert isinstance(reply, StatusReply)
            return reply
        raise AssertionError("unreachable")

    async def pid(self, name: str) -> int:
        """The child's pid: from status in our tree, from the process table under supervisord."""
        if self.kind != "supervisord":
            child = next(c for c in (await self.status()).children if c.name == name)
            assert child.pid is not None
            return child.pid
        module = dict(CHILDREN)[name]
        assert self.proc is not None
        for p in psutil.Process(self.proc.pid).children():
            if p.cmdline()[-2:] == ["-m", module]:
                return p.pid
        raise RuntimeError(f"no {name} under supervisord")

    async def until(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            value = pred()
            if value:
                return value
            if loop.time() > end:
                raise SystemExit(f"{self.kind}: timed out waiting for {what}; see {self.work}")
            await asyncio.sleep(0.02)

    async def steady(self, name: str, spare: bool) -> bool:
        """Wait (bounded) until the child is up for STABLE s and, in our tree, its spare is parked.

        Up for STABLE (above the bench's ``stable_after``) makes the kill an isolated crash, not one
        of a row. Returns whether a spare was parked (always False outside our tree)."""
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.kind == "supervisord":
                with contextlib.suppress(RuntimeError, psutil.Error):
                    if time.time() - psutil.Process(await self.pid(name)).create_time() >= STABLE:
                        return False
            else:
                child = next(c for c in (await self.status()).children if c.name == name)
                parked = child.spare.startswith("parked")
                if child.state == "running" and (child.uptime_s or 0) >= STABLE and (parked or not spare):
                    return parked
            await asyncio.sleep(0.05)
        return False

    def has_reply(self, message_id: str) -> bool:
        return self.reply(message_id) is not None

    def reply(self, message_id: str) -> tuple[Post, float] | None:
        """The bot's reply to ``message_id`` and when its POST reached the fake."""
        for post in self.discord.posts:
            if str((post.message_reference or {}).get("message_id")) == message_id:
                at = next(
                    (c.at for c in reversed(self.discord.calls)
                     if c.method == "POST" and c.route.startswith("POST /channels") and c.route.endswith("/messages")
                     and isinstance(c.json, dict) and str((c.json.get("message_reference") or {}).get("message_id")) == message_id),
                    None,
                )
                return post, at if at is not None else time.monotonic()
        return None

    async def wait_reply(self, message_id: str, timeout: float) -> tuple[Post, float]:
        with contextlib.suppress(TimeoutError):
            await self.discord.wait_for(lambda: self.reply(message_id) is not None, timeout)
        found = self.reply(message_id)
        if found is None:
            raise SystemExit(f"{self.kind}: no reply to {message_id} in {timeout:g}s; see {self.work}")
        return found

    async def say(self, text: str) -> str:
        self.asked += 1
        sent = await self.discord.message(CHAN, text, author_id=PERSON)
        return str(sent["id"])

    async def ask(self, text: str, timeout: float = 60) -> tuple[Post, float]:
        return await self.wait_reply(await self.say(text), timeout)


# ---------------------------------------------------------------- the kills


async def kill_service(t: Tree, i: int) -> tuple[float, bool]:
    parked = await t.steady("service", spare=t.kind == "ours")
    await t.ask(f"clankie, warm up {i}")  # the room is warm right now
    hold = asyncio.Event()
    t.anthropic.script(fa.text("never sent", stall_after=2, stall_until=hold))
    seen = len(t.anthropic.requests)
    mid = await t.say(f"clankie, a turn in flight {i}")
    await t.until(lambda: len(t.anthropic.requests) > seen, 30, "the turn at the model")
    pid = await t.pid("service")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    _post, at = await t.wait_reply(mid, 60)
    hold.set()
    return (at - t0) * 1000, parked


async def kill_bridge(t: Tree, i: int) -> float:
    await t.steady("bridge", spare=False)
    await t.ask(f"clankie, warm up {i}")
    pid = await t.pid("bridge")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    sent: list[str] = []
    end = t0 + 60
    while time.monotonic() < end:
        sent.append(await t.say(f"clankie, anyone there? {i}.{len(sent)}"))
        for mid in sent:
            found = t.reply(mid)
            if found is not None:
                await asyncio.sleep(0.3)  # let the burst's other messages settle before the next kill
                return (found[1] - t0) * 1000
        await asyncio.sleep(0.05)
    raise SystemExit(f"bridge never answered after kill {i}")


async def shot(t: Tree, i: int, n: int) -> tuple[Post, float]:
    t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": f"http://127.0.0.1:{t.site.port}/"})), fa.text("Here."))
    return await t.wait_reply(await t.say(f"clankie, screenshot please {i}.{n}"), 90)


async def kill_browser(t: Tree, i: int) -> tuple[float, bool]:
    parked = await t.steady("browser", spare=True)
    await shot(t, i, 0)  # warm room, warm browser
    pid = await t.pid("browser")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    for n in range(1, 20):
        post, at = await shot(t, i, n)
        if post.files:
            return (at - t0) * 1000, parked
    raise SystemExit(f"no picture after browser kill {i}")


# ---------------------------------------------------------------- running


def line(name: str, lat: list[float], extra: str = "") -> str:
    return (
        f"{name:<24} n={len(lat):<3} min={min(lat):7.1f} p50={statistics.median(lat):7.1f} "
        f"p99={pct(lat, 0.99):7.1f} max={max(lat):7.1f} ms{extra}"
    )


async def run_tree(kind: str, root: Path, site: Site, sd: Path | None, jobs: dict[str, int]) -> dict[str, list[float]]:
    """Boot one tree and kill its children. In our tree the rounds interleave: each service kill is
    followed by one bridge or browser kill while the service's next spare warms in the background."""
    t = Tree(kind, root / kind, site, sd)
    (root / kind).mkdir()
    out: dict[str, list[float]] = {"service": [], "bridge": [], "browser": []}
    parked = {"service": 0, "browser": 0}
    side = ["bridge"] * jobs.get("bridge", 0) + ["browser"] * jobs.get("browser", 0)
    started = time.monotonic()
    try:
        await t.start()
        boot = time.monotonic() - started
        for i in range(max(jobs.get("service", 0), len(side))):
            if i < jobs.get("service", 0):
                ms, was_parked = await kill_service(t, i)
                out["service"].append(ms)
                parked["service"] += was_parked
            if i < len(side) and side[i] == "bridge":
                out["bridge"].append(await kill_bridge(t, i))
            elif i < len(side):
                ms, was_parked = await kill_browser(t, i)
                out["browser"].append(ms)
                parked["browser"] += was_parked
        for name in ("service", "bridge", "browser"):
            if not out[name]:
                continue
            if kind != "ours":
                note = ""
            elif name == "bridge":
                note = "  (no bridge spare: a cold restart)"
            else:
                note = f"  (spare parked before {parked[name]}/{len(out[name])} kills)"
            print(line(f"{name} kill [{kind}]", out[name], note), flush=True)
        print(f"  {kind}: boot to first reply {boot:.1f}s, whole run {time.monotonic() - started:.1f}s", flush=True)
    finally:
        await t.close()
    return out


async def amain(args: argparse.Namespace) -> int:
    sd = ensure_supervisord() if args.supervisord_kills else None
    site = Site()
    await site.start()
    try:
        with tempfile.TemporaryDirectory(prefix="ckr-", dir="/tmp") as d:
            root = Path(args.work) if args.work else Path(d)
            root.mkdir(parents=True, exist_ok=True)
            ours = await run_tree("ours", root, site, sd, {"service": args.kills, "bridge": args.bridge_kills,
                                                           "browser": args.browser_kills})
            cold = await run_tree("cold", root, site, sd, {"service": args.cold_kills}) if args.cold_kills else {}
            sdr = await run_tree("supervisord", root, site, sd, {"service": args.supervisord_kills}) if sd else {}
    finally:
        await site.close()
    med = statistics.median
    s50, s99 = med(ours["service"]), pct(ours["service"], 0.99)
    b50 = med(ours["bridge"]) if ours.get("bridge") else float("nan")
    w50 = med(ours["browser"]) if ours.get("browser") else float("nan")
    c50 = med(cold["service"]) if cold.get("service") else float("nan")
    d50 = med(sdr["service"]) if sdr.get("service") else float("nan")
    print(
        f"protocol: service kills ours={args.kills} cold={args.cold_kills} supervisord={args.supervisord_kills} "
        f"(issue: 20 each); bridge={args.bridge_kills} browser={args.browser_kills}"
    )
    print(f"ratio: cold p50 / ours p50 = {c50 / s50:.1f}x; supervisord p50 / ours p50 = {d50 / s50:.1f}x")
    target = "met" if s50 <= 250 and s99 <= 500 else "NOT met"
    print(f"target service p50 <= 250 ms and p99 <= 500 ms: {target}")
    print(
        f"bench recovery: service_p50_ms={s50:.0f} service_p99_ms={s99:.0f} bridge_p50_ms={b50:.0f} "
        f"browser_p50_ms={w50:.0f} cold_p50_ms={c50:.0f} supervisord_p50_ms={d50:.0f}"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kills", type=int, default=20, help="service kills in our tree")
    ap.add_argument("--bridge-kills", type=int, default=10)
    ap.add_argument("--browser-kills", type=int, default=10)
    ap.add_argument("--cold-kills", type=int, default=3, help="service kills with the hand-over off (issue: 20)")
    ap.add_argument("--supervisord-kills", type=int, default=3, help="service kills under supervisord (issue: 20)")
    ap.add_argument("--work", help="keep the trees' logs in this (new) directory")
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # the fake's held answers hit closed sockets
    return asyncio.run(amain(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
