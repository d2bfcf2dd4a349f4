"""``nmtserve serve``: the real tritonserver (the nvidia-pytriton wheel's on CPU, the NGC image's
/opt/tritonserver in the GPU container) with nmtserve's start-up checks, watchdog and stop."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .launcher import ServerConfig, ServerError, serve_forever


def serve_main(args: argparse.Namespace) -> int:
    try:
        config = ServerConfig(
            model_repository=Path(args.model_repository), host=args.host, http_port=args.http_port,
            grpc_port=args.grpc_port, metrics_port=args.metrics_port, log_verbose=args.log_verbose,
            log_stream=sys.stderr if args.log_verbose or getattr(args, "console_log", False) else None,
            extra_args=tuple(getattr(args, "tritonserver_arg", None) or ()),
            startup_timeout_s=getattr(args, "startup_timeout", None) or ServerConfig.startup_timeout_s,
        )
        return serve_forever(config)
    except (ServerError, ValueError) as exc:
        print(f"nmtserve serve: error: {exc}", file=sys.stderr)
        return 1
