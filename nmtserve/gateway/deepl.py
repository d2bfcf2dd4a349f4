"""A subset of DeepL's API v2, enough for DeepL's own client libraries and the tools built on them.

    POST /v2/translate   text (a list; a form repeats it), target_lang, source_lang (optional:
                         detected per text), tag_handling=html, split_sentences (0: each text
                         whole; 1 and nonewlines: sentence by sentence), show_billed_characters
                         -> {"translations": [{"detected_source_language", "text"(, "billed_characters")}]}
    GET|POST /v2/languages?type=source|target   [{"language", "name"(, "supports_formality")}]

Language codes are DeepL's: upper case, a target may carry a variant (``EN-GB``, ``EN-US``,
``PT-BR``) which is the language's own code here (``en``, ``pt``). With ``--api-keys`` the key
comes as ``Authorization: DeepL-Auth-Key KEY`` (or the legacy ``auth_key`` field). Errors are
``{"message": "..."}``: 400 bad request, 403 authorization, 413 over the character limit or
body size, 429 too many requests, 500 a failed translation, 503 Triton unavailable. Without
``source_lang``, a text surely in a language the server does not translate from is a 400
"Value for 'source_lang' not supported: text[1]: this looks like French; this server translates
from English (detected FR; ...)" (DeepL itself detects among its own languages only, and has no
error for this: a wrong-language text is best refused as a source_lang it lacks).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .errors import (
    BadRequest,
    Forbidden,
    GatewayError,
    RateLimited,
    TooLarge,
    Unavailable,
    endpoint,
)
from .languages import Catalog
from .params import read_params
from .service import Service, looks_like

AUTH_SCHEME = "deepl-auth-key"
# DeepL lists these languages as targets only by variant; each variant is the language here.
TARGET_VARIANTS = {
    "en": (("EN-GB", "English (British)"), ("EN-US", "English (American)")),
    "pt": (("PT-BR", "Portuguese (Brazilian)"), ("PT-PT", "Portuguese (European)")),
}


def _error(exc: GatewayError) -> JSONResponse:
    status = (403 if isinstance(exc, Forbidden) else 429 if isinstance(exc, RateLimited)
              else 413 if isinstance(exc, TooLarge) else 400 if isinstance(exc, BadRequest)
              else 503 if isinstance(exc, Unavailable) else 500)
    return JSONResponse({"message": exc.message}, status)


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
# no formality, no glossary and no XML handling: asking for one is refused, as DeepL refuses a
# target without formality; the "prefer_" forms are a wish, accepted).
_FORMALITY_WISHES = ("default", "prefer_more", "prefer_less")
_FORMALITY_DEMANDS = ("more", "less")
_MODEL_TYPES = ("quality_optimized", "prefer_quality_optimized", "latency_optimized")


def _split_sentences(value: object) -> str:
    """DeepL's ``split_sentences``: "0", "1" (default), "nonewlines", also as the JSON numbers 0 and 1."""
    if value is None or value == "":
        return "1"
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return str(value)
    if isinstance(value, str) and value in ("0", "1", "nonewlines"):
        return value
    raise BadRequest(f"Value for 'split_sentences' not supported: {value!r} (0, 1 or nonewlines).")


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
    for name in ("ignore_tags", "non_splitting_tags", "splitting_tags"):
        if params.get(name):
            raise BadRequest(f"Value for '{name}' not supported: this server handles HTML only (translate=\"no\" "
                             "keeps an element as it is).")


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
        tag_handling = params.get("tag_handling") or None
        if tag_handling not in (None, "html"):
            raise BadRequest(f"Value for 'tag_handling' not supported: {tag_handling!r} (only 'html').")
        if params.get("glossary_id"):
            raise BadRequest("Value for 'glossary_id' not supported: this server has no glossaries.")
        service.access.check_request(key, texts, api="deepl")  # texts, characters, the key's minute
        catalog = await service.catalog()
        target = _served(params.get("target_lang"), catalog.targets, "target_lang")
        given = params.get("source_lang")
        source = _served(given, catalog.sources, "source_lang") if given else None
        sources = await sources_of(texts, catalog, source, target)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(sources):
            groups[s].append(i)
        html = tag_handling == "html"
        split = _split_sentences(params.get("split_sentences"))
        _check_unsupported(params)
        done = await asyncio.gather(*(service.translate([texts[i] for i in positions], s, target, html=html,
                                                        split=split != "0")
                                      for s, positions in groups.items()))
        out: list[str] = [""] * len(texts)
        for positions, translated in zip(groups.values(), done, strict=True):
            for i, t in zip(positions, translated, strict=True):
                out[i] = t.text
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

    return [
        Route("/v2/translate", translate, methods=["POST"]),
        Route("/v2/languages", languages, methods=["GET", "POST"]),
    ]
