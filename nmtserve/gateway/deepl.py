"""A subset of DeepL's API v2, enough for DeepL's own client libraries and the tools built on them.

    POST /v2/translate   text (a list; a form repeats it), target_lang, source_lang (optional:
                         detected per text), tag_handling=html|xml (xml: ignore_tags,
                         splitting_tags, non_splitting_tags, outline_detection), split_sentences
                         (0: each text whole; 1 and nonewlines: sentence by sentence),
                         show_billed_characters
                         -> {"translations": [{"detected_source_language", "text"(, "billed_characters")}]}
    GET|POST /v2/languages?type=source|target   [{"language", "name"(, "supports_formality")}]
    POST /v2/glossaries  name, source_lang, target_lang, entries, entries_format (tsv | csv)
                         -> 201 {"glossary_id", "name", "ready", "source_lang", "target_lang",
                         "creation_time", "entry_count"}
    GET /v2/glossaries   {"glossaries": [...]};  GET|DELETE /v2/glossaries/{id}
    GET /v2/glossaries/{id}/entries   the entries as TSV (Accept: text/tab-separated-values)
    GET /v2/glossary-language-pairs   {"supported_languages": [{"source_lang", "target_lang"}]}
    POST /v2/document, /v2/document/{id}, /v2/document/{id}/result   files (deepl_documents.py)

A glossary (``glossaries.py``) is the key's own; ``glossary_id`` on /v2/translate needs
``source_lang``, and the glossary's pair must be the request's. Its terms found in a text are
asked of the model as terminology constraints (``Service.translate``, and each sentence of
``tag_handling=xml`` here).

Language codes are DeepL's: upper case, a target may carry a variant (``EN-GB``, ``EN-US``,
``PT-BR``) which is the language's own code here (``en``, ``pt``). With ``--api-keys`` the key
comes as ``Authorization: DeepL-Auth-Key KEY`` (or the legacy ``auth_key`` field). Errors are
``{"message": "..."}``: 400 bad request, 403 authorization, 413 over the character limit or
body size, 429 too many requests, 500 a failed translation, 503 Triton unavailable. Without
``source_lang``, a text surely in a language the server does not translate from is a 400
"Value for 'source_lang' not supported: text[1]: this looks like French; this server translates
from English (detected FR; ...)" (DeepL itself detects among its own languages only, and has no
error for this: a wrong-language text is best refused as a source_lang it lacks).

``tag_handling=xml`` (what Weblate sends, its placeholders as ``<x id="7"></x>`` with
``ignore_tags=x``) is read here, by ``nmtserve.documents`` (its "xml" format and ``XmlRules``):
XML that is not well formed, or that declares an entity, is DeepL's 400 "Tag handling parsing
failed, please check input." Each text's sentences go to the model without their markup, all
texts in one request, and the markup is put back by the decoder's word alignments
(``documents._align``), so every placeholder comes back exactly once and the text around it is
the plain translation. ``split_sentences=1`` (DeepL's default) also ends a sentence at a line
break; 0 reads as nonewlines (the document's structure still cuts it).
"""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nmtserve.client import InvalidInputError, TranslationError
from nmtserve.client.errors import local_message

from . import deepl_documents
from .errors import (
    BadRequest,
    Forbidden,
    GatewayError,
    NotFound,
    RateLimited,
    TooLarge,
    Unavailable,
    endpoint,
    from_client,
)
from .glossaries import INVALID_ENTRIES, Glossary, parse_entries
from .languages import Catalog
from .params import read_params
from .service import Service, as_terms, looks_like

AUTH_SCHEME = "deepl-auth-key"
# DeepL lists these languages as targets only by variant; each variant is the language here.
TARGET_VARIANTS = {
    "en": (("EN-GB", "English (British)"), ("EN-US", "English (American)")),
    "pt": (("PT-BR", "Portuguese (Brazilian)"), ("PT-PT", "Portuguese (European)")),
}


def _error(exc: GatewayError) -> JSONResponse:
    status = (403 if isinstance(exc, Forbidden) else 429 if isinstance(exc, RateLimited)
              else 413 if isinstance(exc, TooLarge) else 404 if isinstance(exc, NotFound)
              else 400 if isinstance(exc, BadRequest)
              else 503 if isinstance(exc, Unavailable) else 500)
    detail = getattr(exc, "detail", None)  # DeepL's second field (glossary entries: which one)
    return JSONResponse({"message": INVALID_ENTRIES, "detail": detail} if detail else {"message": exc.message}, status)


