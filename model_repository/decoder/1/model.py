"""Triton model `decoder` of nmtserve: the logic lives in nmtserve.server.triton_models.OnnxGraphModel."""

from nmtserve.server.triton_models import OnnxGraphModel as TritonPythonModel  # noqa: F401
