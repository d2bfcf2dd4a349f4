"""What both APIs and the page do, over one ``AsyncTranslator``: the languages served,
detection, translating texts and documents, the files waiting for download.

Texts take one of two paths to Triton. One sentence (no line break, no sentence end followed
by more text) goes to the ``translate`` ensemble: the fast path, with an n-best list for
``alternatives``. Anything longer, and every HTML text, goes to ``translate_document``, which
cuts it into sentences, translates them in one batch and puts the layout back; it has no n-best
list, so a multi-sentence text gets no alternatives (as LibreTranslate gives none for HTML).

A glossary (``glossaries.Glossary``) turns the terms it finds into the server's terminology
constraints (``terms=``), which apply to one sentence each: a text in which it finds a term is cut
into its sentences here (``nmtserve.documents``, as the server's document path cuts it; HTML
read without its markup, which is put back by the word alignment), each sentence sent whole with
its own terms, all of them in one request; a text in which it finds none goes as it would
without a glossary. A text with terms gets no alternatives.

The alternatives are the plausible hypotheses after the best (``nmtserve.alternatives``: within
a margin of the best's score, a different text, the same numbers, number words checked in the
request's languages): up to the number asked for, fewer or none rather than junk.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nmtserve.alternatives import key, plausible
from nmtserve.client import AsyncTranslator, InvalidInputError, Translation, TranslationError
from nmtserve.client.errors import local_message

from .access import Access
from .config import DEFAULT_UNNAMED_PAIRS, GatewayConfig
from .detect import Detection, Detector, name_of
from .errors import BadRequest, from_client
from .files import FileStore
from .glossaries import Glossary, GlossaryStore
from .languages import Catalog, discover

LOGGER = logging.getLogger(__name__)

# Punctuation around a word ("cats." -> "cats"), as nmtserve.coverage strips it.
_EDGES = re.compile(r"^[^\w]+|[^\w]+$")
# More than one sentence: a line break, or a sentence end followed by more text.
_SEVERAL_SENTENCES = re.compile(r"\n|[.!?\u2026\u3002\uff01\uff1f][\"'\u2019\u201d)\]]*\s+\S")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Translated:
    text: str
    alternatives: list[str]
    # The server's WARNING: "" or why the translation may be incomplete or wrong (nmtserve.coverage)
    warning: str = ""
    # Asked with confidence=True (translate's CONFIDENCE and ALIGN): the translation's confidence,
    # one per whitespace-separated word of ``text``, and the source words that may be missing
    # (the source's own, in order); None when not asked, or for HTML and glossary texts.
    confidence: float | None = None
    word_confidence: list[float] | None = None
    missing_words: list[str] | None = None


def is_one_sentence(text: str) -> bool:
    return not _SEVERAL_SENTENCES.search(text.strip())


READY_POLL_S = 0.5  # while the server starts (_warm)


class Service:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.translator = AsyncTranslator(
            config.url, config.protocol, config.model, timeout=config.timeout,
            concurrency=config.concurrency, headers=config.headers, tls=config.tls,  # type: ignore[arg-type]
        )
        self.access = Access(config.api_keys, config.limits)
        self.files = FileStore(config.files_dir, limits=config.limits)
        self.glossaries = GlossaryStore(config.glossaries_dir, config.limits)
        self._unnamed = tuple(config.languages or DEFAULT_UNNAMED_PAIRS)
        self._catalog: Catalog | None = None
        self._catalog_at = float("-inf")
        self._catalog_lock = asyncio.Lock()
        self._detector: Detector | None = None
        self._warm_up: asyncio.Task[None] | None = None

    # -- lifetime

    def start(self) -> None:
        """Read the languages and load the detector in the background: the first user should
        not wait for either, and a server that is not up yet must not stop the gateway."""
        self._warm_up = asyncio.create_task(self._warm())

    async def _warm(self) -> None:
        try:
            # A server still starting is waited for quietly: one line, not a retry warning a second.
            if not await self.translator.is_ready():
                LOGGER.info("waiting for the translation server at %s to be ready", self.config.url)
                while not await self.translator.is_ready():
                    await asyncio.sleep(READY_POLL_S)
                LOGGER.info("the translation server is ready")
            await (await self.detector()).ready()
        except Exception as exc:  # noqa: BLE001 - logged; every request retries the discovery
            LOGGER.warning("languages not known yet: %s", exc)

    async def close(self) -> None:
        if self._warm_up is not None:
            self._warm_up.cancel()
            await asyncio.gather(self._warm_up, return_exceptions=True)
        await self.translator.close()
        self.files.close()

    # -- languages

    async def catalog(self) -> Catalog:
        """The languages served: read from the server, kept ``catalog_ttl_s``; while the server
        cannot be asked, the last list (and only without one: Unavailable)."""
        catalog = self._catalog
        fresh = time.monotonic() - self._catalog_at < self.config.catalog_ttl_s
        if catalog is not None and (fresh or self._catalog_lock.locked()):
            return catalog
        async with self._catalog_lock:
            if self._catalog is not None and time.monotonic() - self._catalog_at < self.config.catalog_ttl_s:
                return self._catalog
            try:
                found = await discover(self.translator, self._unnamed)
            except TranslationError as exc:
                if self._catalog is None:
                    raise from_client(exc) from exc
                LOGGER.warning("could not refresh the languages (keeping the last list): %s", exc)
                found = self._catalog
            if found != self._catalog:
                self._announce(found)
            self._catalog, self._catalog_at = found, time.monotonic()
            return found

    def _announce(self, catalog: Catalog) -> None:
        pairs = ", ".join(f"{s}-{t}" for s, t in catalog.pairs)
        if catalog.routed:
            if self.config.languages:
                LOGGER.warning("the server names its language pairs; --languages is not used")
            LOGGER.info("serving the language pairs %s", pairs)
        else:
            LOGGER.info("the server's model has no language pair: serving it as %s%s", pairs,
                        "" if self.config.languages else " (name it with --languages SRC-TGT)")

    async def detector(self) -> Detector:
        served = (await self.catalog()).sources
        sources = served
        if self.config.detect_languages:
            wanted = set(self.config.detect_languages)
            sources = [s for s in served if s in wanted] or served
        detector = self._detector
        if detector is None or detector.sources != tuple(sources) or detector.served != tuple(served):
            self._detector = detector = Detector(sources, served)
        return detector

    async def detect(self, text: str) -> list[Detection]:
        """What ``/detect`` answers: the language ``text`` is surely in when the server does not
        translate from it, else the served sources it may be in (detect.py)."""
        return await (await self.detector()).see(text)

    async def foreign(self, texts: Sequence[str]) -> tuple[int, Detection] | None:
        """The first of ``texts`` surely in a language no served source is, by its place, and
        that language (None: each may be in a served source)."""
        found = await (await self.detector()).first_foreign(texts)
        return (found[0], found[1][0]) if found is not None else None

    async def detect_source(self, text: str, target: str) -> Detection | None:
        """The most likely source language of ``text`` among those that translate into
        ``target`` (None when no served source does)."""
        catalog = await self.catalog()
        for found in await (await self.detector()).detect(text):
            if catalog.serves(found.language, target):
                return found
        sources = [s for s in catalog.sources if catalog.serves(s, target)]
        return Detection(sources[0], 0.0) if sources else None

    # -- translating

    async def translate(
        self, texts: Sequence[str], source: str, target: str, *, html: bool = False, alternatives: int = 0,
        split: bool = True, glossary: Glossary | None = None, confidence: bool = False,
    ) -> list[Translated]:
        """Each text's translation (and up to ``alternatives`` other hypotheses, for a
        one-sentence plain text), in order; the pair must be served (checked by the caller).
        ``split=False`` (DeepL's ``split_sentences=0``) sends each plain text to the model whole.
        ``glossary``: its terms found in a text are asked for in its translation.
        ``confidence``: each plain text without glossary terms goes to ``translate`` (which cuts
        it into sentences and joins them as the document path does) with CONFIDENCE and ALIGN,
        for ``Translated.confidence``, ``.word_confidence`` and ``.missing_words``."""
        route = (await self.catalog()).route(source, target)
        one = [not html and (not split or confidence or is_one_sentence(t)) for t in texts]
        glossed: dict[int, Any] = {}  # text -> its sentences (documents.Segmented), where a term is found
        if glossary is not None:
            for i, text in enumerate(texts):
                if not (one[i] and not split):  # a text sent whole takes its terms as it is
                    document = segment_for_terms(text, "html" if html else "plain", source, len(texts) > 1, i)
                    if any(glossary.terms(s) for s in _readable(document, html)):
                        glossed[i] = document
        sentences = [i for i in range(len(texts)) if one[i] and i not in glossed]
        documents = [i for i in range(len(texts)) if not one[i] and i not in glossed]
        jobs: list[Awaitable[Any]] = []
        if sentences:
            # The raw n-best: the rule runs here, where the request's languages are known (the
            # client knows none for a repository exported without a pair).
            options: dict[str, Any] = {"num_hypotheses": alternatives + 1, "all_hypotheses": True} if alternatives else {}
            if confidence:
                options.update(confidence=True, alignment=True)
            if not split:
                options["split_sentences"] = False
                if glossary is not None:
                    terms = [glossary.terms(texts[i]) for i in sentences]
                    if any(terms):
                        options["terms"] = as_terms(terms)
            named = sentences if len(texts) > 1 else None
            jobs.append(self._sentences([texts[i].strip() for i in sentences], named, route, options))
        if glossed:
            jobs.append(self._glossed(list(glossed.values()), list(glossed), glossary, html, route,  # type: ignore[arg-type]
                                      len(texts) > 1))
        fmt = "html" if html else "plain"
        jobs += [self._document(texts[i], fmt, route, i if len(texts) > 1 else None) for i in documents]
        results: list[Translated | None] = [None] * len(texts)
        done = await _gather(jobs)
        if sentences:
            for i, translation in zip(sentences, done.pop(0), strict=True):
                others = _alternatives(texts[i].strip(), translation, source, target) if alternatives else []
                results[i] = Translated(translation.text, others[:alternatives], translation.warning,
                                        **(_quality(texts[i].strip(), translation) if confidence else {}))
        if glossed:
            for i, translated in zip(glossed, done.pop(0), strict=True):
                results[i] = translated
        for i, text in zip(documents, done, strict=True):
            results[i] = Translated(text, [])
        return [r for r in results if r is not None]

    async def _glossed(self, documents: list[Any], positions: list[int], glossary: Glossary, html: bool,
                       route: dict, several: bool) -> list[Translated]:
        """Documents translated sentence by sentence, each sentence with the glossary's terms
        it holds, all in one request; HTML read without its markup and put back by the word
        alignment (as DeepL's tag_handling=xml is)."""
        sentences = [s for document in documents for s in _readable(document, html)]
        owners = [p for document, p in zip(documents, positions, strict=True) for _ in document.sentences]
        translated = await self._sentences(sentences, owners if several else None, route, {
            "split_sentences": False, "alignment": html, "terms": as_terms([glossary.terms(s) for s in sentences])})
        out, start = [], 0
        for document in documents:
            part = translated[start:start + len(document.sentences)]
            start += len(document.sentences)
            texts = [t.text for t in part]
            text = document.render_aligned(texts, [t.alignment or [] for t in part]) if html else document.render(texts)
            out.append(Translated(text, [], "; ".join(dict.fromkeys(t.warning for t in part if t.warning))))
        return out

    async def _sentences(self, texts: list[str], positions: list[int] | None, route: dict, options: dict) -> list:
        """The client's translations; an error names the text by ``positions`` (its place in
        the caller's list, None for a single text)."""
        try:
            return await self.translator.translate(texts, **route, **options)
        except TranslationError as exc:
            error = from_client(exc)
            if isinstance(exc, InvalidInputError):
                # "TEXT[3]" is the sentence's place in a request the client cut and sorted.
                error.message = local_message(exc.message, "the text")
                if exc.index is not None and positions is not None:
                    error.message = f"q[{positions[exc.index]}]: {error.message}"
            raise error from exc

    async def _document(self, text: str | bytes, fmt: str, route: dict, position: int | None) -> str | bytes:
        try:
            return await self.translator.translate_document(text, fmt, **route)
        except TranslationError as exc:
            error = from_client(exc)
            if position is not None:
                error.message = f"q[{position}]: {error.message}"
            raise error from exc

    async def translate_document(self, text: str | bytes, fmt: str, source: str, target: str) -> str | bytes:
        """A text document (str) or a file (bytes, a format of contract.FILE_FORMATS) translated."""
        return await self._document(text, fmt, (await self.catalog()).route(source, target), None)

    async def only_source(self, target: str, what: str) -> str:
        """The one language this server translates into ``target`` from, for a file whose text
        the gateway cannot read to detect it (BadRequest naming ``what`` when there are several)."""
        catalog = await self.catalog()
        sources = [s for s in catalog.sources if target in catalog.targets_of(s)]
        if len(sources) != 1:
            raise BadRequest(f"Invalid request: the source language of {what} is not detected: name it "
                             f"(source=one of {', '.join(sources) or 'none'})")
        return sources[0]


def as_terms(per_sentence: Sequence[Sequence[str]]) -> list[list[list[str]]]:
    """The client's ``terms=``: per sentence, each target term as its one rendering."""
    return [[[term] for term in terms] for terms in per_sentence]


def segment_for_terms(text: str, fmt: str, language: str, several: bool, position: int) -> Any:
    """``text`` cut into its sentences (``documents.segment``, "plain" or "html"), to find a
    glossary's terms in each; BadRequest when it cannot be read (naming ``q[position]`` when
    ``several``)."""
    try:
        from nmtserve.documents import DocumentError, segment
    except ImportError:  # the gateway installed without nmtserve[documents] (sentencex)
        raise BadRequest("glossaries need nmtserve[documents] on this gateway") from None
    try:
        return segment(text, fmt, language=language, max_chars=max(len(text), 1))
    except (DocumentError, ValueError) as exc:
        raise BadRequest(f"{f'q[{position}]: ' if several else ''}{exc}") from None


def _readable(document: Any, html: bool) -> list[str]:
    """The sentences the model reads: without their markup for HTML."""
    return document.without_markup() if html else document.sentences


def looks_like(found: Detection, catalog: Catalog) -> str:
    """Why a text in ``found.language`` is refused, for both APIs' messages and the page:
    "this looks like French; this server translates from English"."""
    names = [catalog.name(c) for c in catalog.sources]
    served = (f"{len(names)} languages" if len(names) > 4 else names[0] if len(names) == 1
              else f"{', '.join(names[:-1])} and {names[-1]}")
    return f"this looks like {name_of(found.language)}; this server translates from {served}"


def _quality(source_text: str, translation: Translation) -> dict[str, Any]:
    """``Translated``'s confidence fields from a translation asked with confidence and alignment:
    the missing words by their text (the server names them by position in ``source_text``)."""
    words = [_EDGES.sub("", w) or w for w in source_text.split()]  # "cats." is named "cats"
    return {"confidence": translation.confidence, "word_confidence": translation.word_confidence,
            "missing_words": [words[i] for i in translation.missing_words or () if 0 <= i < len(words)]}


def _alternatives(source_text: str, translation: Translation, source: str, target: str) -> list[str]:
    """The hypotheses after the best that a person may choose (nmtserve.alternatives), none
    with the best's text."""
    hypotheses = translation.hypotheses or []
    texts, scores = [h.text for h in hypotheses], [h.score for h in hypotheses]
    kept = plausible(texts, scores, source_text, source_language=source, target_language=target)
    return [texts[i] for i in kept if key(texts[i]) != key(translation.text)]


async def _gather(jobs: list[Awaitable[T]]) -> list[T]:
    """All results, or the first error with the other jobs cancelled (TaskGroup, for 3.10)."""
    if len(jobs) == 1:
        return [await jobs[0]]
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

