"""The Triton install inside the nvidia-pytriton wheel: where the binary, its Python backend and
the stub for this Python are, a writable copy of the backend, and the environment the server
process needs (``nmtserve.server.launcher`` runs it).

What the wheel needs, found by reading ``pytriton/triton.py``, ``pytriton/server/triton_server.py``
and ``ldd`` of its files (nvidia-pytriton 0.7.0 = Triton 2.51.0):

- ``pytriton/tritonserver/bin/tritonserver`` is the server; its shared libraries live in
  ``site-packages/nvidia_pytriton.libs`` and are found through an RPATH relative to the file.
- ``pytriton/tritonserver/backends/python/`` holds ``libtriton_python.so`` but no stub: the stub
  is built per Python version under ``python_backend_stubs/<major.minor>/`` and must sit next to
  ``libtriton_python.so`` (the backend starts ``<backend dir>/triton_python_backend_stub``).
  PyTriton copies the whole tree into a workspace and adds the stub there; we copy only the
  python backend into a user cache directory so site-packages is never written to.
- A copied library's RPATH (``$ORIGIN/../../../../nvidia_pytriton.libs``) no longer resolves,
  so, like PyTriton, the child gets ``nvidia_pytriton.libs`` on ``LD_LIBRARY_PATH``.
- The stub embeds ``libpython<major.minor>.so.1.0`` and finds its packages through the first
  ``python3`` on ``PATH`` (PYTHONPATH is ignored), so the running interpreter's ``bin`` goes
  first on ``PATH`` (PyTriton does the same) and its ``LIBDIR`` on ``LD_LIBRARY_PATH`` (so the
  stub embeds the same build of Python as the environment whose packages it imports).

Nothing here imports torch, or pytriton itself (only its files are used).
"""

from __future__ import annotations

import ctypes.util
import filecmp
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from ..decoding.native import TRITON_BACKEND_LIBRARY as NMTSERVE_BACKEND_LIBRARY
from ..decoding.native import triton_backend_library as nmtserve_backend_library

LOGGER = logging.getLogger("nmtserve.server.launcher")

INSTALL_HINT = "pip install 'nmtserve[server]'"
STUB_NAME = "triton_python_backend_stub"
# The Python backend's own files: the backend library and the module the stub imports.
PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
# nmtserve's own backend (native/triton/backend.cpp, built into nmtserve_native where libpython
# was found): generate inside the server process (``export --generate-backend nmtserve``).
NMTSERVE_BACKEND = "nmtserve"
# The interpreter the nmtserve backend embeds (its packages, this environment's).
NMTSERVE_PYTHON_ENV = "NMTSERVE_PYTHON"
# nvidia-pytriton's version says nothing about the Triton inside; the wheel's metadata does not
# record it either (only the server's start-up banner prints it). Known pairs name the cache
# directory after the Triton version; unknown ones fall back to the PyTriton version.
TRITON_VERSION_BY_PYTRITON = {"0.7.0": "2.51.0"}
# How much of the server log a start-up error quotes.

class ServerError(RuntimeError):
    """Base class of the launcher's errors."""


class TritonNotInstalledError(ServerError):
    """The tritonserver binary or a part of it is missing."""

# --------------------------------------------------------------------------------------------
# Finding the binary


@dataclass(frozen=True)
class TritonInstall:
    """Where the parts of the tritonserver shipped in the nvidia-pytriton wheel are."""

    root: Path  # .../site-packages/pytriton/tritonserver
    binary: Path  # root/bin/tritonserver
    python_backend_dir: Path  # root/backends/python (libtriton_python.so, no stub)
    stub: Path  # root/python_backend_stubs/<py>/triton_python_backend_stub
    caches_dir: Path  # root/caches (response-cache implementations)
    library_dirs: tuple[Path, ...]  # must be on LD_LIBRARY_PATH of the server and its stubs
    pytriton_version: str
    triton_version: str
    python_version: str  # "3.11": the stub matches the running interpreter
    # A full Triton install (the NGC image's /opt/tritonserver): its backends directory holds
    # every backend (tensorrt, python with its stub) and is used as it is, or linked beside
    # nmtserve's backend where nmtserve_native has one (prepare_backend_directory).
    system: bool = False


def _pytriton_package_dir() -> Path | None:
    # find_spec on a top-level name locates the package without importing it: importing pytriton
    # pulls in zmq, sh and its logging set-up, none of which the launcher needs.
    spec = util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _python_library_dir() -> Path | None:
    """The directory holding this interpreter's shared libpython, if it has one outside the
    system library path (pyenv, uv and conda builds do); None when there is nothing to add."""
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME")
    if not libdir or not soname or not (Path(libdir) / soname).is_file():
        return None
    # The dynamic linker searches the system directories anyway.
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    system_dirs = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
    if multiarch:
        system_dirs += [f"/lib/{multiarch}", f"/usr/lib/{multiarch}"]
    if Path(libdir).resolve() in {Path(d).resolve() for d in system_dirs}:
        return None
    return Path(libdir)


