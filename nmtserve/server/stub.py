"""What every Python-backend model of nmtserve needs from the Triton stub: its utilities
(``pb_utils``, importable only inside a stub), errors with the status a client can act on,
inputs as arrays, the model's parameters, and a final response sent through a response sender."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from pathlib import Path

import numpy as np

log = logging.getLogger("nmtserve.server")

try:  # only importable inside the Triton Python backend stub
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - unit tests import this module outside Triton
    pb_utils = None


def error(message: str, invalid: bool = True):
    code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
    return pb_utils.TritonError(message, code)


def engine_error(prefix: str, exc: BaseException):
    """An engine failure as the status a client can act on: UNAVAILABLE while the server shuts
    down or is overloaded (retry later or elsewhere), CANCELLED for a cancelled request, INVALID_ARG for a request the
    engine refuses, INTERNAL otherwise."""
    from ..engine import EngineBusy, EngineStopped, RequestCancelled

    errors = pb_utils.TritonError
    if isinstance(exc, (EngineStopped, EngineBusy)):
        code = getattr(errors, "UNAVAILABLE", errors.INTERNAL)
    elif isinstance(exc, RequestCancelled):
        code = getattr(errors, "CANCELLED", errors.INTERNAL)
    elif isinstance(exc, ValueError):  # refused at submit (a limit of the engine)
        code = errors.INVALID_ARG
    else:
        code = errors.INTERNAL
    return pb_utils.TritonError(f"{prefix}{exc}", code)


def input_array(request, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def input_arrays(request) -> dict[str, np.ndarray]:
    """Every input the request carries, by name, read in one pass. ``pb_utils``'s
    ``get_input_tensor_by_name`` lists the request's tensors again at every call: ``generate``
    looks up some 25 names a request (most of them absent), ~4 us each (bench/RESULTS.md
    "Session 27"). The arrays are views of the request's memory, valid until ``execute`` returns."""
    return {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}


def outputs_parameter(raw: str) -> str | None:
    """A request's ``outputs`` parameter (contract.OUTPUTS_PARAMETER) from its parameters' JSON
    text, or None without one; InputError when it is not a string."""
    from ..contract import OUTPUTS_PARAMETER
    from .protocol import InputError

    if OUTPUTS_PARAMETER not in raw:  # most requests carry no parameter ("{}")
        return None
    value = json.loads(raw).get(OUTPUTS_PARAMETER)
    if value is not None and not isinstance(value, str):
        raise InputError(f"the '{OUTPUTS_PARAMETER}' parameter must be a string of comma-separated output "
                         f"names, got {value!r}")
    return value


def wanted_outputs(request, outputs: Collection[str], narrow: bool = True) -> frozenset[str] | None:
    """The outputs of ``outputs`` (the model's) that ``request`` will read, or None for all: those
    Triton asks for (all through an ensemble), narrowed (``narrow``: a model that answers the
    translate contract's outputs) to the names of its ``outputs`` parameter
    (contract.OUTPUTS_PARAMETER). InputError names a parameter that is not a list of them."""
    from ..contract import OUTPUTS_PARAMETER
    from .protocol import InputError

    wanted = set(request.requested_output_names())
    value = outputs_parameter(request.parameters()) if narrow else None
    if value is not None:
        named = {name.strip() for name in value.split(",")} - {""}
        unknown = sorted(named - set(outputs))
        if unknown or not named:
            raise InputError(f"the '{OUTPUTS_PARAMETER}' parameter names {', '.join(map(repr, unknown)) or 'no output'}: "
                             f"this model's outputs are {', '.join(outputs)}")
        wanted = wanted & named if wanted else named
    return None if not wanted or wanted.issuperset(outputs) else frozenset(wanted)


def parameters(args: dict) -> tuple[dict, Path]:
    config = json.loads(args["model_config"])
    params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
    version_dir = Path(args["model_repository"]) / args["model_version"]
    return params, version_dir


def artifacts(params: dict, version_dir: Path) -> Path:
    """Folder holding the exported artifacts (ONNX, model.json, sentencepiece models)."""
    return (version_dir / params.get("artifacts", ".")).resolve()




def send_final(sender, response) -> None:
    """Send a request's one (final) response; a client that went away is logged, not raised."""
    try:
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    except Exception:
        log.exception("could not send a response")


# Bytes above which glibc's malloc maps a block of its own (given back to the system when freed).
LARGE_BLOCK_BYTES = 1 << 20
M_MMAP_THRESHOLD = -3  # <malloc.h>


def return_large_blocks() -> bool:
    """Large blocks freed go back to the system at once (glibc only; False elsewhere).

    By default glibc raises its threshold for mapping a block on its own each time such a block is
    freed, up to 32 MiB; past that, blocks up to that size come from the threads' arenas and stay
    there once freed. A decode loop's large, short-lived arrays (an NLLB-200 batch's encoder
    outputs: 24 arrays of ~4 MB) then held ~60 MB in each thread's arena after the batch. A fixed
    threshold keeps them out of the arenas; the small per-step arrays of small models are far
    below it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES))
    except (OSError, AttributeError):  # not glibc
        return False
