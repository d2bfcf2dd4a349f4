"""nmtserve's own checkpoint directories, as a format of the registry."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import Checkpoint, load_checkpoint
from .base import ImportFailure, ImportOptions


def load(path: Path, options: ImportOptions) -> Checkpoint:
    if options.tokenizer is not None:
        raise ImportFailure(f"{path}: an nmtserve checkpoint carries its sentencepiece model (source.spm); "
                            "--tokenizer is for checkpoints that do not record one")
    return load_checkpoint(path)
