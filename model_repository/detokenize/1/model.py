"""Triton model `detokenize` of nmtserve: the logic lives in nmtserve.server.triton_models.DetokenizeModel."""

from nmtserve.server.triton_models import DetokenizeModel as TritonPythonModel  # noqa: F401
