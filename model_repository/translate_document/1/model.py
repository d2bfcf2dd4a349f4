"""Triton model `translate_document` of nmtserve: the logic lives in nmtserve.server.front_doors.DocumentModel."""

from nmtserve.server.front_doors import DocumentModel as TritonPythonModel  # noqa: F401