TRITON_ROOT_ENV = "NMTSERVE_TRITON_ROOT"
NGC_TRITON_ROOT = Path("/opt/tritonserver")


def system_tritonserver(root: Path) -> TritonInstall:
    """A full Triton install at ``root`` (``bin/tritonserver``, ``backends/``): the NGC image's
    ``/opt/tritonserver``, which the GPU container runs through ``nmtserve serve``."""
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        root=root, binary=root / "bin" / "tritonserver", python_backend_dir=root / "backends" / "python",
        stub=root / "backends" / "python" / STUB_NAME, caches_dir=root / "caches", library_dirs=(),
        pytriton_version="none", triton_version="system", python_version=python_version, system=True,
    )
    if not install.binary.is_file() or not os.access(install.binary, os.X_OK):
        raise TritonNotInstalledError(f"no tritonserver at {install.binary} ({TRITON_ROOT_ENV}={root})")
    if not install.python_backend_dir.is_dir():
        raise TritonNotInstalledError(f"the Triton install at {root} has no Python backend ({install.python_backend_dir})")
    return install


def find_tritonserver() -> TritonInstall:
    """Locate the tritonserver binary, the Python backend and the stub for this Python: a full
    Triton install named by $NMTSERVE_TRITON_ROOT (the GPU image sets /opt/tritonserver), else
    the one in the nvidia-pytriton wheel, else the NGC image's /opt/tritonserver.

    Raises TritonNotInstalledError naming the missing piece.
    """
    if os.environ.get(TRITON_ROOT_ENV):
        return system_tritonserver(Path(os.environ[TRITON_ROOT_ENV]))
    package_dir = _pytriton_package_dir()
    if package_dir is None and (NGC_TRITON_ROOT / "bin" / "tritonserver").is_file():
        return system_tritonserver(NGC_TRITON_ROOT)
    if package_dir is None:
        raise TritonNotInstalledError(
            "The embedded server needs the tritonserver binary shipped in the nvidia-pytriton "
            f"wheel, which is not installed. Install it with: {INSTALL_HINT}"
        )
    try:
        pytriton_version = metadata.version("nvidia-pytriton")
    except metadata.PackageNotFoundError:
        pytriton_version = "unknown"
    root = package_dir / "tritonserver"
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stubs_dir = root / "python_backend_stubs"
    install = TritonInstall(
        root=root,
        binary=root / "bin" / "tritonserver",
        python_backend_dir=root / "backends" / "python",
        stub=stubs_dir / python_version / STUB_NAME,
        caches_dir=root / "caches",
        # Same rule as pytriton.utils.distribution.get_libs_path for a wheel install.
        library_dirs=(package_dir.parent / "nvidia_pytriton.libs",),
        pytriton_version=pytriton_version,
        triton_version=TRITON_VERSION_BY_PYTRITON.get(
            pytriton_version, f"pytriton-{pytriton_version}"
        ),
        python_version=python_version,
    )

    broken = f"nvidia-pytriton {pytriton_version} at {package_dir} is incomplete"
    if not install.binary.is_file() or not os.access(install.binary, os.X_OK):
        raise TritonNotInstalledError(
            f"{broken}: the tritonserver binary {install.binary} is missing or not executable "
            f"(the wheel is built for Linux x86_64 and aarch64). Reinstall it with: {INSTALL_HINT}"
        )
    for name in PYTHON_BACKEND_FILES:
        if not (install.python_backend_dir / name).is_file():
            raise TritonNotInstalledError(
                f"{broken}: the Python backend file {install.python_backend_dir / name} is "
                f"missing. Reinstall it with: {INSTALL_HINT}"
            )
    if not install.stub.is_file():
        available = sorted(p.name for p in stubs_dir.iterdir()) if stubs_dir.is_dir() else []
        raise TritonNotInstalledError(
            f"nvidia-pytriton {pytriton_version} has no Python backend stub for Python "
            f"{python_version} ({install.stub} is missing; stubs exist for: "
            f"{', '.join(available) or 'none'}). Use one of those Python versions."
        )
    for libdir in install.library_dirs:
        if not libdir.is_dir():
            raise TritonNotInstalledError(
                f"{broken}: its library directory {libdir} is missing. "
                f"Reinstall it with: {INSTALL_HINT}"
            )
    return install


# --------------------------------------------------------------------------------------------
# The backend directory


