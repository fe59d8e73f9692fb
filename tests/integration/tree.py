"""Boot the real tree (`clankie run`, all four children) against loopback fakes in the test's event loop.

Usage, inside ``asyncio.run``::

    async with real_tree(tmp_path, runtime_dir, env={...}) as t:
        t.anthropic.script(fa.tool_use(("browser_screenshot", {"url": ...})), fa.text("here"))
        post = await t.ask("clankie, show me")

The supervisor is a real subprocess (`clankie run` on the default specs); the
fake Discord (:class:`FakeDiscord`) and fake Anthropic (:class:`FakeAnthropic`)
and a tiny local web site run in the test's loop, so the test can hold a model
answer or a page load on an :class:`asyncio.Event` while it changes the world.
Nothing here sleeps to wait: readiness and replies are polled against real
state (the control socket, the fakes' records) with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from clankie import ipc
from clankie import settings as settings_mod
from clankie.errors import ChannelBroken, ClankieError, RemoteError
from clankie.protocol import ChildStatus, DoctorReply, Empty, LaneInfo, LanesReply, Record, StatusReply
from clankie.testing import fake_anthropic as fa
from clankie.testing.fake_discord import FakeDiscord, Post
from tests.polling import until, until_probe
from tests.replies import closing_receipt, read_receipts, settled_reply

REPO = Path(__file__).resolve().parents[2]
GUILD, CHAN = "100", "101"
PERSON = "500000000000000001"
REF_RE = re.compile(r"sha256:[0-9a-f]{64}:(?:browser|tldraw|generated)/[0-9a-f]{64}\.[a-z]+")
PAGE = """<!doctype html><html><body style="margin:0;background:#33aa66">
<h1 style="font-family:sans-serif">Hello from the tree test page</h1></body></html>"""
Spares = bool | Collection[str]
"""Which of a test tree's children keep a warm spare (``CLANKIE_SPARES``): all four (True), none (False), or the ones
named: those whose restart the test's story is about."""


Hosts = bool | Collection[str]
"""Which hosts a test tree runs (``CLANKIE_HOSTS``): both (True), none (False: a story of turns, restarts or spend that
never draws or browses), or the ones named."""


def choices_env(spares: Spares, hosts: Hosts = True) -> dict[str, str]:
    """The settings that give a test tree the spares ``spares`` and the hosts ``hosts`` ask for (nothing for the
    defaults: all four children, each with a spare)."""
    out = {}
    for variable, chosen in (("CLANKIE_SPARES", spares), ("CLANKIE_HOSTS", hosts)):
        if chosen is not True:
            out[variable] = ",".join(() if chosen is False else sorted(chosen)) or "none"
    return out
CLANKIE = shutil.which("clankie", path=str(Path(sys.executable).parent)) or "clankie"



