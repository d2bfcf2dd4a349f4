"""What a server leaves on the machine, named by the launcher process that started it, so that
it is removed at its stop and a dead launcher's leftovers are reaped at the next start:

* the Python backend's shared-memory regions (``/dev/shm``), named through its
  ``shm-region-prefix-name`` option (``nmtserve-shm-<launcher pid>-<n>-...``);
* the tritonserver log a server without ``log_file`` writes to the temporary directory
  (``nmtserve-tritonserver-<launcher pid>-...log``);
* the drain flag and its acknowledgements (``nmtserve-drain-<launcher pid>-...``, drain.py).

A launcher killed with SIGKILL cannot clean up; the next launcher on the machine reaps what
belongs to launchers that no longer run. Files of live launchers are never touched.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import tempfile
from pathlib import Path

LOGGER = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "nmtserve-shm-"
LOG_PREFIX = "nmtserve-tritonserver-"
DRAIN_PREFIX = "nmtserve-drain-"
_PREFIXES = (SHM_PREFIX, LOG_PREFIX, DRAIN_PREFIX)
_OWNER = re.compile(r"(\d+)-")
_servers = itertools.count(1)


def shm_prefix() -> str:
    """A fresh shared-memory prefix for one server of this launcher."""
    return f"{SHM_PREFIX}{os.getpid()}-{next(_servers)}-"


def log_prefix() -> str:
    return f"{LOG_PREFIX}{os.getpid()}-"


def drain_prefix() -> str:
    return f"{DRAIN_PREFIX}{os.getpid()}-"


def remove_shm(prefix: str) -> int:
    """Remove the shared-memory regions named ``prefix...``; how many there were."""
    removed = 0
    for region in SHM_DIR.glob(f"{prefix}*") if SHM_DIR.is_dir() else ():
        region.unlink(missing_ok=True)
        removed += 1
    return removed


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to touch
        return True
    return True


def present() -> dict[Path, int]:
    """Every server leftover on the machine (shared memory, temporary logs, drain flags) -> the
    pid of the launcher that made it."""
    found = {}
    for folder in (SHM_DIR, Path(tempfile.gettempdir())):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            prefix = next((p for p in _PREFIXES if path.name.startswith(p)), None)
            owner = _OWNER.match(path.name[len(prefix):]) if prefix else None
            if owner is not None:
                found[path] = int(owner.group(1))
    return found


def reap() -> list[Path]:
    """Remove what launchers that no longer run left behind; the paths removed."""
    removed = []
    for path, owner in present().items():
        if is_alive(owner):
            continue
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    if removed:
        LOGGER.info("removed %d files left by stopped servers (shared memory, logs, drain flags)", len(removed))
    return removed
