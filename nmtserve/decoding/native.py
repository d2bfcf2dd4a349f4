"""The beam search's step in compiled code, when it is installed (issue 49).

``nmtserve_native`` (the ``native/`` folder: C++ with pybind11, built by scikit-build-core;
``scripts/setup.sh`` and the images install it) ranks a step's candidates and applies them to a
``BeamBatch``'s arrays. The Python search in ``search.py`` stays the reference: the compiled step
repeats its rules in the same float64 arithmetic and leaves every array as the Python step does
(tests/test_native_search.py, step by step and on served decodes).

Why C++ with pybind11 (the candidates were a C++ extension, a Rust one with PyO3, and ONNX
Runtime's fused operators with a native search around them): the step is ~200 lines of loops over
small arrays that the batch already holds, the machines build C++ with what they have (g++,
cmake) and pip fetches scikit-build-core and pybind11; the same language reaches ONNX Runtime's
C API and TensorRT's C++ API for the decode loop's next part; fused operators cut the graph's
nodes, not the search's Python (and bench/step_profile.py measured ONNX Runtime's per-node cost
small next to the kernels and the Python).

A batch takes the compiled step when the module is importable, ``NMTSERVE_NATIVE_SEARCH`` is not
``0`` and the step is on ``Candidates`` with no repetition control or terminology constraint live
(those, and full-vocabulary steps, stay in Python). ``BeamBatch.native`` can turn it off per batch.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

ABI = 11  # the nmtserve_native.ABI this module was written for


# nmtserve's Triton backend (native/triton/backend.cpp), installed beside the module where it was
# built with libpython: ``generate`` inside the server process (nmtserve.server.install).
TRITON_BACKEND_LIBRARY = "libtriton_nmtserve.so"


def triton_backend_library(pythonpath: str = "") -> Path | None:
    """``libtriton_nmtserve.so`` as nmtserve_native installed it; None where it was not built (no
    libpython when nmtserve_native was built) or nmtserve_native is not installed.

    ``pythonpath``: a server's own PYTHONPATH (its ``ServerConfig.env``): the backend's embedded
    interpreter imports nmtserve_native from there first, so the library beside that build is the
    one that matches it (bench/served_ab.py's sides)."""
    for folder in (Path(p) for p in pythonpath.split(os.pathsep) if p):
        if (folder / "nmtserve_native").is_dir() or any(folder.glob("nmtserve_native*.so")):
            path = folder / "nmtserve_triton_backend" / TRITON_BACKEND_LIBRARY
            return path if path.is_file() else None
    spec = importlib.util.find_spec("nmtserve_native")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "nmtserve_triton_backend" / TRITON_BACKEND_LIBRARY
    return path if path.is_file() else None


def _load() -> ModuleType | None:
    if os.environ.get("NMTSERVE_NATIVE_SEARCH", "1") == "0":
        return None
    try:
        nmtserve_native = importlib.import_module("nmtserve_native")  # a separate distribution: native/
    except ImportError:
        return None
    if getattr(nmtserve_native, "ABI", None) != ABI:
        log.warning("nmtserve_native has ABI %s, this nmtserve wants %s: using the Python search "
                    "(reinstall it: pip install ./native)", getattr(nmtserve_native, "ABI", None), ABI)
        return None
    return nmtserve_native


module = _load()


def available() -> bool:
    """Whether the compiled step is there (and not turned off)."""
    return module is not None
