"""Restricted target vocabularies: an opt-in, per target language (issue 49; CTranslate2's
``use_vmap``).

A restriction is the set of target token ids that a target language's text uses (tokenized with
the model's own target tokenizer) plus the end-of-sentence and unknown tokens. A sentence decoded
under it computes the vocabulary projection for those ids alone, its log-softmax runs over them
alone and its candidates come from them alone. At NLLB-200's 256k-token vocabulary the projection
is most of a decoder step, and one language's text uses a small share of the vocabulary.

It changes translations. Tokens outside the set can never be produced, and each score is
normalized over the set, not the whole vocabulary. So it is never on by default. It is on for a
repository only where the export was asked for it (``nmtserve export --restrict-vocabulary
[LANG=]FILE``), and ``NMTSERVE_VOCABULARY=0`` turns it off for a server (to compare or to take it
back). Its measured quality cost on the demo model is in ``docs/measurements.md``.

Which sentences it applies to:

* a bilingual model (one target language): one restriction with no language, for every sentence;
* a multilingual model (NLLB-200, M2M100, mBART-50): one per target language, keyed by that
  language's token. A sentence's forced target prefix starts with it, so a sentence into a
  language with no restriction decodes with the whole vocabulary.

Only the compiled CPU decoder step (``nmtserve_native``: int8 at any size, fp32 up to its size
rule) computes a restricted projection. Elsewhere (ONNX Runtime's fp32 graph at large sizes, the
GPU) the file is read, a warning says it does not apply there, and sentences decode with the whole
vocabulary: the translation the restriction only approximates.

The file, ``vocabularies.json`` beside ``model.json``::

    {"format": 1, "restrictions": [{"language": "fra_Latn" or null, "token": 256057 or null,
                                     "ids": [...], "source": "corpus.fr", "lines": 1000}]}
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

FILE = "vocabularies.json"
ENV = "NMTSERVE_VOCABULARY"  # 0: restrictions in a repository are not applied
FORMAT = 1


@dataclass(frozen=True)
class Restriction:
    language: str | None  # None: the model's one target language
    token: int | None  # the language's token (a multilingual model's forced first target token)
    ids: tuple[int, ...]  # ascending
    source: str = ""
    lines: int = 0

    def as_json(self) -> dict:
        return {"language": self.language, "token": self.token, "ids": list(self.ids), "source": self.source,
                "lines": self.lines}


def build(texts: Iterable[str], encode_target, specials: Sequence[int], vocab: int, language: str | None = None,
          token: int | None = None, source: str = "") -> Restriction:
    """The restriction of the target ids ``encode_target`` (a model's target tokenizer: text -> ids)
    gives ``texts``, with ``specials`` (end of sentence, unknown) and the language's ``token``."""
    seen: set[int] = set()
    lines = 0
    for text in texts:
        if text.strip():
            seen.update(encode_target(text))
            lines += 1
    if not lines:
        raise ValueError(f"no text to restrict the vocabulary to{f' ({source})' if source else ''}")
    seen.update(specials)
    if token is not None:
        seen.add(token)
    outside = sorted(i for i in seen if not 0 <= i < vocab)
    if outside:
        raise ValueError(f"the tokenizer gave ids {outside[:5]} outside the model's vocabulary of {vocab}")
    return Restriction(language, token, tuple(sorted(seen)), source, lines)


def save(folder: Path, restrictions: Sequence[Restriction]) -> Path:
    keys = [r.language for r in restrictions]
    if len(set(keys)) != len(keys):
        raise ValueError("one vocabulary restriction per target language")
    path = folder / FILE
    path.write_text(json.dumps({"format": FORMAT, "restrictions": [r.as_json() for r in restrictions]}) + "\n",
                    encoding="utf-8")
    return path


def load(folder: Path) -> list[Restriction]:
    """The restrictions of an export folder (none without the file); raises ValueError naming what
    is wrong with a file that is there."""
    path = folder / FILE
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this nmtserve reads {FORMAT}")
        return [Restriction(r["language"], r["token"], tuple(int(i) for i in r["ids"]), r.get("source", ""),
                            int(r.get("lines", 0)))
                for r in data["restrictions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a vocabulary restriction file ({exc})") from exc


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


class Vocabularies:
    """A loaded repository's restrictions, in the compiled step's order: which one a sentence takes."""

    def __init__(self, restrictions: Sequence[Restriction]):
        self.restrictions = list(restrictions)
        self._by_token = {r.token: i for i, r in enumerate(self.restrictions) if r.token is not None}
        self._default = next((i for i, r in enumerate(self.restrictions) if r.token is None), -1)

    def arrays(self) -> list[np.ndarray]:
        return [np.asarray(r.ids, dtype=np.int32) for r in self.restrictions]

    def index(self, forced: Sequence[int]) -> int:
        """The restriction of a sentence whose target starts with the tokens ``forced`` (its forced
        prefix): its language token's, else the model's one (a bilingual model's); -1: none."""
        if forced and self._by_token:
            return self._by_token.get(int(forced[0]), -1)
        return self._default

    def describe(self) -> str:
        return ", ".join(f"{r.language or 'target'}: {len(r.ids)} tokens" for r in self.restrictions)
