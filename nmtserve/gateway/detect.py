"""Language detection for ``source=auto``, ``/detect`` and DeepL without ``source_lang``.

Lingua (``lingua-language-detector``): the most accurate offline detector on short texts that
installs from PyPI without a download at run time (measured for this gateway: 94% of 70
two-to-five-word phrases in seven European languages against py3langid's 70%; both ~100% on
whole sentences), pure Rust with no dependencies. Its models are shared by every detector of
the process and loaded on first use: in high-accuracy mode (1- to 5-grams) ~20-40 MB for a
widely written language, a few MB for the others; in low-accuracy mode (trigrams) ~1 MB.

Two questions, two detectors:

* **Which served source is it in?** (``detect``) Among the served sources only, as before: a
  server with one source language needs no detector for it (that language is the answer); up
  to ``HIGH_ACCURACY_LANGUAGES`` sources in high-accuracy mode, past them (a multilingual
  model) in low-accuracy mode, which keeps all 75 of Lingua's languages in ~100 MB instead of
  ~1 GB and still told apart the short phrases above, less surely.
* **Is it in a language the server does not translate from?** (``foreign``) Among every
  language Lingua knows, so that French sent to an English-only server is named French
  instead of being called English and translated into nonsense. All 75 in high-accuracy mode
  would hold ~1 GB (a Latin-script text alone loads the ~45 Latin-script languages: ~0.9 GB
  and ~10 s on the first request). Low-accuracy mode over all of them holds ~55 MB (the Latin
  script's trigrams, loaded when the detector is built; other scripts' with their first text)
  and takes ~0.2 ms a text, but it is confidently wrong too often to refuse a request on its
  word alone: it names Ganda at 99.9% for the demo's "The meeting is on Thursday, October 17,
  2052." and Somali at 99.5% for "we see 850 gray keys.".

  So a refusal takes two steps. (1) Low accuracy over all languages: the languages not served
  must hold ``SURE`` (99%) of the confidence, on a text of ``MIN_WORDS`` (3) words or more. (2)
  High accuracy among the ``CANDIDATES`` (2) unserved languages step 1 ranked highest and the
  served sources it ranked highest: an unserved language must win, ``RATIO`` (10) times as
  likely as the likeliest served source (English wins the Thursday sentence, 77% to 23%). It
  is the answer, with its step-2 confidence. Calibrated on the demo's 2,500 English and 2,500
  French test, typed and validation sentences, and on 80 everyday English phrases against 80
  in nine other languages (French, German, Spanish, Italian, Portuguese, Dutch, Russian,
  Japanese, Chinese): no English text refused; 82% of the French sentences of three words or
  more refused, 1.6% of those under a wrong name (short ones: "la quatorzième page" as Shona);
  61 of the 80 everyday phrases refused, all named right but one Dutch phrase (Afrikaans).
  Anything short, ambiguous or contested is assumed to be in a served source, as before:
  "hello", "twenty", "7:45" and "I have 3 apples" are translated, never refused.

  Step 2 runs only for texts that pass step 1 (0.9% of the demo's English sentences) and loads
  the high-accuracy models of the languages it compares. Those of the served sources stay
  (when they are at most ``HIGH_ACCURACY_LANGUAGES``); of the other languages, only the
  ``MAX_EXTRA_MODELS`` (4) most recently compared are held (a language dropped is reloaded when
  it is next compared, ~0.3 s), so the memory stays bounded instead of growing towards ~1 GB
  as the candidates vary.

Close languages count as one (``KINDRED``): a Croatian model is not refused Bosnian text. A
server with a source language Lingua does not know (a code Lingua has no model for, as many of
a multilingual model's) never refuses: the text may be in that language.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LOGGER = logging.getLogger(__name__)

# Detection needs a few words, not a document: only the start of a long text is read.
MAX_DETECT_CHARS = 500
# Up to this many languages, the high-accuracy models (~30-45 MB each); beyond, low accuracy.
HIGH_ACCURACY_LANGUAGES = 8

# Refusing a text as not in a served language (``Detector.foreign``, calibrated as the module
# says): step 1's share of the confidence for the unserved languages (Lingua's low accuracy over
# all of them) and the words a text needs; step 2's candidates (high accuracy), at most
# ``CANDIDATES`` unserved ones of at least ``CANDIDATE_FLOOR`` in step 1 and the
# ``SERVED_CANDIDATES`` likeliest served sources; how much likelier than any served source its
# winner must be; and how many unserved languages' high-accuracy models are held at once.
SURE = 0.99
MIN_WORDS = 3
CANDIDATES = 2
CANDIDATE_FLOOR = 0.01
SERVED_CANDIDATES = 3
RATIO = 10.0
MAX_EXTRA_MODELS = 4
# Languages close enough that a model of one translates the others: served one, served all.
KINDRED = (frozenset({"bs", "hr", "sr"}), frozenset({"id", "ms"}), frozenset({"nb", "nn", "no"}))
# Served codes Lingua names otherwise.
ALIASES = {"no": "nb"}

# Scripts written without spaces between words: each character counts as a word.
_UNSPACED = "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(rf"[{_UNSPACED}]|[^\W\d_{_UNSPACED}]+")
# Warms the low-accuracy Latin-script models when the detector is built (the first request
# would otherwise wait ~0.5 s for them).
_WARM_UP = "The quick brown fox jumps over the lazy dog"


@dataclass(frozen=True, slots=True)
class Detection:
    language: str  # a served code as the server names it, or (not served) Lingua's ISO 639-1 code
    confidence: float  # 0..100, as LibreTranslate reports it


def words(text: str) -> int:
    """Words of letters in ``text`` (digits and punctuation are none; a Chinese, Japanese or
    Thai character is one)."""
    return len(_WORD.findall(text))


def _lingua_language(lingua: Any, code: str) -> Any | None:
    """Lingua's Language for a served code ("fr", "fra", "fra_Latn"), None if it has none."""
    base = code.replace("-", "_").split("_", 1)[0].lower()
    base = ALIASES.get(base, base)
    try:
        if len(base) == 2:
            return lingua.Language.from_iso_code_639_1(lingua.IsoCode639_1.from_str(base))
        if len(base) == 3:
            return lingua.Language.from_iso_code_639_3(lingua.IsoCode639_3.from_str(base))
    except ValueError:
        return None
    return None


