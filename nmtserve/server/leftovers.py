"""What a server leaves on the machine, named by the launcher process that started it, so that
it is removed at its stop and a dead launcher's leftovers are reaped at the next start:

* the Python backend's shared-memory regions (``/dev/shm``), named through its
  ``shm-region-prefix-name`` option (``nmtserve-shm-<launcher pid>-<n>-...``);
* the tritonserver log a server without ``log_file`` writes to the temporary directory
  (``nmtserve-tritonserver-<launcher pid>-...log``);
* the drain flag and its acknowledgements (``nmtserve-drain-<launcher pid>-...``, drain.py);
* the Python backend's environment folder, ``/tmp/python_env_XXXXXX`` (a path fixed in its code,
  made when the backend loads and removed by a destructor that a stopped server never runs): the
  ones that appear while a server starts are recorded in ``nmtserve-pyenv-<launcher pid>-...``
  and removed at its stop, or by the next launcher if this one was killed (only while empty: a
  folder another Triton extracted an environment into is never touched).

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
PYENV_PREFIX = "nmtserve-pyenv-"
_PREFIXES = (SHM_PREFIX, LOG_PREFIX, DRAIN_PREFIX, PYENV_PREFIX)
PYTHON_ENV_DIR, PYTHON_ENV_GLOB = Path("/tmp"), "python_env_*"
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


def python_envs() -> set[Path]:
    """The Python backend's environment folders on the machine (every Triton's)."""
    return set(PYTHON_ENV_DIR.glob(PYTHON_ENV_GLOB)) if PYTHON_ENV_DIR.is_dir() else set()


def record_python_envs(before: set[Path], record: Path | None) -> Path | None:
    """Add the environment folders that appeared since ``before`` (the server being started made
    them) to ``record`` (a new one, named by this launcher, when None); the record, or None when
    there is nothing to record."""
    new = sorted(python_envs() - before)
    if not new:
        return record
    if record is None:
        fd, name = tempfile.mkstemp(prefix=f"{PYENV_PREFIX}{os.getpid()}-", suffix=".txt")
        os.close(fd)
        record = Path(name)
    with record.open("a", encoding="utf-8") as f:
        f.write("".join(f"{p}\n" for p in new))
    return record


def remove_python_envs(record: Path | None) -> int:
    """Remove the (empty) environment folders ``record`` lists, and the record; how many went."""
    if record is None:
        return 0
    removed = 0
    try:
        listed = record.read_text(encoding="utf-8").split()
    except OSError:
        listed = []
    for name in listed:
        path = Path(name)
        if path.parent != PYTHON_ENV_DIR or not path.name.startswith("python_env_"):
            continue  # the record names only what it was given
        try:
            path.rmdir()  # only when empty
            removed += 1
        except OSError:
            pass
    record.unlink(missing_ok=True)
    return removed


def reap() -> list[Path]:
    """Remove what launchers that no longer run left behind; the paths removed."""
    removed = []
    for path, owner in present().items():
        if is_alive(owner):
            continue
        if path.name.startswith(PYENV_PREFIX):
            remove_python_envs(path)
            removed.append(path)
            continue
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    if removed:
        LOGGER.info("removed %d files left by stopped servers (shared memory, logs, drain flags)", len(removed))
    return removed
