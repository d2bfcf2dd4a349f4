"""``nmtserve gateway``: the LibreTranslate/DeepL gateway and the web page, on uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ..exitcodes import EXIT_OK, EXIT_USAGE
from .config import GatewayConfig, limits_from_args, read_api_keys
from .languages import parse_pairs

LOGGER = logging.getLogger(__name__)


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    """The gateway's settings from ``nmtserve gateway``'s options; ValueError names a bad one."""
    from nmtserve.client import _constants as C
    from nmtserve.client.cli import connection

    reach = connection(args)  # --url, --header, --tls*: as `nmtserve translate` reads them
    urls = [u.strip() for u in reach["url"] or [C.DEFAULT_URL] if u.strip()]
    languages = [p for item in args.languages or [] for p in item.split(",") if p.strip()] or None
    detect = [c.strip() for item in args.detect_languages or [] for c in item.split(",") if c.strip()] or None
    if languages:
        parse_pairs(languages)  # raises naming a malformed pair
    for name in ("port", "concurrency"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    return GatewayConfig(
        url=urls, protocol=args.protocol, model=args.model, timeout=args.timeout,
        concurrency=args.concurrency, headers=reach["headers"], tls=reach["tls"], languages=languages,
        detect_languages=detect,
        api_keys=read_api_keys(Path(args.api_keys)) if args.api_keys else None,
        limits=limits_from_args(args),  # every limit and timeout: config.Limits
        frontend_timeout_ms=args.frontend_timeout,
        files_dir=Path(args.files_dir) if args.files_dir else None,
        glossaries_dir=Path(args.glossaries_dir) if getattr(args, "glossaries_dir", None) else None,
    )


def gateway_main(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .app import create_app
        from .connections import ensure_descriptors, guarded_protocol
    except ImportError as exc:
        print(f"nmtserve gateway: error: {exc.name} is not installed: pip install 'nmtserve[gateway]'",
              file=sys.stderr)
        return EXIT_USAGE
    from nmtserve.client.cli import UsageError

    try:
        config = config_from_args(args)
    except (OSError, ValueError, UsageError) as exc:
        print(f"nmtserve gateway: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    banner = (
        f"nmtserve gateway: http://{display_host(args.host)}:{args.port}/  "
        f"(web page; LibreTranslate API at /translate, /languages, ...; DeepL API v2 at /v2/...) "
        f"-> Triton at {', '.join(config.url)} ({config.protocol})"
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                print(banner, flush=True)

    limits = config.limits
    ensure_descriptors(limits.max_connections)
    # The header, body and idle timeouts and the connection cap (connections.py says why not
    # uvicorn's limit_concurrency); WebSockets are not served.
    server = Server(uvicorn.Config(
        create_app(config), host=args.host, port=args.port, access_log=args.access_log,
        log_level="info" if args.access_log else "warning", timeout_graceful_shutdown=5,
        proxy_headers=True, server_header=False, http=guarded_protocol(limits), ws="none",
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
    ))
    server.run()
    return EXIT_OK if server.started else 1


def display_host(host: str) -> str:
    """The address a local client dials for a server bound to ``host`` (0.0.0.0: loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, f"[{host}]" if ":" in host else host)
