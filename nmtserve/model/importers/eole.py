"""eole model directories: the registry's entry (the importer lives beside OpenNMT-py's in
``opennmt``: one decoder, most of one format)."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import Checkpoint
from .base import ImportOptions
from .opennmt import load_eole


def load(path: Path, options: ImportOptions) -> Checkpoint:
    return load_eole(path, options)
