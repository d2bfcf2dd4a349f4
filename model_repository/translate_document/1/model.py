"""Triton model `translate_document` of nmtserve: the logic lives in nmtserve.server.triton_models.DocumentModel."""

from nmtserve.server.triton_models import DocumentModel as TritonPythonModel  # noqa: F401