def _base(code: str) -> str:
    """DeepL's code, or a served one, as the language alone: "EN-GB" -> "en", "pt_BR" -> "pt"."""
    return code.strip().replace("_", "-").split("-", 1)[0].lower()


def _served(value: Any, codes: list[str], field: str) -> str:
    """The served code that DeepL's ``value`` names; BadRequest naming ``field`` otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"Value for '{field}' not supported.")
    wanted = _base(value)
    for code in codes:
        if _base(code) == wanted:
            return code
    raise BadRequest(f"Value for '{field}' not supported.")


def _deepl_source(code: str) -> str:
    return _base(code).upper()


def _auth_key(request: Request, params: Any) -> str | None:
    scheme, _, key = request.headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == AUTH_SCHEME and key.strip():
        return key.strip()
    legacy = params.get("auth_key")
    return legacy if isinstance(legacy, str) else None


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("1", "true"))


# DeepL's documented values of the parameters this server takes as DeepL does (its one model has
# no formality: asking for it is refused, as DeepL refuses a target without
# formality; the "prefer_" forms are a wish, accepted).
_FORMALITY_WISHES = ("default", "prefer_more", "prefer_less")
_FORMALITY_DEMANDS = ("more", "less")
_MODEL_TYPES = ("quality_optimized", "prefer_quality_optimized", "latency_optimized")
_TAG_HANDLINGS = ("html", "xml")
# v2 parses strictly, as this server always does; v1 is DeepL's older placement.
_TAG_HANDLING_VERSIONS = ("v1", "v2")
_TAG_LISTS = ("ignore_tags", "splitting_tags", "non_splitting_tags")
PARSING_FAILED = "Tag handling parsing failed, please check input."


def _split_sentences(value: object) -> str:
    """DeepL's ``split_sentences``: "0", "1" (default), "nonewlines", also as the JSON numbers 0 and 1."""
    if value is None or value == "":
        return "1"
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return str(value)
    if isinstance(value, str) and value in ("0", "1", "nonewlines"):
        return value
    raise BadRequest(f"Value for 'split_sentences' not supported: {value!r} (0, 1 or nonewlines).")


def _tag_handling(params) -> str | None:
    value = params.get("tag_handling") or None
    if value not in (None, *_TAG_HANDLINGS):
        raise BadRequest(f"Value for 'tag_handling' not supported: {value!r} (html or xml).")
    version = params.get("tag_handling_version")
    if version not in (None, "", *_TAG_HANDLING_VERSIONS):
        raise BadRequest("Value for 'tag_handling_version' not supported.")
    for name in _TAG_LISTS:  # outline_detection alone changes nothing without xml: ignored, as unknown fields are
        if value != "xml" and params.get(name) not in (None, "", []):
            raise BadRequest(f"Value for '{name}' not supported: this server reads it with tag_handling=xml only "
                             "(with html, translate=\"no\" keeps an element as it is).")
    return value


def _tags(params, name: str) -> frozenset[str]:
    """DeepL's tag list ``name``: a JSON list or string, or form fields, each comma-separated."""
    tags: set[str] = set()
    for value in params.getlist(name):
        if not isinstance(value, str):
            raise BadRequest(f"Value for '{name}' not supported: a list of tag names.")
        tags.update(tag.strip() for tag in value.split(",") if tag.strip())
    return frozenset(tags)


def _outline_detection(value: object) -> bool:
    """DeepL's ``outline_detection``: a boolean (JSON), "0"/"1" (a form); on by default."""
    if value is None or value == "":
        return True
    if value is True or value is False:
        return value
    if isinstance(value, (int, str)) and str(value).lower() in ("0", "1", "true", "false"):
        return str(value).lower() in ("1", "true")
    raise BadRequest("Value for 'outline_detection' not supported.")