def default_cache_dir() -> Path:
    """nmtserve's cache root: $NMTSERVE_CACHE_DIR, else $XDG_CACHE_HOME/nmtserve, else
    ~/.cache/nmtserve."""
    if os.environ.get("NMTSERVE_CACHE_DIR"):
        return Path(os.environ["NMTSERVE_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "nmtserve"


def _install_file(src: Path, dst: Path, mode: int) -> None:
    """Copy src to dst unless dst already has the same bytes.

    Writes a temporary file and renames it over dst, so a server started from an older copy
    keeps running (it holds the old inode) and two launchers preparing at once cannot leave a
    half-written file behind.
    """
    if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
        if dst.stat().st_mode & 0o777 != mode:
            dst.chmod(mode)
        return
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out, src.open("rb") as inp:
            shutil.copyfileobj(inp, out)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, dst)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    LOGGER.debug("installed %s -> %s", src, dst)


def prepare_backend_directory(install: TritonInstall, cache_dir: Path | None = None, pythonpath: str = "") -> Path:
    """Create (idempotently) a Triton backend directory with the Python backend and the stub
    for the running Python, and return it (the value for ``--backend-directory``).

    The layout is ``<cache_dir>/triton-backends/<triton version>/py<major.minor>/python/``;
    cache_dir defaults to default_cache_dir(). The Python version is part of the path because
    the stub is built for one version and environments of several versions may share a cache.
    Nothing is written into site-packages. A full install (``install.system``) keeps its own
    backends; where nmtserve_native has nmtserve's backend and the install does not, they are
    linked beside it under ``<cache_dir>/triton-backends/system-<hash>/`` (_linked_backend_directory).
    ``pythonpath``: the server's own PYTHONPATH, where a build of nmtserve_native there brings its
    backend (triton_backend_library).
    """
    own = install.root / "backends"
    library = nmtserve_backend_library(pythonpath)
    if install.system and (library is None or (own / NMTSERVE_BACKEND / NMTSERVE_BACKEND_LIBRARY).is_file()):
        return own  # a full install's own backends (tensorrt, python and its stub), as they are

    def prepare(root: Path) -> Path:
        return _linked_backend_directory(own, library, root) if install.system else _prepare_backend_directory(install, library, root)

    explicit = cache_dir is not None
    root = Path(cache_dir).expanduser() if explicit else default_cache_dir()
    try:
        return prepare(root)
    except OSError as exc:
        if explicit:
            raise ServerError(
                f"cannot prepare the Triton backend directory under {root}: {exc}"
            ) from exc
        # A read-only home (some containers) should not stop the server from starting.
        fallback = Path(tempfile.gettempdir()) / f"nmtserve-{os.getuid()}"
        LOGGER.warning(
            "cannot write the Triton backend directory under %s (%s); using %s instead "
            "(set NMTSERVE_CACHE_DIR to choose)",
            root,
            exc,
            fallback,
        )
        return prepare(fallback)


def _linked_backend_directory(own: Path, library: Path | None, root: Path) -> Path:
    """A full install's backends (the NGC image's /opt/tritonserver/backends), each a link to its
    own folder, beside nmtserve's backend: Triton takes one backend directory, and the install's
    is not ours to write into."""
    import hashlib

    backends = root / "triton-backends" / f"system-{hashlib.sha256(str(own.resolve()).encode()).hexdigest()[:12]}"
    backends.mkdir(parents=True, exist_ok=True)
    for entry in sorted(own.iterdir()) if own.is_dir() else ():
        link = backends / entry.name
        if entry.name == NMTSERVE_BACKEND or (link.is_symlink() and link.readlink() == entry):
            continue
        tmp = backends / f".{entry.name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(entry)
        os.replace(tmp, link)  # atomic: a server starting beside this one sees the old link or the new
    _install_nmtserve_backend(library, backends)
    return backends


def _install_nmtserve_backend(library: Path | None, backends: Path) -> None:
    """nmtserve_native's ``libtriton_nmtserve.so`` (``library``; None: not built) into ``backends``."""
    if library is not None:
        (backends / NMTSERVE_BACKEND).mkdir(exist_ok=True)
        _install_file(library, backends / NMTSERVE_BACKEND / NMTSERVE_BACKEND_LIBRARY, 0o755)


def _prepare_backend_directory(install: TritonInstall, library: Path | None, root: Path) -> Path:
    backends = root / "triton-backends" / install.triton_version / f"py{install.python_version}"
    python_dir = backends / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in PYTHON_BACKEND_FILES:
        _install_file(install.python_backend_dir / name, python_dir / name, 0o644)
    _install_file(install.stub, python_dir / STUB_NAME, 0o755)
    _install_nmtserve_backend(library, backends)
    return backends

def _server_env(install: TritonInstall, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    # Mirror pytriton.server.triton_server.TritonServer._get_env: the wheel's libraries on
    # LD_LIBRARY_PATH (appended, so a user's own entries keep precedence) and this
    # environment's bin first on PATH (the stub resolves sys.prefix through `python3` on PATH).
    library_dirs = [str(d) for d in install.library_dirs]
    python_libdir = _python_library_dir()
    if python_libdir is not None:
        library_dirs.append(str(python_libdir))
    existing = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        existing + [d for d in library_dirs if d not in existing]
    )
    # sys.exec_prefix/bin is the venv's bin even when sys.executable is a symlink elsewhere.
    python_bin = Path(sys.exec_prefix) / "bin"
    if not (python_bin / "python3").exists():
        python_bin = Path(sys.executable).parent
    env["PATH"] = os.pathsep.join([str(python_bin), env.get("PATH", os.defpath)])
    env.setdefault(NMTSERVE_PYTHON_ENV, sys.executable)
    return env

def _system_has_libpython() -> bool:
    return (
        ctypes.util.find_library(f"python{sys.version_info.major}.{sys.version_info.minor}")
        is not None
    )
