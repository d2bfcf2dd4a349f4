"""Does the model carry inline markup? Measured at export, never assumed.

A document sentence with inline formatting reaches the model with placeholders in the style of
XLIFF (``I have <g1>three</g1> red apples.``, see ``nmtserve.documents``). A model trained with
such placeholders copies them to the right words; one that never saw them may change the text
around them (the demo model turned "**7:45**" into "11 h 31"). So the export translates held-out
sentences twice, as they are and with one word wrapped in ``<g1>...</g1>``, and counts the
translations that keep both markers, in order, around text equal to the plain translation.
At ``KEEP_RATE`` or above the served documents keep placeholders ("keep"); below it, or without
held-out sentences to measure on, each document sentence is translated without its inline
markup ("drop": the text is the sentence's own translation, inline formatting is dropped and
code spans or images go to the end of the sentence). The verdict is the ``inline_markup``
parameter of the document model and a line of the export report.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from .. import contract
from . import quality

log = logging.getLogger(__name__)

PROBE_SENTENCES = 50
KEEP_RATE = 0.95
KEEP, DROP = contract.INLINE_MARKUP_KEEP, contract.INLINE_MARKUP_DROP

_PLACEHOLDER = re.compile(r"</?g1>")


@dataclass(frozen=True)
class MarkupProbe:
    sentences: int
    kept: int  # translations with both markers, in order, around the plain translation's text
    examples: tuple[tuple[str, str, str], ...] = ()  # (marked source, its translation, the plain one) that failed

    @property
    def mode(self) -> str:
        return KEEP if self.sentences and self.kept >= KEEP_RATE * self.sentences else DROP

    def summary(self) -> str:
        if not self.sentences:
            return ("inline markup: no held-out sentences to measure on (the checkpoint has no test.en; "
                    "--gate-source gives some): documents are translated without inline markup")
        verdict = ("documents keep inline placeholders" if self.mode == KEEP
                   else "documents are translated without inline markup (the text exact, inline formatting dropped)")
        return (f"inline markup: {self.kept}/{self.sentences} held-out sentences kept a <g1>...</g1> pair and "
                f"their text ({100 * KEEP_RATE:.0f}% needed): {verdict}")


def mark(sentence: str) -> str | None:
    """``sentence`` with its middle word (letters only) wrapped in ``<g1>...</g1>``; None for a
    sentence of fewer than three words."""
    words = sentence.split(" ")
    if len(words) < 3:
        return None
    middle = len(words) // 2
    for i in sorted(range(len(words)), key=lambda i: abs(i - middle)):
        if words[i].isalpha():
            return " ".join([*words[:i], f"<g1>{words[i]}</g1>", *words[i + 1:]])
    return None


def kept(marked_translation: str, plain_translation: str) -> bool:
    """Both markers, once each and in order, and the text without them equal to the plain translation."""
    found = _PLACEHOLDER.findall(marked_translation)
    if found != ["<g1>", "</g1>"]:
        return False
    return " ".join(_PLACEHOLDER.sub(" ", marked_translation).split()) == " ".join(plain_translation.split())


def probe(gate: quality.GateSet, runtime, tokenizer, options, max_sentences: int | None = None) -> MarkupProbe:
    """Translate up to ``PROBE_SENTENCES`` of the gate set as they are and with one word marked
    (the plain translations are ``gate.fp32`` where ``quality.baseline`` filled it)."""
    chosen = [(i, m) for i, s in enumerate(gate.sources) if (m := mark(s)) is not None][:PROBE_SENTENCES]
    if not chosen:
        return MarkupProbe(0, 0)
    texts = [m for _, m in chosen]
    if gate.fp32 is None:
        texts += [gate.sources[i] for i, _ in chosen]
    both = quality.GateSet(texts, None, "markup probe", source_lang=gate.source_lang, target_lang=gate.target_lang)
    tokens, _ = quality.translate(runtime, tokenizer, both, options, max_sentences)
    decoded = [tokenizer.decode(t) for t in tokens]
    translations = decoded[: len(chosen)]
    plain = gate.fp32 if gate.fp32 is not None else dict(zip((i for i, _ in chosen), decoded[len(chosen):], strict=True))
    failed: list[tuple[str, str, str]] = []
    ok = 0
    for (i, source), translation in zip(chosen, translations, strict=True):
        if kept(translation, plain[i]):
            ok += 1
        elif len(failed) < 3:
            failed.append((source, translation, plain[i]))
    result = MarkupProbe(len(chosen), ok, tuple(failed))
    log.info("%s", result.summary())
    return result