def _xml_documents(params, texts: list[str], languages: list[str], split: str) -> list[Any]:
    """Each text read as DeepL's XML (``documents.segment``) with the request's rules, its
    sentences cut by ``languages``' rules; DeepL's 400 for a text that is not well formed."""
    try:
        from nmtserve.documents import DocumentError, MarkupError, XmlRules, segment
    except ImportError:  # the gateway installed without nmtserve[documents] (sentencex)
        raise BadRequest("Value for 'tag_handling' not supported: 'xml' needs nmtserve[documents] on this "
                         "gateway.") from None
    rules = XmlRules(**{name: _tags(params, name) for name in _TAG_LISTS},
                     outline_detection=_outline_detection(params.get("outline_detection")),
                     split_on_newlines=split == "1")
    documents = []
    for i, (text, language) in enumerate(zip(texts, languages, strict=True)):
        where = f"text[{i}]: " if len(texts) > 1 else ""
        try:
            documents.append(segment(text, "xml", language=language, max_chars=max(len(text), 1), xml=rules))
        except MarkupError as exc:
            raise BadRequest(f"{PARSING_FAILED} ({where}{exc})") from None
        except DocumentError as exc:
            raise BadRequest(f"Value for 'text' not supported: {where}{exc}") from None
    return documents


async def _translate_xml(service: Service, documents: list[Any], positions: list[int], source: str,
                         target: str, several: bool, glossary: Glossary | None = None) -> list[str]:
    """The documents translated: every sentence of them in one request, without its markup,
    with its word alignment, and the markup put back by it (``Segmented.render_aligned``); the
    ``glossary``'s terms found in a sentence asked for in its translation. An error about a
    sentence names its text (``text[i]``, its place in the request) when ``several``."""
    options: dict[str, Any] = {"alignment": True, "split_sentences": False,  # cut already, by the XML's rules
                               **(await service.catalog()).route(source, target)}
    sentences = [s for document in documents for s in document.without_markup()]
    if glossary is not None:
        terms = [glossary.terms(s) for s in sentences]
        if any(terms):
            options["terms"] = as_terms(terms)
    owners = [p for document, p in zip(documents, positions, strict=True) for _ in document.sentences]
    translated = []
    if sentences:
        try:
            translated = await service.translator.translate(sentences, **options)
        except TranslationError as exc:
            error = from_client(exc)
            if isinstance(exc, InvalidInputError):
                error.message = local_message(exc.message, "a sentence")
                if exc.index is not None and several:
                    error.message = f"text[{owners[exc.index]}]: {error.message}"
            raise error from exc
    out, start = [], 0
    for document in documents:
        part = translated[start:start + len(document.sentences)]
        start += len(document.sentences)
        out.append(document.render_aligned([t.text for t in part], [t.alignment or [] for t in part]))
    return out


def _check_unsupported(params) -> None:
    """Refuse what this server cannot do, with DeepL's messages, instead of ignoring it."""
    formality = params.get("formality")
    if formality not in (None, "", *_FORMALITY_WISHES):
        if formality in _FORMALITY_DEMANDS:
            raise BadRequest("'formality' is not supported for given 'target_lang'.")
        raise BadRequest("Value for 'formality' not supported.")
    model_type = params.get("model_type")
    if model_type not in (None, "", *_MODEL_TYPES):
        raise BadRequest("Value for 'model_type' not supported.")


# /v2/usage's character_limit of a key without one (DeepL answers unlimited plans so).
UNLIMITED_CHARACTERS = 1_000_000_000_000


