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


# The held-out sets beside a checkpoint besides test.en: inputs as people type them (demo/typed.py),
# as they join them and the first words they type (demo/joined.py).
EXTRA_SETS = ("typed", "joined", "first")


def evaluate_checkpoint(directory: Path, beam_size: int = defaults.BEAM_SIZE, write: bool = False,
                        translations: bool = False) -> dict:
    """Exact match and BLEU on the held-out ``test.en`` / ``test.fr``, and on each of
    ``EXTRA_SETS`` the checkpoint has; ``empty`` counts empty translations of non-empty inputs,
    ``dropped_numbers`` translations that leave out a number their reference has. With
    ``translations`` each entry also holds them (``"translations"``: (source, translation) pairs;
    never written to eval.json)."""
    ckpt = load_checkpoint(directory)
    result = _evaluate(ckpt, directory, "test", beam_size, translations)
    for name in EXTRA_SETS:
        if (directory / f"{name}.en").is_file():
            result[name] = _evaluate(ckpt, directory, name, beam_size, translations)
    if not translations:
        log.info("%s: %s", directory, result)
        print(json.dumps(result))
    if write:
        (directory / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _evaluate(ckpt, directory: Path, name: str, beam_size: int, translations: bool = False) -> dict:
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
    entry = {
        "sentences": len(references), "beam_size": beam_size, "exact_match": round(exact, 4),
        "bleu": round(bleu, 2), "empty": sum(1 for s, h in zip(sources, hyps, strict=True) if s.strip() and not h.strip()),
        "dropped_numbers": sum(1 for h, r in zip(hyps, references, strict=True) if drops_a_number(h, r)),
        "decode_seconds": round(seconds, 1),
    }
    if translations:
        entry["translations"] = list(zip(sources, hyps, strict=True))
    return entry


def drops_a_number(translation: str, reference: str, language: str = "fr") -> bool:
    """Whether ``translation`` leaves out a number ``reference`` has: one of its digits (1-9), or
    one of its mentions of a number in digits or words (nmtserve.coverage)."""
    from ..coverage import missing_numbers

    return bool(missing_numbers(reference, translation, language, language))
