"""The ASGI application: LibreTranslate's API at the root, DeepL's under /v2, the page at /."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import deepl, libretranslate
from .config import GatewayConfig
from .service import Service

STATIC = Path(str(resources.files("nmtserve.gateway") / "static"))
DOWNLOADS = "/download_file/"
# Every answer: no MIME sniffing (a text answer is never run as a script or a page).
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff")]
# Every download besides: saved, never shown; and if a browser shows it anyway, with no script,
# no form, no request of its own (a translated .html keeps its <script>).
DOWNLOAD_HEADERS = [(b"content-security-policy", b"default-src 'none'; sandbox"),
                    (b"cache-control", b"private, no-store")]


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every response; on a download (``DOWNLOADS``)
    also ``DOWNLOAD_HEADERS`` and ``Content-Disposition: attachment`` when the route set none."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        download = scope.get("path", "").startswith(DOWNLOADS)

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                file = download and 200 <= message.get("status", 0) < 300
                headers = [(n, _attachment(v) if file and n.lower() == b"content-disposition" else v)
                           for n, v in message.get("headers", [])]
                names = {name.lower() for name, _ in headers}
                extra = SECURITY_HEADERS + (DOWNLOAD_HEADERS + [(b"content-disposition", b"attachment")] if file else [])
                headers += [(n, v) for n, v in extra if n not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _attachment(disposition: bytes) -> bytes:
    """``disposition`` as an attachment: "inline; filename=x" -> "attachment; filename=x"."""
    kind, sep, rest = disposition.partition(b";")
    return disposition if kind.strip().lower() == b"attachment" else b"attachment" + sep + rest


def create_app(config: GatewayConfig) -> Starlette:
    service = Service(config)
    limits = config.limits

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.start()
        purges = asyncio.create_task(service.files.run_purges(limits.purge_interval_s))
        try:
            yield
        finally:
            purges.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await purges
            await service.close()

    async def page(request: Request) -> FileResponse:
        return FileResponse(STATIC / "index.html")

    async def favicon(request: Request) -> FileResponse:  # browsers ask for it whatever the page links
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        *libretranslate.routes(service),
        *deepl.routes(service),
    ]
    # LibreTranslate answers browsers of any origin (extensions, web apps), and so does this.
    cors = Middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST", "DELETE"],
                      allow_headers=["Authorization", "Content-Type"], max_age=20 * 24 * 3600)
    app = Starlette(routes=routes, middleware=[Middleware(SecurityHeaders), cors], lifespan=lifespan)
    app.state.service = service
    app.state.limits = limits  # params.read_params reads --max-body-bytes here
    return app