def routes(service: Service) -> list[Route]:
    async def sources_of(texts: list[str], catalog: Catalog, source: str | None, target: str) -> list[str]:
        if source is not None:
            if not catalog.serves(source, target):
                raise BadRequest("Value for 'target_lang' not supported.")
            return [source] * len(texts)
        foreign = await service.foreign(texts)
        if foreign is not None:
            # DeepL detects among its own languages only; refusing as it refuses a source_lang it
            # does not have beats translating French as English (detect.py says when it is sure).
            i, seen = foreign
            where = f"text[{i}]: " if len(texts) > 1 else ""
            raise BadRequest(f"Value for 'source_lang' not supported: {where}{looks_like(seen, catalog)} (detected "
                             f"{_deepl_source(seen.language)}; set source_lang to translate it anyway).")
        found = await asyncio.gather(*(service.detect_source(t, target) for t in texts))
        if any(f is None for f in found):
            raise BadRequest("Value for 'target_lang' not supported.")
        return [f.language for f in found]  # type: ignore[union-attr]

    @endpoint(_error)
    async def translate(request: Request) -> JSONResponse:
        params = await read_params(request)
        key = service.access.check(_auth_key(request, params))
        texts = params.getlist("text")
        if not texts:
            raise BadRequest("Parameter 'text' not specified.")
        if not all(isinstance(t, str) for t in texts):
            raise BadRequest("Value for 'text' not supported: every text must be a string.")
        if params.get("target_lang") is None:
            raise BadRequest("Parameter 'target_lang' not specified.")
        tag_handling = _tag_handling(params)
        # DeepL's `context`: text around the texts that informs their translation and is not
        # translated or billed. The models served translate sentence by sentence and take no
        # context: it is checked and then not used (docs/gateway.md).
        if params.get("context") is not None and not isinstance(params.get("context"), str):
            raise BadRequest("Value for 'context' not supported: it must be a string.")
        service.access.check_request(key, texts, api="deepl")  # texts, characters, the key's minute
        catalog = await service.catalog()
        target = _served(params.get("target_lang"), catalog.targets, "target_lang")
        given = params.get("source_lang")
        source = _served(given, catalog.sources, "source_lang") if given else None
        glossary = _glossary_of(service, key, params.get("glossary_id"), source, target)
        split = _split_sentences(params.get("split_sentences"))
        _check_unsupported(params)
        documents: list[Any] = []
        if tag_handling == "xml":  # read before detection, which then sees the text without its markup
            documents = _xml_documents(params, texts, [source or "en"] * len(texts), split)
            shown = [" ".join(document.without_markup()) for document in documents]
            sources = await sources_of(shown, catalog, source, target)
            if source is None:  # cut again by each detected language's sentence rules
                documents = _xml_documents(params, texts, sources, split)
        else:
            sources = await sources_of(texts, catalog, source, target)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(sources):
            groups[s].append(i)
        if documents:
            done = await asyncio.gather(*(_translate_xml(service, [documents[i] for i in positions], positions, s,
                                                         target, len(texts) > 1, glossary)
                                          for s, positions in groups.items()))
        else:
            results = await asyncio.gather(*(service.translate([texts[i] for i in positions], s, target,
                                                               html=tag_handling == "html", split=split != "0",
                                                               glossary=glossary)
                                             for s, positions in groups.items()))
            done = [[t.text for t in group] for group in results]
        out: list[str] = [""] * len(texts)
        for positions, translated in zip(groups.values(), done, strict=True):
            for i, t in zip(positions, translated, strict=True):
                out[i] = t
        billed = _flag(params.get("show_billed_characters"))
        return JSONResponse({"translations": [
            {"detected_source_language": _deepl_source(s), "text": t,
             **({"billed_characters": len(text)} if billed else {})}
            for s, t, text in zip(sources, out, texts, strict=True)
        ]})

    @endpoint(_error)
    async def languages(request: Request) -> JSONResponse:
        params = await read_params(request)
        service.access.check(_auth_key(request, params))
        kind = params.get("type") or "source"
        if kind not in ("source", "target"):
            raise BadRequest("Value for 'type' not supported.")
        catalog = await service.catalog()
        if kind == "source":
            return JSONResponse([{"language": _deepl_source(c), "name": catalog.name(c)} for c in catalog.sources])
        listed = []
        for code in catalog.targets:
            variants = TARGET_VARIANTS.get(_base(code), ((_deepl_source(code), catalog.name(code)),))
            listed += [{"language": v, "name": n, "supports_formality": False} for v, n in variants]
        return JSONResponse(listed)

    @endpoint(_error)
    async def usage(request: Request) -> JSONResponse:
        params = await read_params(request)
        count, limit = service.access.usage(service.access.check(_auth_key(request, params)))
        # No limit: DeepL's own answer for unlimited accounts.
        return JSONResponse({"character_count": count, "character_limit": limit or UNLIMITED_CHARACTERS})

    def bound(handler: Any) -> Any:
        return endpoint(_error)(functools.partial(handler, service))

    return [
        Route("/v2/translate", translate, methods=["POST"]),
        Route("/v2/languages", languages, methods=["GET", "POST"]),
        Route("/v2/usage", usage, methods=["GET", "POST"]),
        Route("/v2/glossary-language-pairs", bound(glossary_language_pairs), methods=["GET"]),
        Route("/v2/glossaries", bound(create_glossary), methods=["POST"]),
        Route("/v2/glossaries", bound(list_glossaries), methods=["GET"]),
        Route("/v2/glossaries/{glossary_id:str}", bound(get_glossary), methods=["GET"]),
        Route("/v2/glossaries/{glossary_id:str}", bound(delete_glossary), methods=["DELETE"]),
        Route("/v2/glossaries/{glossary_id:str}/entries", bound(glossary_entries), methods=["GET"]),
        *deepl_documents.routes(service, _auth_key, lambda key: _owner(key), _served, _error, endpoint),
    ]


