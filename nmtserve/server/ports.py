"""Ports and addresses of a server: whether its ports are free, free ports for tests, and the
URLs a local client dials."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Protocol

from .install import ServerError


class PortInUseError(ServerError):
    """A port the server should listen on is already taken."""


class _Listening(Protocol):
    """What the address helpers read of a ``ServerConfig``."""

    host: str
    http_port: int
    grpc_port: int
    metrics_port: int


@dataclass(frozen=True)
class ServerUrls:
    """Where a running server can be reached from this machine."""

    http: str  # "http://127.0.0.1:8000": curl, browsers, urllib
    grpc: str  # "grpc://127.0.0.1:8001"
    metrics: str  # "http://127.0.0.1:8002/metrics" (Prometheus)
    http_address: str  # "127.0.0.1:8000": tritonclient.http wants no scheme
    grpc_address: str  # "127.0.0.1:8001": tritonclient.grpc wants no scheme


def _client_host(host: str) -> str:
    """The address a local client should dial for a server bound to host."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def urls_for(config: _Listening) -> ServerUrls:
    host = _client_host(config.host)
    http_address = _host_port(host, config.http_port)
    grpc_address = _host_port(host, config.grpc_port)
    return ServerUrls(
        http=f"http://{http_address}",
        grpc=f"grpc://{grpc_address}",
        metrics=f"http://{_host_port(host, config.metrics_port)}/metrics",
        http_address=http_address,
        grpc_address=grpc_address,
    )


def _bind_probe(host: str, port: int) -> OSError | None:
    """Try to bind (host, port) the way the server will; return the error, if any."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return exc
    family, socktype, proto, _, address = infos[0]
    with socket.socket(family, socktype, proto) as sock:
        # Triton's gRPC and HTTP servers set SO_REUSEADDR, so a port left in TIME_WAIT by a
        # previous server is free for them; probing without it would report a false conflict.
        # A port with a listener is still refused.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc
    return None


def check_ports_free(config: _Listening) -> None:
    """Raise PortInUseError if a port of config cannot be bound on its host."""
    for name, port in (
        ("http", config.http_port),
        ("grpc", config.grpc_port),
        ("metrics", config.metrics_port),
    ):
        error = _bind_probe(config.host, port)
        if error is None:
            continue
        if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
            raise PortInUseError(
                f"port {port} ({name}) on {config.host} is already in use: stop what listens "
                f"there or choose another port"
            )
        raise PortInUseError(f"cannot bind port {port} ({name}) on {config.host}: {error}")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """count distinct TCP ports that are free on host right now (for tests).

    The probe sockets stay open until all are chosen, so the ports differ; another process
    may still take one before the server binds it.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(
                socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM
            )
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on host right now (for tests)."""
    return free_ports(1, host)[0]
