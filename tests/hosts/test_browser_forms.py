"""The URL forms issue 24 names, end to end: a real browser host, real Chromium, the policy proxy.

``allowed.test`` is pinned to 127.0.0.1 (the one trusted way in, as in ``test_browser_policy``); every other
spelling of a private address (numeric IPv4 forms, IPv4-compatible, -translated, -mapped and NAT64 IPv6) must be
refused, asked for directly, as a redirect hop, or as a page's subresource, and the private site must never
see the request. Service workers and WebRTC are tried from a real page, and what Chromium did is reported
back to the site before the page's load event (the page holds an image until its report arrives).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from clankie.errors import RemoteError
from clankie.protocol import Artifact
from tests.hosts.hostproc import HostProcess, attempt, policy_env
from tests.hosts.pages import Site
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

NUMERIC = ("2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "0", "\uff11\uff12\uff17.\uff10.\uff10.\uff11")
IPV6 = ("[::7f00:1]", "[::127.0.0.1]", "[::ffff:0:7f00:1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]", "[::a9fe:a9fe]")

PROBE = """<!doctype html><html><body style="margin:0;background:#3a6">
<img src="/hold">
<script>
const report = (what) => fetch("/report?" + new URLSearchParams(what)).catch(() => {});
(async () => {
  const out = {sw: "serviceWorker" in navigator ? "present" : "absent"};
  if (out.sw === "present") {
    try { await navigator.serviceWorker.register("/sw.js"); out.register = "ok"; }
    catch (e) { out.register = e.name; }
  }
  const candidates = [];
  try {
    const pc = new RTCPeerConnection({iceServers: [{urls: "stun:127.0.0.1:__STUN__"}]});
    pc.createDataChannel("x");
    pc.onicecandidate = (e) => { if (e.candidate) candidates.push(e.candidate.type || "?"); };
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((done) => {
      if (pc.iceGatheringState === "complete") return done();
      pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === "complete") done(); };
      setTimeout(done, 8000);
    });
    out.gathering = pc.iceGatheringState;
    pc.close();
  } catch (e) { out.gathering = "error:" + e.name; }
  out.candidates = candidates.join(",") || "none";
  await report(out);
})();
</script></body></html>"""


def test_numeric_and_ipv6_forms_of_loopback_are_refused_asked_for_directly(env: dict[str, str], tmp_path: Path) -> None:
    """Each form is refused with ``browser_url_refused`` before Chromium loads anything; the site sees nothing."""

    async def main() -> None:
        async with Site() as site, HostProcess("browser", policy_env(env), tmp_path / "host.log") as host:
            for form in (*NUMERIC, *IPV6):
                outcome = await attempt(host, f"http://{form}:{site.port}/secret")
                assert isinstance(outcome, RemoteError) and outcome.code == "browser_url_refused", form
            assert site.hits == []

    asyncio.run(main())


def test_numeric_and_ipv6_forms_are_refused_as_a_redirect_hop_and_as_subresources(env: dict[str, str], tmp_path: Path) -> None:
    """Chromium reads ``http://2130706433/`` as 127.0.0.1 and ``[::7f00:1]`` as itself; the proxy refuses every
    one of them at the hop, and an allowed page's image, fetch, frame and WebSocket at them reach nothing."""

    async def main() -> None:
        async with Site() as allowed, Site() as private, HostProcess("browser", policy_env(env), tmp_path / "host.log") as host:
            forms = (*NUMERIC, *IPV6)
            for form in forms:
                target = f"http://{form}:{private.port}/secret"
                outcome = await attempt(host, f"http://allowed.test:{allowed.port}/redirect?to={target}")
                assert isinstance(outcome, RemoteError) and outcome.code == "browser_url_refused", form
            for form in ("2130706433", "0177.0.0.1", "[::7f00:1]", "[64:ff9b::7f00:1]"):
                shot = await attempt(host, f"http://allowed.test:{allowed.port}/embed?src=http://{form}:{private.port}")
                assert isinstance(shot, Artifact), form
            assert private.hits == []
            assert allowed.hits.count("/redirect") == len(forms)
            beat = await host.next_heartbeat()
            assert beat.report["policy_refusals"] >= len(forms)

    asyncio.run(main())


class _Probe:
    """A site serving :data:`PROBE`; ``/hold`` answers only once ``/report`` came (or after 20 s)."""

    def __init__(self, stun_port: int) -> None:
        self.stun_port = stun_port
        self.hits: list[str] = []
        self.report: dict[str, str] | None = None
        self.reported = asyncio.Event()
        self.port = 0

    async def page(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(text=PROBE.replace("__STUN__", str(self.stun_port)), content_type="text/html")

    async def hold(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.reported.wait(), 20)
        return web.Response(body=b"", content_type="image/png")

    async def got(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        self.report = dict(request.query)
        self.reported.set()
        return web.Response(text="ok")

    async def other(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(text="// nothing", content_type="text/javascript")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[_Probe]:
        app = web.Application()
        app.router.add_get("/", self.page)
        app.router.add_get("/hold", self.hold)
        app.router.add_get("/report", self.got)
        app.router.add_get("/{tail:.*}", self.other)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.port = runner.addresses[0][1]
        try:
            yield self
        finally:
            await runner.cleanup()


def test_service_workers_and_webrtc_reach_nothing_past_the_proxy(env: dict[str, str], tmp_path: Path) -> None:
    """On an allowed page, no service worker is registered (its script is never fetched) and WebRTC gathers no
    candidate: a STUN server on 127.0.0.1 receives not one datagram (UDP is never proxied, so it is never sent)."""

    async def main() -> None:
        stun = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stun.bind(("127.0.0.1", 0))
        stun.setblocking(False)
        try:
            probe = _Probe(stun.getsockname()[1])
            async with probe.running(), HostProcess("browser", policy_env(env), tmp_path / "host.log") as host:
                shot = await attempt(host, f"http://allowed.test:{probe.port}/")
                assert isinstance(shot, Artifact)
                report = await until(lambda: probe.report, 20, "the page's report")
                assert report["sw"] == "absent"  # http on a name is not a secure context: Chromium offers no API
                assert "/sw.js" not in probe.hits
                assert report["gathering"] == "complete" and report["candidates"] == "none", report
                with pytest.raises(BlockingIOError):
                    stun.recv(2048)  # nothing was ever sent to the STUN server
        finally:
            stun.close()

    asyncio.run(main())