def _iso(language: Any) -> str:
    return language.iso_code_639_1.name.lower()


class Detector:
    """Detects among ``sources`` (the served source codes, in the order they are listed), and
    tells when a text is in none of ``served`` (every served source; default ``sources``)."""

    def __init__(self, sources: Sequence[str], served: Sequence[str] | None = None) -> None:
        self.sources = tuple(sources)
        self.served = tuple(served) if served is not None else self.sources
        self._detector: Any = None
        self._codes: dict[Any, str] = {}  # lingua Language -> served code (the detected sources)
        self._served_codes: dict[Any, str] = {}  # lingua Language -> served code (every source)
        self._served_iso: frozenset[str] = frozenset()  # served, with their kindred, as ISO codes
        self._wide: Any = None  # low accuracy, every language (None: never refuse)
        self._confirmers: dict[frozenset[Any], Any] = {}  # step 2's detectors, by their languages
        self._kept: frozenset[Any] = frozenset()  # languages whose high-accuracy models stay
        self._extra: dict[Any, None] = {}  # the others step 2 may hold, least recently compared first
        self._confirm_lock = threading.Lock()
        self._lingua: Any = None
        self._ready = asyncio.Event()
        self._building = False
        self.low_accuracy = False

    async def ready(self) -> None:
        """Build the detectors once (models loaded in a thread: up to a second or so)."""
        if self._ready.is_set():
            return
        if not self._building:
            self._building = True
            try:
                await asyncio.to_thread(self._build)
            except ImportError as exc:  # the gateway's extra installs it
                LOGGER.warning("no language detection: %s (pip install 'nmtserve[gateway]')", exc)
            except Exception:  # detection degrades to "unknown"; translation goes on
                LOGGER.exception("the language detector could not be built")
            finally:
                self._ready.set()
        await self._ready.wait()

    def _build(self) -> None:
        import lingua

        self._lingua = lingua
        for code in self.sources:
            language = _lingua_language(lingua, code)
            if language is not None and language not in self._codes:
                self._codes[language] = code
        unknown = [c for c in self.sources if c not in self._codes.values()]
        if unknown:
            LOGGER.warning("language detection cannot recognise %s: not detected for source=auto",
                           ", ".join(unknown))
        if len(self.sources) >= 2 and len(self._codes) >= 2:
            builder = lingua.LanguageDetectorBuilder.from_languages(*self._codes).with_preloaded_language_models()
            self.low_accuracy = len(self._codes) > HIGH_ACCURACY_LANGUAGES
            if self.low_accuracy:
                LOGGER.info("language detection among %d languages: low-accuracy mode", len(self._codes))
                builder = builder.with_low_accuracy_mode()
            self._detector = builder.build()
        self._build_wide(lingua)

    def _build_wide(self, lingua: Any) -> None:
        for code in self.served:
            language = _lingua_language(lingua, code)
            if language is None:
                LOGGER.info("source %s is unknown to the language detector: no text is refused as "
                            "not in a served language", code)
                return
            self._served_codes.setdefault(language, code)
        iso = {_iso(language) for language in self._served_codes}
        for group in KINDRED:
            if iso & group:
                iso |= group
        self._served_iso = frozenset(iso)
        if not self._served_codes:
            return
        if len(self._served_codes) <= HIGH_ACCURACY_LANGUAGES:
            self._kept = frozenset(self._served_codes)
        self._wide = lingua.LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build()
        self._wide.compute_language_confidence_values(_WARM_UP)

    def _is_served(self, language: Any) -> bool:
        return _iso(language) in self._served_iso

    async def detect(self, text: str) -> list[Detection]:
        """The served sources ``text`` may be in, most likely first; at least one entry (the
        first source with confidence 0 when nothing is recognised, as LibreTranslate does)."""
        await self.ready()
        if self._detector is None:
            if len(self.sources) == 1:
                return [Detection(self.sources[0], 100.0)]
            return [Detection(self.sources[0], 0.0)] if self.sources else []
        values = self._detector.compute_language_confidence_values(text[:MAX_DETECT_CHARS])
        found = [Detection(self._codes[v.language], round(100.0 * v.value, 1)) for v in values
                 if v.value > 0]
        return found or [Detection(self.sources[0], 0.0)]

    async def foreign(self, text: str) -> list[Detection] | None:
        """When ``text`` is surely in a language no served source is: what it is, most likely
        first (that language, by its ISO 639-1 code), then the others compared (served ones
        under their served codes). None when it may be in a served source: short, ambiguous,
        contested, or served."""
        found = await self.first_foreign([text])
        return found[1] if found is not None else None

    async def first_foreign(self, texts: Sequence[str]) -> tuple[int, list[Detection]] | None:
        """The first of ``texts`` that ``foreign`` finds in an unserved language, by its place,
        and what it is in; None when there is none. In a worker thread: a batch takes ~0.2 ms a
        text, and a language compared for the first time loads its models (up to ~0.5 s)."""
        await self.ready()
        if self._wide is None or not texts:
            return None
        return await asyncio.to_thread(self._first_foreign, texts)

    def _first_foreign(self, texts: Sequence[str]) -> tuple[int, list[Detection]] | None:
        for i, text in enumerate(texts):
            found = self._foreign(text[:MAX_DETECT_CHARS])
            if found is not None:
                return i, found
        return None

    def _foreign(self, text: str) -> list[Detection] | None:
        if words(text) < MIN_WORDS:
            return None
        values = self._wide.compute_language_confidence_values(text)
        if sum(v.value for v in values if not self._is_served(v.language)) < SURE:
            return None
        unserved = [v.language for v in values
                    if v.value >= CANDIDATE_FLOOR and not self._is_served(v.language)][:CANDIDATES]
        served = [v.language for v in values if v.language in self._served_codes][:SERVED_CANDIDATES]
        second = self._confirm(unserved, served, text)
        best_served = max((v.value for v in second if self._is_served(v.language)), default=0.0)
        if not second or self._is_served(second[0].language) or second[0].value < RATIO * best_served:
            return None
        return [Detection(self._served_codes.get(v.language) or _iso(v.language), round(100.0 * v.value, 1))
                for v in second if v.value > 0]

    def _confirm(self, unserved: list[Any], served: list[Any], text: str) -> list[Any]:
        """Step 2 of ``foreign``: high accuracy among ``unserved`` and ``served``, one at a time.
        Past ``MAX_EXTRA_MODELS`` languages held besides the kept served sources, the least
        recently compared ones' models are dropped (Lingua reloads a language when it is next
        compared)."""
        with self._confirm_lock:
            languages = unserved + served
            for language in languages:
                if language not in self._kept:
                    self._extra.pop(language, None)
                    self._extra[language] = None  # the most recent last
            stale = [language for language in list(self._extra)[:max(0, len(self._extra) - MAX_EXTRA_MODELS)]
                     if language not in languages]
            if stale:
                self._lingua.LanguageDetectorBuilder.from_languages(*stale).build().unload_language_models()
                for language in stale:
                    del self._extra[language]
                _give_back_memory()
            key = frozenset(languages)
            detector = self._confirmers.get(key)
            if detector is None:
                if len(self._confirmers) >= 256:  # small (the models are shared), bounded anyway
                    self._confirmers.clear()
                detector = self._confirmers[key] = self._lingua.LanguageDetectorBuilder.from_languages(*key).build()
            return detector.compute_language_confidence_values(text)

    async def see(self, text: str) -> list[Detection]:
        """What ``/detect`` answers: the language ``text`` is surely in when no served source is
        (``foreign``), else the served sources it may be in (``detect``)."""
        return await self.foreign(text) or await self.detect(text)


def _give_back_memory() -> None:
    """Return the memory of the models just dropped to the system: glibc's allocator keeps freed
    memory for the process otherwise (measured: without this, dropping and reloading models
    grew the gateway past 500 MB instead of holding it near the bound)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the allocator keeps what it keeps
        pass


def name_of(lingua_code: str) -> str:
    """The English name of a language ``foreign`` reports (its ISO 639-1 code)."""
    from .languages import NAMES

    if lingua_code in NAMES:
        return NAMES[lingua_code]
    try:
        import lingua

        return lingua.Language.from_iso_code_639_1(lingua.IsoCode639_1.from_str(lingua_code)).name.title()
    except (ImportError, ValueError):
        return lingua_code
