"""A local web site for browser tests: a few pages on 127.0.0.1 that record every hit."""

from __future__ import annotations

import asyncio
import html
from typing import Any

from aiohttp import web

GREEN = (51, 170, 102)
PAGE = f"""<!doctype html><html><body style="margin:0;background:rgb{GREEN}">
<h1 style="font-family:sans-serif">Hello from the test page</h1></body></html>"""
TALL = """<!doctype html><html><body style="margin:0">
<div style="height:20000px;background:linear-gradient(#f00,#00f)"></div></body></html>"""


class Site:
    """An aiohttp server on 127.0.0.1:<ephemeral>; ``hits`` lists the paths it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.port = 0
        self.release = asyncio.Event()  # ``/held`` answers once this is set
        self._runner: web.AppRunner | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Site:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/", self._page)
        app.router.add_get("/tall", self._tall)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/embed", self._embed)
        app.router.add_get("/pixel.png", self._page)
        app.router.add_get("/ws", self._page)
        app.router.add_get("/held", self._held)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        self.release.set()
        await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.hits.append(request.path)
        return await handler(request)

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def _held(self, request: web.Request) -> web.Response:
        """The green page, once :attr:`release` is set: a page load the test holds open while it looks around."""
        await self.release.wait()
        return web.Response(text=PAGE, content_type="text/html")

    async def _tall(self, request: web.Request) -> web.Response:
        return web.Response(text=TALL, content_type="text/html")

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def _embed(self, request: web.Request) -> web.Response:
        """A page that reaches for ``src`` as an image, a fetch, an iframe and a WebSocket."""
        src = html.escape(request.query["src"], quote=True)
        body = f"""<!doctype html><html><body style="margin:0;background:rgb{GREEN}">
<img src="{src}/pixel.png"><iframe src="{src}/"></iframe>
<script>fetch("{src}/").catch(()=>{{}}); try {{ new WebSocket("{src.replace("http", "ws")}/ws"); }} catch (e) {{}}</script>
</body></html>"""
        return web.Response(text=body, content_type="text/html")
