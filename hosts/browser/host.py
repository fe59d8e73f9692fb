"""The browser host: a headless Chromium started on demand, a fresh context per screenshot.

Chromium (and Playwright's Node driver) start on the first request and close
once no request has finished for ``browser_idle_seconds``
(``CLANKIE_BROWSER_IDLE_SECONDS``): an idle tree holds no browser. Starting
and closing share one lock, so concurrent first requests start it once and a
request arriving while it closes waits for the close, then starts it again.

Playwright for Python drives Debian's ``chromium-headless-shell`` (no browser
is ever downloaded). Every context goes through its own policy-proxy
session (:mod:`hosts.browser.proxy`); Chromium is launched with resolver
rules that leave it nothing else to reach and with both WebRTC switches, so
the URL policy holds for redirect hops, subresources and WebSockets too
(``shared/reference/browser-notes.md`` §6).

Refusal codes: ``browser_url_refused`` (policy), ``browser_unavailable`` (no
Chromium, or it will not start), ``browser_navigation_failed`` (the site
could not be loaded), ``browser_timeout`` (a deadline ran out),
``browser_crashed`` (Chromium died mid-request; it is relaunched on the
next one), ``browser_image_too_large``, ``artifact_write_failed``,
``browser_sandbox_unavailable`` (``CLANKIE_BROWSER_SANDBOX=require`` and
Chromium's sandbox cannot start here; the message says why).

Chromium runs in its own sandbox (:mod:`hosts.browser.chromium`); a tree run
as root runs this process as ``CLANKIE_BROWSER_USER`` (:mod:`hosts.browser.apart`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from playwright.async_api import Browser, BrowserContext, FloatRect, Page, Playwright, ProxySettings, async_playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from clankie.clock import Clock
from clankie.errors import RemoteError
from clankie.paths import make_private_dirs, process_environment
from clankie.protocol import Artifact, Code, ScreenshotRequest, Viewport
from clankie.router import Route
from clankie.settings import Settings
from clankie.waits import within
from hosts.runtime import serve_on, write_artifact, write_through

from . import policy
from .apart import Apart, go_apart, no_new_privs
from .chromium import clear_stale, find_chromium, launch_excerpt, navigation_error, sandbox_failure, sandbox_obstacle, sandbox_reason
from .demo_site import DemoSite
from .external import SharedArtifacts, go_external
from .lifecycle import Event, Lifecycle, idle_due
from .proxy import MARKER, PolicyProxy, Resolver, Session, system_resolver

log = logging.getLogger(__name__)

LAUNCH_ARGS = (
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)
START_DEADLINE = 30.0
REQUEST_DEADLINE = 60.0
NAV_TIMEOUT_MS = 20_000
LOAD_GRACE_MS = 5_000
SHOT_TIMEOUT_MS = 10_000
CLOSE_DEADLINE = 5.0
MAX_HEIGHT = 8_000
CONCURRENCY = 2
IDLE_TICK_MAX = 5.0  # the idle watch looks at least this often


class BrowserHost:
    """Serves ``screenshot`` for the host runtime (see :class:`hosts.runtime.Host`)."""

    name = "browser"
    deadlines: Mapping[str, float] = MappingProxyType({"screenshot": REQUEST_DEADLINE})
    timeout_code = "browser_timeout"

    def __init__(self, settings: Settings, clock: Clock, *, resolver: Resolver = system_resolver) -> None:
        self.settings = settings
        self.clock = clock
        pins = policy.Pins.parse(settings.browser_pinned_hosts)
        self.proxy = PolicyProxy(allow_private=settings.browser_allow_private, pins=pins, resolver=resolver,
                                 demo=DemoSite(clock) if settings.demo else None)  # the demo page: demo mode only
        self.sandbox = settings.browser_sandbox == "require"
        self.apart: Apart | None = None
        self.shared: SharedArtifacts | None = None  # run outside the tree: where the tree reads its screenshots
        self.tmp_root = settings.state_dir / "tmp" / "browser"
        self.life = Lifecycle()
        self._pw: Playwright | None = None
        self._browser: Browser | None = None
        self._default: Session | None = None
        self._launching: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None
        self._closing = False
        self._retiring = False
        self._busy = 0
        self._last_done = clock.monotonic()
        self._watch: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ runtime hooks

    def routes(self) -> dict[str, Route]:
        """One typed handler per method of the ``browser`` role."""
        return {"screenshot": self.screenshot}

    async def start(self) -> None:
        """Clear what dead hosts left in the temp dir, make this process's own, open the proxy and watch for
        idleness; Chromium waits for a request."""
        clear_stale(self.tmp_root)
        make_private_dirs(self.tmp)
        # The Node driver and Chromium put their profiles under TMPDIR; give them ours.
        os.environ["TMPDIR"] = str(self.tmp)
        if self.apart is not None:  # root's HOME is not this user's to write (Chromium keeps ~/.pki there)
            os.environ["HOME"] = str(self.tmp)
        tempfile.tempdir = None
        obstacle = sandbox_obstacle(os.geteuid()) if self.sandbox else None
        if obstacle is not None:
            log.warning("Chromium's sandbox cannot start here, so every screenshot is refused: %s", obstacle)
        self._launching = asyncio.Lock()
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._default = await self.proxy.open_session()
        self._watch = asyncio.create_task(self._idle_watch(), name="browser-idle")
        log.info("Chromium starts on the first request and closes after %.0fs idle", self.settings.browser_idle_seconds)

    def health(self) -> dict[str, Any]:
        return {
            **self.life.report(self.clock.monotonic()),
            "chromium": self.chromium,
            "idle_seconds": self.settings.browser_idle_seconds,
            "executable": str(find_chromium(self.settings.chromium_path) or ""),
            "allow_private": self.settings.browser_allow_private,
            "sandbox": "on" if self.sandbox else "off",
            "uid": os.geteuid(),
            "user": self.apart.user if self.apart is not None else None,
            "no_new_privs": no_new_privs(),
            "policy_refusals": self.proxy.refused_total,
            "proxy_unauthenticated": self.proxy.unauthenticated_total,
            "proxy_over_cap": self.proxy.over_cap_total,
        }

    @property
    def tmp(self) -> Path:
        """This process's own temp dir: a warm spare starts beside a live host."""
        return self.tmp_root / str(os.getpid())

    def go_apart(self, environ: Mapping[str, str]) -> None:
        """Run as root: become the browser user (:func:`hosts.browser.apart.go_apart`) and write artifacts through
        the directory handed to it; profiles go under its own temp root."""
        self.apart = go_apart(self.settings, environ)
        if self.apart is not None:
            self.tmp_root = self.apart.tmp_root
            write_through("browser", self.apart.artifacts)
            if self.apart.listener is not None:
                serve_on("browser", self.apart.listener)

    def go_external(self, environ: Mapping[str, str]) -> None:
        """Run outside the tree, for the tree's uid only (:func:`hosts.browser.external.go_external`)."""
        external = go_external(self.settings, environ)
        self.apart, self.shared = external.apart, external.artifacts
        if self.apart is not None:
            self.tmp_root = self.apart.tmp_root

    @property
    def chromium(self) -> str:
        """``up`` while a Chromium runs (or is closing), else ``down``."""
        return "up" if self.life.state in ("up", "stopping") else "down"

    def detail(self) -> str:
        sandbox = "sandbox on" if self.sandbox else "sandbox OFF"
        return (f"chromium {self.chromium} ({self.life.state}), {sandbox}, uid {os.geteuid()}, "
                f"launches {self.life.launches}, crashes {self.life.crashes}")

    async def close(self) -> None:
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._browser is not None:
            with contextlib.suppress(Exception):
                await within(self._browser.close(), CLOSE_DEADLINE)
        await self._stop_playwright()
        if self._default is not None:
            await self.proxy.close_session(self._default)
        shutil.rmtree(self.tmp, ignore_errors=True)

    async def screenshot(self, params: ScreenshotRequest) -> Artifact:
        """``screenshot``: the page at ``params.url`` as a governed PNG (or JPEG) artifact."""
        assert self._slots is not None, "start() runs before the socket serves"
        target = self._checked(params.url)
        await self._precheck(target)
        self._busy += 1
        try:
            async with self._slots:
                browser = await self._ensure_browser()
                data, ext = await self._shoot(browser, params)
        finally:
            self._busy -= 1
            self._last_done = self.clock.monotonic()
        if self.shared is not None:
            return await self.shared.store(data, ext)
        return await write_artifact(self.settings.attachment_root, "browser", data, ext)

    # ------------------------------------------------------------ policy

    @staticmethod
    def _checked(url: str) -> policy.Target:
        try:
            return policy.check_url(url)
        except policy.UrlRefused as exc:
            raise RemoteError(exc.code, exc.reason) from None

    async def _precheck(self, target: policy.Target) -> None:
        """A quick, friendly refusal before any browser work; the proxy is still the enforcement point."""
        if self.proxy.demo is not None and target.scheme == "http" and self.proxy.demo.serves(target.host, target.port):
            return  # the demo page: the proxy answers it itself, it is no address to vet
        try:
            await self.proxy.vet(target.host, target.port)
        except policy.UrlRefused as exc:
            raise RemoteError(exc.code, exc.reason) from None

    # ------------------------------------------------------------ browser lifecycle

    def _feed(self, event: Event, error: str | None = None) -> None:
        """Hand one event to the browser's lifecycle: the only caller of :meth:`Lifecycle.apply`."""
        self.life.apply(event, self.clock.monotonic(), error)

    async def _ensure_browser(self) -> Browser:
        assert self._launching is not None
        async with self._launching:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            executable = find_chromium(self.settings.chromium_path)
            self._feed("launch")
            if executable is None:
                self._feed("missing", "chromium_missing")
                raise RemoteError("browser_unavailable", "no Chromium executable is installed")
            obstacle = sandbox_obstacle(os.geteuid()) if self.sandbox else None
            if obstacle is not None:
                self._feed("failed", "sandbox_unavailable")
                raise RemoteError(Code.BROWSER_SANDBOX_UNAVAILABLE, obstacle)
            try:
                self._browser = await within(self._launch(executable), START_DEADLINE)
            except (PlaywrightError, TimeoutError, OSError) as exc:
                log.warning("browser launch failed: %s: %s", type(exc).__name__, launch_excerpt(exc))
                await self._stop_playwright()  # a dead driver needs a fresh Playwright
                if self.sandbox and sandbox_failure(str(exc)):
                    self._feed("failed", "sandbox_unavailable")
                    raise RemoteError(Code.BROWSER_SANDBOX_UNAVAILABLE, sandbox_reason(exc)) from None
                self._feed("failed", "launch_failed")
                raise RemoteError("browser_unavailable", "the browser could not be started") from None
            self._feed("launched")
            log.info("browser up (%s, launch %d)", executable.name, self.life.launches)
            return self._browser

    async def _launch(self, executable: Path) -> Browser:
        if self._pw is None:
            self._pw = await async_playwright().start()
        assert self._default is not None
        browser = await self._pw.chromium.launch(
            executable_path=executable,
            headless=True,
            proxy=self._proxy_settings(self._default.url),
            args=list(LAUNCH_ARGS),
            chromium_sandbox=self.sandbox,
            timeout=START_DEADLINE * 1000,
        )
        browser.on("disconnected", lambda b: self._on_disconnected(b))
        return browser

    async def _idle_watch(self) -> None:
        idle = self.settings.browser_idle_seconds
        while True:
            await self.clock.sleep(min(IDLE_TICK_MAX, idle / 2))
            if self.life.state == "up" and idle_due(self.clock.monotonic(), self._last_done, idle, self._busy):
                await self._retire()

    async def _retire(self) -> None:
        """Close an idle Chromium and its driver; requests that arrive meanwhile wait on the lock."""
        assert self._launching is not None
        async with self._launching:
            now = self.clock.monotonic()
            if self.life.state != "up" or not idle_due(now, self._last_done, self.settings.browser_idle_seconds, self._busy):
                return
            self._feed("idle")
            self._retiring = True
            try:
                if self._browser is not None:
                    with contextlib.suppress(Exception):
                        await within(self._browser.close(), CLOSE_DEADLINE)
                await self._stop_playwright()
            finally:
                self._retiring = False
                self._feed("stopped")
            log.info("browser closed after %.0fs idle", now - self._last_done)

    def _proxy_settings(self, url: str) -> ProxySettings:
        creds = self.proxy.credentials
        return ProxySettings(server=url, username=creds["username"], password=creds["password"])

    def _on_disconnected(self, browser: Browser) -> None:
        if self._browser is browser:
            self._browser = None
        if not self._closing and not self._retiring:
            log.warning("browser disconnected; it will be relaunched on the next request")
            self._feed("disconnected", "browser_crashed")

    async def _stop_playwright(self) -> None:
        pw, self._pw, self._browser = self._pw, None, None
        if pw is not None:
            with contextlib.suppress(Exception):
                await within(pw.stop(), CLOSE_DEADLINE)

    # ------------------------------------------------------------ one screenshot

    async def _shoot(self, browser: Browser, req: ScreenshotRequest) -> tuple[bytes, str]:
        view = req.viewport or Viewport()
        session = await self.proxy.open_session()
        ctx: BrowserContext | None = None
        try:
            ctx = await browser.new_context(
                viewport={"width": view.width, "height": view.height},
                proxy=self._proxy_settings(session.url),
                service_workers="block",
                accept_downloads=False,
            )
            page = await ctx.new_page()
            await self._navigate(page, req.url, session)
            return await self._capture(ctx, page, req, view)
        except PlaywrightError as exc:
            if not browser.is_connected():
                raise RemoteError("browser_crashed", "the browser closed during the request; it restarts on the next one") from None
            raise RemoteError("browser_navigation_failed", navigation_error(exc)) from None
        finally:
            if ctx is not None:
                await self._close_context(browser, ctx)
            await self.proxy.close_session(session)

    async def _navigate(self, page: Page, url: str, session: Session) -> None:
        try:
            response = await page.goto(url, wait_until="domcontentloaded", timeout=NAV_TIMEOUT_MS)
        except PlaywrightTimeout:
            raise RemoteError("browser_timeout", f"the page did not load within {NAV_TIMEOUT_MS // 1000}s") from None
        except PlaywrightError as exc:
            if session.refusals:
                raise RemoteError("browser_url_refused", session.refusals[0]) from None
            raise RemoteError("browser_navigation_failed", navigation_error(exc)) from None
        marker = await response.header_value(MARKER) if response is not None else None
        if marker == "refused":
            reason = session.refusals[-1] if session.refusals else "the page is outside the browser policy"
            raise RemoteError("browser_url_refused", reason)
        if marker is not None:
            raise RemoteError("browser_navigation_failed", "the site could not be reached")
        with contextlib.suppress(PlaywrightTimeout):
            await page.wait_for_load_state("load", timeout=LOAD_GRACE_MS)

    async def _capture(self, ctx: BrowserContext, page: Page, req: ScreenshotRequest, view: Viewport) -> tuple[bytes, str]:
        limit = self.settings.discord_upload_limit_bytes
        clip = FloatRect(x=0, y=0, width=view.width, height=MAX_HEIGHT) if req.full_page else None
        try:
            data = await page.screenshot(full_page=req.full_page, clip=clip, timeout=SHOT_TIMEOUT_MS)
        except PlaywrightTimeout:
            # A web font that never loads blocks page.screenshot; CDP does not wait for fonts.
            cdp = await ctx.new_cdp_session(page)
            reply = await cdp.send("Page.captureScreenshot", {"format": "png"})
            data = base64.b64decode(reply["data"])
        if len(data) <= limit:
            return data, "png"
        log.info("screenshot is %d bytes, over the %d-byte limit; retrying as JPEG", len(data), limit)
        data = await page.screenshot(full_page=req.full_page, clip=clip, type="jpeg", quality=75, timeout=SHOT_TIMEOUT_MS)
        if len(data) > limit:
            raise RemoteError("browser_image_too_large", "the page is too large to attach even as a JPEG")
        return data, "jpg"

    async def _close_context(self, browser: Browser, ctx: BrowserContext) -> None:
        try:
            await within(ctx.close(), CLOSE_DEADLINE)
        except (PlaywrightError, TimeoutError):
            if browser.is_connected():
                log.warning("a browser context would not close; restarting the browser")
                with contextlib.suppress(Exception):
                    await within(browser.close(), CLOSE_DEADLINE)


def serving_host(settings: Settings, clock: Clock) -> BrowserHost:
    """The host as its own process builds it: outside the tree, or run as root, it goes apart before it serves."""
    host = BrowserHost(settings, clock)  # its settings are checked first: a bad one is exit 78 whoever runs it
    (host.go_external if settings.browser_host == "external" else host.go_apart)(process_environment())
    return host
