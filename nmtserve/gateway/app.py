"""The ASGI application: LibreTranslate's API at the root, DeepL's under /v2, the page at /."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

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


def create_app(config: GatewayConfig) -> Starlette:
    service = Service(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
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
    cors = Middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST"],
                      allow_headers=["Authorization", "Content-Type"], max_age=20 * 24 * 3600)
    app = Starlette(routes=routes, middleware=[cors], lifespan=lifespan)
    app.state.service = service
    return app