class Site:
    """A local web site on 127.0.0.1: ``/`` is a green page, ``/slow`` hangs until :attr:`release` is set."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.release = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/slow", self._slow)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def _page(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(text=PAGE, content_type="text/html")

    async def _slow(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        await self.release.wait()
        return web.Response(text=PAGE, content_type="text/html")


@dataclass
class Tree:
    """A running tree and the fakes it talks to."""

    proc: asyncio.subprocess.Process
    state: Path
    runtime: Path
    discord: FakeDiscord
    anthropic: fa.FakeAnthropic
    site: Site
    stderr_path: Path
    env: dict[str, str] = field(default_factory=dict)
    _poller: ipc.Connection | None = field(default=None, init=False, repr=False)
    """The one connection :meth:`status` is asked on, kept between polls (see there)."""

    @property
    def sock(self) -> Path:
        return self.runtime / "control.sock"

    async def call(self, method: str, params: Record | None = None, timeout: float = 30.0) -> Any:  # the reply, validated against the method table by the connection
        """One request on the control socket, as clankiectl makes it."""
        conn = await ipc.connect(self.sock, "test", timeout=timeout)
        try:
            return await conn.request(method, params or Empty(), timeout=timeout)
        finally:
            await conn.aclose()

    async def status(self) -> StatusReply:
        """``status``, on a connection kept between calls: the waits below poll it every 50 ms, hundreds of times a
        test, and a new connection each time (hello, the peer's credentials read, the close) cost the supervisor and
        this worker more than the status did: about 4.1 ms of CPU a poll against 2.3 (docs/testing.md, "How a
        test waits"). A kept connection that fails (the supervisor killed or restarted) is dropped and the status asked
        once on a new one, which raises what a first call would (``OSError``, ``ChannelBroken``)."""
        if self._poller is not None and not self._poller.closed:
            try:
                return await self._status_on(self._poller)
            except (OSError, ClankieError):
                await self.close_polls()  # the supervisor was killed or restarted: asked once anew below
        self._poller = await ipc.connect(self.sock, "test", timeout=30.0)
        try:
            return await self._status_on(self._poller)
        except BaseException:
            await self.close_polls()
            raise

    @staticmethod
    async def _status_on(conn: ipc.Connection) -> StatusReply:
        reply = await conn.request("status", Empty(), timeout=30.0)
        assert isinstance(reply, StatusReply)
        return reply

    async def close_polls(self) -> None:
        """Close the kept status connection, if any (before the tree stops, and when it failed)."""
        poller, self._poller = self._poller, None
        if poller is not None:
            with contextlib.suppress(OSError, ClankieError):
                await poller.aclose()

    async def child(self, name: str) -> ChildStatus:
        return next(c for c in (await self.status()).children if c.name == name)

    async def doctor(self) -> DoctorReply:
        reply = await self.call("doctor", timeout=60.0)
        assert isinstance(reply, DoctorReply)
        return reply

    async def wait_child(self, pred: Callable[[ChildStatus], bool], name: str, timeout: float = 30.0) -> ChildStatus:
        """Poll ``status`` until child ``name`` satisfies ``pred``."""
        got: ChildStatus | None = None

        async def look() -> ChildStatus | None:
            nonlocal got
            try:
                got = await self.child(name)
            except ChannelBroken:  # the control socket refuses between its bind and its listen
                got = None
            return got if got is not None and pred(got) else None

        def where() -> str:
            state = f"{got.state} {got.detail!r}" if got is not None else "no answer on control.sock"
            return f"{name} to get there: {state}\n{self.stderr()[-3000:]}"

        return await until_probe(look, timeout, where, step=0.05)

    async def ask(self, text: str, timeout: float = 45.0) -> Post:
        """A person speaks in the room; returns the reply that settled that message's delivery."""
        sent = await self.discord.message(CHAN, text, author_id=PERSON)
        return await self.reply_to(sent["id"], timeout)

    async def reply_to(self, message_id: str, timeout: float = 45.0) -> Post:
        """The post that settled the delivery of ``message_id`` (:func:`tests.replies.settled_reply`): never a
        tool-activity card or any other post threaded to it; fails at once if the delivery closes without one."""
        return await until(lambda: settled_reply(self.discord.posts, self.receipts(), message_id), timeout,
                           f"a reply to {message_id}")

    async def kill(self, name: str) -> ChildStatus:
        """SIGKILL child ``name`` and wait until the supervisor has it running again; returns its new status."""
        old = await self.child(name)
        assert old.pid is not None, f"{name} is not running"
        os.kill(old.pid, signal.SIGKILL)
        return await self.wait_child(lambda c: c.state == "running" and c.pid not in (None, old.pid), name)

    async def lanes(self) -> tuple[LaneInfo, ...]:
        """The service's lanes (none while the service is down)."""
        try:
            reply = await self.call("lanes")
        except RemoteError:
            return ()
        assert isinstance(reply, LanesReply)
        return reply.lanes

    async def lane(self, channel: str = CHAN) -> LaneInfo | None:
        return next((info for info in await self.lanes() if info.key.endswith(f":{channel}")), None)

    async def wait_lane(self, pred: Callable[[LaneInfo], bool], channel: str = CHAN, timeout: float = 30.0) -> LaneInfo:
        """Poll ``lanes`` until the room's lane satisfies ``pred``."""
        info: LaneInfo | None = None

        async def look() -> LaneInfo | None:
            nonlocal info
            info = await self.lane(channel)
            return info if info is not None and pred(info) else None

        return await until_probe(look, timeout, lambda: f"the lane of {channel} to get there: {info}", step=0.05)

    def receipts(self) -> list[dict[str, Any]]:
        """The bridge's receipts, oldest first."""
        return read_receipts(self.state / "receipts" / "bridge.jsonl")

    def outcome_of(self, delivery_id: str) -> dict[str, Any] | None:
        """The receipt that closed the delivery (its one outcome), or None while it is open. A ``reacted`` or
        ``recovered`` line is not an outcome: the failure reaction is recorded just before the ``failed`` it goes with."""
        return closing_receipt(self.receipts(), delivery_id)

    def tool_results(self, request_index: int) -> str:
        """The text of every tool result the model was shown in request ``request_index``."""
        body = self.anthropic.requests[request_index]
        out: list[str] = []
        for message in body.get("messages", []):
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, str):
                        out.append(inner)
                    elif isinstance(inner, list):
                        out.extend(b.get("text", "") for b in inner if isinstance(b, dict))
        return "\n".join(out)

    def last_ref(self, request_index: int) -> str:
        """The governed ref the last tool result in that request reported."""
        refs = REF_RE.findall(self.tool_results(request_index))
        assert refs, f"no artifact ref in request {request_index}: {self.tool_results(request_index)[:300]}"
        return refs[-1]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def answers(self) -> bool:
        """Whether the control socket answers (a socket file left by a killed supervisor exists, but refuses)."""
        assert self.proc.returncode is None, f"clankie run exited {self.proc.returncode}: {self.stderr()[-3000:]}"
        try:
            await self.status()
        except (OSError, ChannelBroken):
            return False
        return True

    def hosts(self) -> tuple[str, ...]:
        """The hosts this tree runs as its children: those ``CLANKIE_HOSTS`` names (both by default), less a browser
        host in its own unit (``CLANKIE_BROWSER_HOST=external``), the settings parsed as the supervisor parses them."""
        settings = settings_mod.load(self.env)  # read as the supervisor reads them
        return tuple(n for n in settings.hosts if not (n == "browser" and settings.external_browser))

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait until every child runs and the bridge has a Discord session and the service."""
        await until_probe(self.answers, timeout, "the control socket to answer", step=0.02)
        for name in (*self.hosts(), "service"):
            await self.wait_child(lambda c: c.state == "running", name, timeout)
        await self.wait_child(lambda c: c.state == "running" and "discord: connected; service: connected" in c.detail,
                              "bridge", timeout)

    async def standing_by(self, timeout: float = 60.0) -> None:
        """Wait until every child runs and the bridge waits for its shard lease (postgres profile: another tree
        serves the shard)."""
        await until_probe(self.answers, timeout, "the control socket to answer", step=0.02)
        for name in (*self.hosts(), "service"):
            await self.wait_child(lambda c: c.state == "running", name, timeout)
        await self.wait_child(lambda c: "waiting for the shard lease" in c.detail, "bridge", timeout)

    async def kill_supervisor(self) -> None:
        """SIGKILL `clankie run` itself; its children die with it (PDEATHSIG), as under a crash."""
        self.proc.kill()
        await self.proc.wait()
        await self.close_polls()  # its end of the kept status connection is gone

    async def respawn(self) -> None:
        """Start a new `clankie run` on the same state and runtime dirs (systemd restarting the unit)."""
        with self.stderr_path.open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                CLANKIE, "run", env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=err, stderr=err, cwd=REPO
            )


def tree_env(tmp: Path, runtime: Path, discord: FakeDiscord, anthropic: fa.FakeAnthropic, extra: dict[str, str]) -> dict[str, str]:
    state = tmp / "state"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(state),
        "CLANKIE_STATE": str(state),
        "CLANKIE_RUNTIME_DIR": str(runtime),
        "PYTHONPATH": str(REPO),
        "CLANKIE_HEARTBEAT_SECONDS": "0.5",
        "CLANKIE_HEARTBEAT_TIMEOUT_SECONDS": "20",
        "CLANKIE_STALL_TICK_SECONDS": "1",
        "DISCORD_TOKEN": discord.token,
        "CLANKIE_DISCORD_API_BASE": discord.api_base,
        "CLANKIE_DISCORD_GUILD_IDS": GUILD,
        "ANTHROPIC_API_KEY": "sk-test-fake",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        # one person speaks many times a minute in these trees (and the benches' thousands of rooms share an
        # author): pacing is off unless a test is about it (tests/bridge/test_fairness.py)
        "CLANKIE_USER_TURNS_PER_MINUTE": "0",
        "CLANKIE_ROOM_TURNS_PER_MINUTE": "0",
        # ... and the benches' one author pays for the crowd all day: no per-person or per-room day budget either
        # (tests/integration/test_tree_budget.py sets the budgets it is about)
        "CLANKIE_BUDGET_USER_DAY_USD": "0",
        "CLANKIE_BUDGET_ROOM_DAY_USD": "0",
    }
    env.update(extra)
    return env


async def stop_tree(proc: asyncio.subprocess.Process) -> None:
    """Stop a tree's supervisor as systemd would: SIGTERM, then SIGKILL after 30 s."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def real_tree(
    tmp: Path,
    runtime: Path,
    env: dict[str, str] | None = None,
    ready_timeout: float = 60.0,
    channels: tuple[str, ...] = (CHAN,),
    prefix: Callable[[Path], Sequence[str]] | None = None,
    spares: Spares = True,
    hosts: Hosts = True,
) -> AsyncIterator[Tree]:
    """`clankie run` with all four children (less the hosts ``hosts`` leaves out), connected to Discord (``channels`` in guild GUILD) and ready for turns.

    ``prefix(state)`` is a command that sets up a private mount namespace and execs the supervisor in it (a small
    tmpfs on the state directory, say); the tree's ``state`` is then the supervisor's own view of it.

    ``spares=False`` is for a test whose story never restarts a child: the tree is the same (sockets held by the
    supervisor, hand-over on) but keeps no warm spare, so it does not pay their imports (about 3 CPU s a tree under
    the suite's load, docs/benchmarks.md). ``spares`` as a set of names is for a story that restarts those children:
    only they keep a spare (:func:`choices_env`). ``hosts=False`` is for a story that never browses or draws: the tree
    runs the service and the bridge only, and the model is offered no host's tool.
    """
    discord = FakeDiscord(guilds={GUILD: list(channels)})
    anthropic = fa.FakeAnthropic()
    site = Site()
    await discord.start()
    await anthropic.start()
    await site.start()
    state = tmp / "state"
    state.mkdir(exist_ok=True, mode=0o700)
    full_env = tree_env(tmp, runtime, discord, anthropic, {**choices_env(spares, hosts), **(env or {})})
    err_path = tmp / "supervisor.stderr"
    with err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *(prefix(state) if prefix else ()), CLANKIE, "run", env=full_env, stdin=asyncio.subprocess.DEVNULL,
            stdout=err, stderr=err, cwd=REPO,
        )
    view = Path(f"/proc/{proc.pid}/root") / state.relative_to("/") if prefix else state
    t = Tree(proc, view, runtime, discord, anthropic, site, err_path, full_env)
    try:
        await t.ready(ready_timeout)
        yield t
    finally:
        site.release.set()
        if anthropic.gate is not None:
            anthropic.gate.set()
        discord.gateway_open.set()
        await t.close_polls()
        await stop_tree(t.proc)
        await site.close()
        await anthropic.close()
        await discord.close()


