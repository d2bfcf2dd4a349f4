"""nmtserve's Python models inside the tritonserver process: the Python side of the ``nmtserve``
Triton backend (``native/triton/backend.cpp``, built into ``nmtserve_native``).

The backend embeds the interpreter of nmtserve's environment in the server and calls
``load(args)`` once per model instance, then ``execute_batch`` with the requests Triton hands it.
The model classes are the Python backend's (``triton_models.GenerateModel``): before they are
imported, this module puts a stand-in for the Python backend's ``triton_python_backend_utils``
in ``sys.modules``, with the part of it nmtserve uses (``Tensor``, ``InferenceResponse``,
``TritonError``, ``MetricFamily``, response senders), built on the backend's ``_nmtserve_triton``
module. So one code path serves under both backends, and a request's answer goes into Triton's
buffers from the engine's thread with no stub process and no shared-memory round trip between.

Not available here: BLS calls (``pb_utils.InferenceRequest``), which only the front doors make
(documents, the pair router); they stay on the Python backend.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
# The model classes this backend serves, by the ``nmtserve_model`` parameter of a config.
MODELS = {"generate": "nmtserve.server.triton_models:GenerateModel"}


class TritonError(Exception):
    """An error a response carries: a message and one of the codes (class attributes)."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG = 0, 1, 2, 3
    UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = 4, 5, 6, 7

    def __init__(self, message: str, code: int = 1) -> None:  # INTERNAL
        super().__init__(message)
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    """A named array (an input of a request, an output of a response)."""

    __slots__ = ("_name", "_array")

    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    """A request's answer: output tensors, or an error."""

    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self._outputs, self._error = list(output_tensors or ()), error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class ResponseSender:
    """A request's one final response (the backend's response factory)."""

    __slots__ = ("_factory",)

    def __init__(self, factory) -> None:
        self._factory = factory

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL or response is None:
            raise TritonError("a request of this backend gets one final response (flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)")
        error = response.error()
        if error is not None:
            self._factory.send_error(error.code(), error.message())
        else:
            self._factory.send_outputs([(t.name(), t.as_numpy()) for t in response.output_tensors()])

    def is_cancelled(self) -> bool:
        return self._factory.is_cancelled()


class InferenceRequest:
    """A request as ``execute`` sees it: its inputs, the outputs Triton asks for, its parameters
    (JSON, as the Python backend gives them), its timeout and its response sender."""

    __slots__ = ("_inputs", "_outputs", "_parameters", "_sender", "_timeout")

    def __init__(self, inputs: dict[str, np.ndarray], outputs: list[str], parameters: dict, factory,
                 timeout_us: int = 0) -> None:
        self._inputs, self._outputs, self._parameters = inputs, outputs, parameters
        self._sender, self._timeout = ResponseSender(factory), timeout_us

    def inputs(self) -> list[Tensor]:
        return [Tensor(name, array) for name, array in self._inputs.items()]

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def parameters(self) -> str:
        return json.dumps(self._parameters) if self._parameters else "{}"

    def get_response_sender(self) -> ResponseSender:
        return self._sender

    def timeout(self) -> int:
        """Triton's timeout of the request, microseconds (0: none)."""
        return self._timeout


class _Metric:
    __slots__ = ("_family", "_index")

    def __init__(self, family, index: int) -> None:
        self._family, self._index = family, index

    def set(self, value: float) -> None:
        self._family.set(self._index, float(value))

    def increment(self, value: float) -> None:
        self._family.increment(self._index, float(value))


def _utils_module() -> types.ModuleType:
    """The stand-in for ``triton_python_backend_utils``, on the backend's ``_nmtserve_triton``."""
    import _nmtserve_triton as backend  # type: ignore[import-not-found]  # only inside the nmtserve backend

    class MetricFamily:
        """A Triton custom metric family (``/metrics``)."""

        COUNTER, GAUGE = backend.COUNTER, backend.GAUGE

        def __init__(self, name: str, description: str, kind: int) -> None:
            self._family = backend.MetricFamily(name, description, kind)

        def Metric(self, labels: dict[str, str] | None = None) -> _Metric:  # noqa: N802 - pb_utils' name
            return _Metric(self._family, self._family.metric({k: str(v) for k, v in (labels or {}).items()}))

    def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
        array = request._inputs.get(name)
        return None if array is None else Tensor(name, array)

    def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
        return next((t for t in response.output_tensors() if t.name() == name), None)

    module = types.ModuleType("triton_python_backend_utils", "nmtserve's in-process stand-in (nmtserve.server.inprocess)")
    module.__dict__.update(TritonError=TritonError, Tensor=Tensor, InferenceResponse=InferenceResponse,
                           MetricFamily=MetricFamily, TRITONSERVER_RESPONSE_COMPLETE_FINAL=TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                           get_input_tensor_by_name=get_input_tensor_by_name,
                           get_output_tensor_by_name=get_output_tensor_by_name)
    return module


class Loaded:
    """One model instance as the backend drives it."""

    def __init__(self, model) -> None:
        self.model = model

    def execute_batch(self, batch: list[tuple]) -> None:
        """``(inputs, requested outputs, parameters, factory, timeout)`` per request, as the backend read them."""
        self.model.execute([InferenceRequest(*one) for one in batch])

    def finalize(self) -> None:
        if hasattr(self.model, "finalize"):
            self.model.finalize()


def load(args: dict) -> Loaded:
    """The model of a config's ``nmtserve_model`` parameter (default ``generate``), initialized."""
    import importlib
    import logging

    if "triton_python_backend_utils" not in sys.modules:
        sys.modules["triton_python_backend_utils"] = _utils_module()
    if not logging.getLogger().handlers:  # as the Python backend's stub: the model's log goes to the server's
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = json.loads(args["model_config"])
    which = config.get("parameters", {}).get("nmtserve_model", {}).get("string_value", "generate")
    if which not in MODELS:
        raise ValueError(f"the nmtserve backend serves {', '.join(MODELS)}, not {which!r} (parameter nmtserve_model)")
    module, name = MODELS[which].split(":")
    model = getattr(importlib.import_module(module), name)()
    model.initialize(args)
    logging.getLogger("nmtserve.server").info("%s", loaded_from(args.get("model_name", which)))
    return Loaded(model)


LOADED_FROM = "nmtserve backend: {model} runs nmtserve from {package}, nmtserve_native from {native}"


def loaded_from(model: str) -> str:
    """Which nmtserve and nmtserve_native the server's interpreter imported (the log line that says
    so: the interpreter is this environment's, with PYTHONPATH first, bench/served_ab.py's sides)."""
    import nmtserve

    native = sys.modules.get("nmtserve_native")
    return LOADED_FROM.format(model=model, package=Path(nmtserve.__file__).parent,
                              native=getattr(native, "__file__", None) or "nowhere (not installed)")
