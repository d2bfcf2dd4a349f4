"""Triton model `generate` of nmtserve: the logic lives in nmtserve.server.triton_models.GenerateModel."""

from nmtserve.server.triton_models import GenerateModel as TritonPythonModel  # noqa: F401