@contextlib.asynccontextmanager
async def tree_on(tmp: Path, runtime: Path, discord: FakeDiscord, extra: dict[str, str],
                  up: Callable[[Tree], Awaitable[None]], *, spares: Spares = True,
                  hosts: Hosts = True) -> AsyncIterator[Tree]:
    """`clankie run` with ``extra`` settings on ``discord`` (shared with other trees), with a model double and a web
    site of its own; yielded once ``up`` says so (:meth:`Tree.ready`, :meth:`Tree.standing_by`). ``spares`` and
    ``hosts`` as for :func:`real_tree`."""
    anthropic = fa.FakeAnthropic()
    site = Site()
    await anthropic.start()
    await site.start()
    tmp.mkdir(mode=0o700)
    (tmp / "state").mkdir(mode=0o700)
    env = tree_env(tmp, runtime, discord, anthropic, {**choices_env(spares, hosts), **extra})
    err_path = tmp / "supervisor.stderr"
    with err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(CLANKIE, "run", env=env, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=err, stderr=err, cwd=REPO)
    t = Tree(proc, tmp / "state", runtime, discord, anthropic, site, err_path, env)
    try:
        await up(t)
        yield t
    finally:
        await t.close_polls()
        await stop_tree(t.proc)
        await site.close()
        await anthropic.close()


@contextlib.asynccontextmanager
async def pg_tree(tmp: Path, discord: FakeDiscord, dsn: str, *, serving: bool,
                  env: dict[str, str] | None = None, spares: Spares = True, hosts: Hosts = True) -> AsyncIterator[Tree]:
    """`clankie run` in the postgres profile on ``discord`` (shared with other trees); up when every child runs and
    the bridge either serves the shard (``serving``) or waits for its lease. ``spares`` and ``hosts`` as for
    :func:`real_tree`."""
    extra = {"CLANKIE_STORE": "postgres", "CLANKIE_POSTGRES_DSN": dsn, "CLANKIE_DISCORD_TOOL_CARD": "false", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="ck-", dir="/tmp") as rt:  # short: socket paths fit in 107 bytes
        runtime = Path(rt)
        runtime.chmod(0o700)
        async with tree_on(tmp, runtime, discord, extra,
                           lambda t: t.ready(90) if serving else t.standing_by(90), spares=spares, hosts=hosts) as t:
            yield t
