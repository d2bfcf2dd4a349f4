"""Triton model `tokenize` of nmtserve: the logic lives in nmtserve.server.triton_models.TokenizeModel."""

from nmtserve.server.triton_models import TokenizeModel as TritonPythonModel  # noqa: F401
