"""Exact match and BLEU (sacrebleu) of a checkpoint on the test set stored beside it."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from .. import defaults
from ..decoding.search import SearchOptions
from .checkpoint import load_checkpoint
from .reference import translate

log = logging.getLogger(__name__)


def evaluate_checkpoint(directory: Path, beam_size: int = defaults.BEAM_SIZE, write: bool = False) -> dict:
    import sacrebleu

    ckpt = load_checkpoint(directory)
    sources = (directory / "test.en").read_text().splitlines()
    references = (directory / "test.fr").read_text().splitlines()
    options = SearchOptions(beam_size=beam_size, max_length=200, max_length_a=2.0, max_length_b=10)
    started = time.monotonic()
    hyps = [n[0][0] for n in translate(ckpt.model, ckpt.tokenizer, sources, options, batch_size=64)]
    seconds = time.monotonic() - started
    exact = sum(h == r for h, r in zip(hyps, references, strict=True)) / len(references)
    bleu = sacrebleu.corpus_bleu(hyps, [references]).score
    result = {
        "sentences": len(references), "beam_size": beam_size, "exact_match": round(exact, 4),
        "bleu": round(bleu, 2), "decode_seconds": round(seconds, 1),
    }
    log.info("%s: %s", directory, result)
    print(json.dumps(result))
    if write:
        (directory / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
