"""``nmtserve serve --gateway-port PORT``: the gateway as a child process beside Triton.

The gateway needs no ready Triton to start (it reads the languages once Triton answers), so it
starts at once and stops when ``serve`` returns.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from .cli import display_host


@contextmanager
def gateway_beside(args: argparse.Namespace) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``nmtserve gateway`` on ``args.gateway_port`` (bound like Triton, to ``args.host``),
    pointed at the gRPC port of the server ``args`` describes."""
    missing = [m for m in ("starlette", "uvicorn", "lingua") if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"nmtserve serve: --gateway-port needs nmtserve[gateway] (missing: {', '.join(missing)}): "
                         "pip install 'nmtserve[gateway]'")
    triton = f"{display_host(args.host)}:{args.grpc_port}"
    command = [sys.executable, "-m", "nmtserve.cli", "gateway", "--url", triton,
               "--host", args.host, "--port", str(args.gateway_port)]
    process = subprocess.Popen(command)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
