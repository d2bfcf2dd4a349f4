"""Close the clients' idle HTTP connections of a stopping tritonserver, so it need not wait for them.

On SIGINT Triton stops accepting HTTP connections and then polls, once a second, until every
open one has ended or ``--exit-timeout-secs`` has passed (triton-inference-server/server#6986).
A client that keeps its connection alive between requests (``tritonclient.http``, nmtserve's
HTTP ``Translator``, a load balancer, a dashboard, a metrics scraper) never ends it, so every
stop took the whole exit timeout and then failed the unload ("Exit timeout expired").

Once ``generate`` has answered what it held (the drain), the launcher ends those connections
itself: it takes a duplicate of each of tritonserver's established sockets on the HTTP and
metrics ports with ``pidfd_getfd(2)`` (Linux 5.6; allowed to the parent of the process under
the default ptrace rules) and shuts it down, which ends the connection for both sides (the
client sees the server close it, as after any keep-alive timeout, and reconnects for its next
request). Where the kernel or a seccomp profile refuses, nothing is closed and Triton waits as
before; the caller says so.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from collections.abc import Iterable

_SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture (asm-generic)
_ESTABLISHED = "01"


def _socket_fds(pid: int) -> dict[str, int]:
    """inode -> fd of the process's sockets."""
    found = {}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            link = os.readlink(f"{base}/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found[link[8:-1]] = int(name)
    return found


def established_inodes(ports: Iterable[int], tables: Iterable[str] = ("/proc/net/tcp", "/proc/net/tcp6")) -> set[str]:
    """Socket inodes of established TCP connections whose local port is one of ``ports``."""
    wanted = set(ports)
    inodes = set()
    for table in tables:
        try:
            lines = open(table, encoding="ascii").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _ESTABLISHED and int(fields[1].rsplit(":", 1)[1], 16) in wanted:
                inodes.add(fields[9])
    return inodes


def close_client_connections(pid: int, ports: Iterable[int]) -> tuple[int, str | None]:
    """Shut down the process's established connections on ``ports``: (how many, why none could be)."""
    try:
        fds = _socket_fds(pid)
    except OSError as exc:
        return 0, f"cannot list the sockets of pid {pid}: {exc.strerror}"
    established = established_inodes(ports)  # read the TCP tables once, not once per socket
    targets = [fd for inode, fd in fds.items() if inode in established]
    if not targets:
        return 0, None
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        return 0, f"pidfd_open: {exc.strerror}"
    closed = 0
    try:
        for fd in targets:
            dup = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if dup < 0:
                code = ctypes.get_errno()
                if code in (errno.EBADF, errno.ENOENT):  # closed meanwhile by its client
                    continue
                return closed, f"pidfd_getfd: {os.strerror(code)}"
            with socket.socket(fileno=dup) as conn:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                    closed += 1
                except OSError:  # ended meanwhile
                    pass
    finally:
        os.close(pidfd)
    return closed, None
