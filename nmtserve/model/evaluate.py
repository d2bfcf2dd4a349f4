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
    """Exact match and BLEU on the held-out ``test.en`` / ``test.fr``, and on ``typed.en`` /
    ``typed.fr`` (inputs as people type them, demo/typed.py) where the checkpoint has them;
    ``empty`` counts empty translations of non-empty inputs."""
    ckpt = load_checkpoint(directory)
    result = _evaluate(ckpt, directory, "test", beam_size)
    if (directory / "typed.en").is_file():
        result["typed"] = _evaluate(ckpt, directory, "typed", beam_size)
    log.info("%s: %s", directory, result)
    print(json.dumps(result))
    if write:
        (directory / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _evaluate(ckpt, directory: Path, name: str, beam_size: int) -> dict:
    import sacrebleu

    sources = (directory / f"{name}.en").read_text().splitlines()
    references = (directory / f"{name}.fr").read_text().splitlines()
    options = SearchOptions(beam_size=beam_size, max_length=200, max_length_a=2.0, max_length_b=10)
    started = time.monotonic()
    hyps = [n[0][0] for n in translate(ckpt.model, ckpt.tokenizer, sources, options, batch_size=64)]
    seconds = time.monotonic() - started
    exact = sum(h == r for h, r in zip(hyps, references, strict=True)) / len(references)
    bleu = sacrebleu.corpus_bleu(hyps, [references]).score
    wrong = [(s, h, r) for s, h, r in zip(sources, hyps, references, strict=True) if h != r]
    for source, hyp, ref in wrong[:20]:
        log.info("%s: %r -> %r (expected %r)", name, source, hyp, ref)
    return {
        "sentences": len(references), "beam_size": beam_size, "exact_match": round(exact, 4),
        "bleu": round(bleu, 2), "empty": sum(1 for s, h in zip(sources, hyps, strict=True) if s.strip() and not h.strip()),
        "decode_seconds": round(seconds, 1),
    }
