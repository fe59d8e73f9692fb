"""The demo page: what the browser photographs in demo mode, served by the policy proxy itself.

In demo mode (``CLANKIE_DEMO=1``, ``scripts/run --demo``) the proxy answers a
plain-HTTP request for :data:`DEMO_HOST` on port 80 from this module, in
process: no socket is opened to any address, and the URL policy is unchanged
(loopback and private addresses stay refused, so the demo opens nothing else on
the machine). Outside demo mode the proxy has no demo site and the name is what
it is everywhere, a ``.invalid`` name (RFC 6761) that never resolves.

Two pages: ``/`` at once, and ``/long``, the same page after
:data:`LONG_PAGE_SECONDS` on the host's clock: the demo's long task, so the
bridge's tool-activity card has time to show. Any other path is a 404 page.
``docs/hosts.md`` ("The demo page") says why this and not a loopback site.
"""

from __future__ import annotations

from dataclasses import dataclass

from clankie.clock import Clock

DEMO_HOST = "demo.clankie.invalid"
DEMO_PORT = 80
DEMO_URL = f"http://{DEMO_HOST}/"
LONG_PAGE_SECONDS = 4.0
"""How long ``/long`` takes: twice the bridge's card delay (bridge/card.py ``CARD_DELAY_S``)."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Clankie demo page</title>
<style>
body { margin: 0; font-family: sans-serif; background: #0f2742; color: #f4f1e8; }
main { padding: 48px 64px; }
h1 { font-size: 56px; margin: 0 0 12px; color: #ffd166; }
p { font-size: 24px; line-height: 1.4; max-width: 1000px; }
.row { display: flex; gap: 24px; margin-top: 36px; }
.box { flex: 1; padding: 24px; border-radius: 16px; font-size: 22px; color: #0f2742; }
.a { background: #06d6a0; } .b { background: #ffd166; } .c { background: #ef476f; color: #fff; }
</style></head>
<body><main>
<h1>Clankie demo page</h1>
<p>This is a demo. The browser host's policy proxy serves this page itself, in demo mode only:
no network was used and nothing else on this machine was opened.</p>
<div class="row">
<div class="box a">headless Chromium took this screenshot</div>
<div class="box b">the host wrote it under the attachment root</div>
<div class="box c">the bridge attached the same bytes to the reply</div>
</div>
</main></body></html>
"""

NOT_FOUND = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Not found</title></head>
<body><h1>Not found</h1><p>The demo site has only / and /long.</p></body></html>
"""


@dataclass(frozen=True, slots=True)
class Answer:
    """One demo response: its status and HTML body."""

    status: int
    body: str

    def encode(self) -> bytes:
        """The whole HTTP/1.1 response, closed after the body."""
        phrase = "OK" if self.status == 200 else "Not Found"
        data = self.body.encode("utf-8")
        head = (
            f"HTTP/1.1 {self.status} {phrase}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        )
        return head.encode("latin-1") + data


class DemoSite:
    """The demo mode's one site: stateless but for the clock ``/long`` waits on."""

    def __init__(self, clock: Clock, long_seconds: float = LONG_PAGE_SECONDS) -> None:
        self.clock = clock
        self.long_seconds = long_seconds

    @staticmethod
    def serves(host: str, port: int) -> bool:
        """Whether a plain-HTTP request for ``host:port`` is this site's (``host`` already normalised)."""
        return host == DEMO_HOST and port == DEMO_PORT

    async def answer(self, method: str, path: str) -> Answer:
        """The response to ``method path``: the page (after the long wait for ``/long``), else a 404 page."""
        page = path.partition("?")[0]
        if method != "GET" or page not in ("/", "/long"):
            return Answer(404, NOT_FOUND)
        if page == "/long":
            await self.clock.sleep(self.long_seconds)
        return Answer(200, PAGE)
