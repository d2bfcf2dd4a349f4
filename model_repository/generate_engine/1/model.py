"""Triton model `generate_engine` of nmtserve: the logic lives in nmtserve.server.triton_models.GenerateEngineModel."""

from nmtserve.server.triton_models import GenerateEngineModel as TritonPythonModel  # noqa: F401
