"""The stop handshake between the launcher and the ``generate`` models, written once.

The launcher names a flag file in each server's environment (``DRAIN_ENV``) and creates it when
it stops the server; every ``generate`` watching it answers what it decodes or holds with
UNAVAILABLE and acknowledges with a file of its own beside it; then the launcher signals
Triton, which no longer waits out its exit timeout. Both sides import this module alone, so a
model stub does not import the process manager.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

DRAIN_ENV = "NMTSERVE_DRAIN_FILE"


def new_flag() -> Path:
    """A fresh flag path (not created yet) for one server."""
    from .leftovers import drain_prefix

    fd, name = tempfile.mkstemp(prefix=drain_prefix())
    os.close(fd)
    os.unlink(name)
    return Path(name)


def flag_from_environment() -> Path | None:
    """The flag a model watches, when its server was started by the launcher."""
    value = os.environ.get(DRAIN_ENV)
    return Path(value) if value else None


def acknowledge(flag: Path) -> None:
    """A model has answered everything it held (one file per model process)."""
    Path(f"{flag}.drained.{os.getpid()}").touch()


def wait_acknowledged(flag: Path, until: float) -> bool:
    """Until a model acknowledged (or the monotonic time ``until``); whether one did."""
    pattern = f"{flag.name}.drained.*"
    while not any(flag.parent.glob(pattern)):
        if time.monotonic() >= until:
            return False
        time.sleep(0.005)
    return True


def remove(flag: Path) -> None:
    """The flag and every acknowledgement."""
    for leftover in flag.parent.glob(f"{flag.name}*"):
        leftover.unlink(missing_ok=True)