# -- glossaries

TSV = "text/tab-separated-values"


def _glossary_of(service: Service, key: Any, glossary_id: Any, source: str | None, target: str) -> Glossary | None:
    """The key's glossary that ``glossary_id`` names (None without one); DeepL's errors for a
    request without ``source_lang``, or whose pair is not the glossary's."""
    if glossary_id in (None, ""):
        return None
    if source is None:
        raise BadRequest("Parameter 'source_lang' not specified: a glossary_id needs it.")
    glossary = service.glossaries.get(_owner(key), glossary_id)
    if (glossary.source_lang, glossary.target_lang) != (_base(source), _base(target)):
        raise BadRequest("Language pair of the glossary doesn't match the language pair of the request")
    return glossary


def _owner(key: Any) -> str | None:
    """Whose glossaries a request sees: its key's (None when the gateway has no keys)."""
    return key.key if key is not None else None


async def _glossary_request(service: Service, request: Request) -> tuple[Any, str | None]:
    params = await read_params(request)
    return params, _owner(service.access.check(_auth_key(request, params)))


def _pairs(catalog: Catalog) -> list[tuple[str, str]]:
    """The served pairs as glossary pairs (DeepL's glossary languages: lower case, no variant)."""
    return list(dict.fromkeys((_base(s), _base(t)) for s, t in catalog.pairs))


async def glossary_language_pairs(service: Service, request: Request) -> JSONResponse:
    await _glossary_request(service, request)
    pairs = _pairs(await service.catalog())
    return JSONResponse({"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in pairs]})


async def create_glossary(service: Service, request: Request) -> JSONResponse:
    params, owner = await _glossary_request(service, request)
    name = params.get("name")
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("Parameter 'name' not specified.")
    source, target = params.get("source_lang"), params.get("target_lang")
    for field, value in (("source_lang", source), ("target_lang", target)):
        if not isinstance(value, str) or not value.strip():
            raise BadRequest(f"Parameter '{field}' not specified.")
    pair = (_base(source), _base(target))
    if pair not in _pairs(await service.catalog()):
        raise BadRequest("Unsupported glossary source and target language pair")
    entries = parse_entries(params.get("entries"), params.get("entries_format"), *pair)
    glossary = await asyncio.to_thread(service.glossaries.create, owner, name, pair[0], pair[1], entries)
    return JSONResponse(glossary.info(), 201)


async def list_glossaries(service: Service, request: Request) -> JSONResponse:
    _, owner = await _glossary_request(service, request)
    found = await asyncio.to_thread(service.glossaries.list, owner)
    return JSONResponse({"glossaries": [g.info() for g in found]})


async def get_glossary(service: Service, request: Request) -> JSONResponse:
    _, owner = await _glossary_request(service, request)
    return JSONResponse(service.glossaries.get(owner, request.path_params["glossary_id"]).info())


async def delete_glossary(service: Service, request: Request) -> Response:
    _, owner = await _glossary_request(service, request)
    await asyncio.to_thread(service.glossaries.delete, owner, request.path_params["glossary_id"])
    return Response(status_code=204)


async def glossary_entries(service: Service, request: Request) -> Response:
    """The entries as TSV, the one format DeepL gives them in: an ``Accept`` that does not take
    it is DeepL's 415."""
    _, owner = await _glossary_request(service, request)
    glossary = service.glossaries.get(owner, request.path_params["glossary_id"])
    accept = [a.split(";", 1)[0].strip().lower() for a in request.headers.get("accept", "").split(",")]
    if not any(a in ("", "*/*", "text/*", TSV) for a in accept):
        return JSONResponse({"message": "Unsupported Media Type", "detail": f"Accept must allow {TSV}"}, 415)
    return Response(glossary.tsv(), media_type=TSV)
