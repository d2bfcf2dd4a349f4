"""Language codes of multilingual models, and the ISO 639 codes users type for them.

Dependency-light on purpose: the client, the Triton models and the CLI import it. ISO 639 facts
of the languages the three families name come from a table generated from ``python-iso639``
(``_language_table``); its full tables (~13 MB, ~0.4 s in each process) load only for other codes
or a macrolanguage lookup. A model's own codes are its language tokens:

* NLLB-200: ``fra_Latn`` (ISO 639-3 + ISO 15924 script);
* M2M100: ``__fr__`` (ISO 639-1 where one exists, else 639-3; fairseq's ``ns`` is Northern Sotho);
* mBART-50: ``fr_XX`` (ISO 639-1 + a region, ``XX`` for none).

``resolve(code, model_codes)`` accepts, case-insensitively: a model code (``fra_Latn``, ``fra-latn``,
``__fr__`` or ``fr`` for M2M100, ``fr_XX``); an ISO 639-1, 639-3 or 639-2/B code that names exactly
one of the model's codes (``fr``/``fra``/``fre`` -> ``fra_Latn``), directly, or through its
macrolanguage (``sw`` -> ``swh_Latn``, ``arb`` -> ``__ar__``). Several matches (``zh`` with
``zho_Hans`` and ``zho_Hant``; ``ar`` with NLLB's nine Arabic varieties) or none raise a
``LanguageError`` that names the code and, when ambiguous, the candidates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# fairseq's M2M100 code for Northern Sotho, which has no ISO 639-1 code.
NON_ISO_CODES = {"ns": "nso"}

_NLLB = re.compile(r"([a-z]{3})_([A-Z][a-z]{3})")
_M2M100 = re.compile(r"__([A-Za-z0-9_-]+)__")
_MBART = re.compile(r"([a-z]{2})_([A-Z]{2})")
# ISO's reference names qualify some names; the qualifier says nothing to a user picking a language.
_QUALIFIERS = re.compile(r" \((individual language|macrolanguage)\)$")


class LanguageError(ValueError):
    """An unknown or ambiguous language code; the message names it (and the candidates)."""


@dataclass(frozen=True)
class Language:
    """One of a model's languages: its code, the ISO 639-1 code (639-3 when there is none), an
    English name; ``describe`` leaves ``targets`` empty."""

    code: str
    iso: str
    name: str
    targets: tuple[str, ...] = ()  # codes it is translated into, where a server says (the client's languages())


@dataclass(frozen=True)
class _Parsed:
    bare: str             # the code without the family's decoration: fra_Latn, fr, fr_XX
    language: str | None  # ISO 639-3
    variant: str | None   # the script (NLLB) or region (mBART-50)


@dataclass(frozen=True)
class _IsoFacts:
    """What this module reads of a python-iso639 Language (from ``_language_table``)."""

    part1: str | None
    part3: str
    name: str
    macrolanguage: str | None


def _iso(code: str) -> Any:
    """The ISO 639 facts of an ISO 639-1/-3/-2B code (``part1``, ``part3``, ``name``,
    ``macrolanguage``), or None: from the families' table, else from python-iso639."""
    from ._language_table import TABLE

    key = NON_ISO_CODES.get(code.lower(), code.lower())
    if key in TABLE:
        part1, part3, name, macro = TABLE[key]
        return _IsoFacts(part1 or None, part3, name, macro or None)
    return _iso_full(code)


def _iso_full(code: str) -> Any:
    """The python-iso639 Language of an ISO 639-1/-3/-2B code, or None."""
    from iso639 import Language as IsoLanguage
    from iso639 import LanguageNotFoundError

    code = NON_ISO_CODES.get(code.lower(), code.lower())
    lookups = {2: (IsoLanguage.from_part1,), 3: (IsoLanguage.from_part3, IsoLanguage.from_part2b)}
    for lookup in lookups.get(len(code), ()):
        try:
            return lookup(code)
        except LanguageNotFoundError:
            continue
    return None


@lru_cache(maxsize=4096)
def _parse(code: str) -> _Parsed:
    for pattern, variant in ((_NLLB, True), (_MBART, True), (_M2M100, False)):
        m = pattern.fullmatch(code)
        if m:
            bare = code if variant else m.group(1)
            lang = _iso(m.group(1))
            return _Parsed(bare, lang.part3 if lang else None, m.group(2) if variant else None)
    # A plain ISO code, as language pairs name their sides ("en-fr").
    lang = _iso(code) if re.fullmatch(r"[A-Za-z]{2,3}", code) else None
    return _Parsed(code, lang.part3 if lang else None, None)


@lru_cache(maxsize=1)
def _macrolanguages() -> dict[str, str]:
    """ISO 639-3 individual language -> its macrolanguage."""
    from iso639 import ALL_LANGUAGES

    return {lang.part3: lang.macrolanguage for lang in ALL_LANGUAGES if lang.macrolanguage}


def resolve(code: str, model_codes: Sequence[str]) -> str:
    """The model code for ``code`` (a model code or an unambiguous ISO 639 code); LanguageError if none or several."""
    query = code.strip()
    if not query:
        raise LanguageError("empty language code")
    if query in model_codes:
        return query
    folded = query.lower().replace("-", "_")
    for candidate in model_codes:
        if folded in (candidate.lower(), _parse(candidate).bare.lower()):
            return candidate
    wanted = _iso(folded) if re.fullmatch(r"[a-z]{2,3}", folded) else None
    if wanted is None:
        raise LanguageError(f"unknown language {code!r}: neither a language code of this model "
                            f"(e.g. {', '.join(model_codes[:3])}) nor an ISO 639-1 / 639-3 code")
    parts = {c: _parse(c).language for c in model_codes}
    candidates = [c for c, lang in parts.items() if lang == wanted.part3]
    if not candidates:  # a macrolanguage: the model's varieties of it (ar -> arb_Arab, ary_Arab, ...)
        macro = _macrolanguages()
        candidates = [c for c, lang in parts.items() if lang is not None and macro.get(lang) == wanted.part3]
        if not candidates and wanted.part3 in macro:  # an individual language: the model's macrolanguage
            candidates = [c for c, lang in parts.items() if lang == macro[wanted.part3]]
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise LanguageError(f"ambiguous language {code!r} ({_name(wanted)}): this model has "
                            f"{', '.join(candidates)}; use one of those codes")
    raise LanguageError(f"this model does not translate {_name(wanted)} ({code!r})")


def describe(model_codes: Sequence[str]) -> list[Language]:
    """The model's languages, in its order, for listing to users. The script or region is named
    only where the model has the language more than once (``Chinese (Hans)``, ``Chinese (Hant)``)."""
    parsed = [_parse(c) for c in model_codes]
    counts: dict[str, int] = {}
    for p in parsed:
        if p.language:
            counts[p.language] = counts.get(p.language, 0) + 1
    out = []
    for code, p in zip(model_codes, parsed, strict=True):
        lang = _iso(p.language) if p.language else None
        if lang is None:
            out.append(Language(code, p.bare, code))
            continue
        name = _name(lang)
        if counts[lang.part3] > 1 and p.variant:
            name = f"{name} ({p.variant})"
        out.append(Language(code, lang.part1 or lang.part3, name))
    return out


def _name(lang: Any) -> str:
    return _QUALIFIERS.sub("", lang.name)
