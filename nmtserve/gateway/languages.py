"""Which languages the server translates, as the gateway's APIs list and route them.

``discover`` is the one place that asks the server (``AsyncTranslator.languages()``): the pairs
of a repository exported with ``--pair``, or every direction of a multilingual model, under the
ISO codes the APIs' clients send. A repository without pairs serves one unnamed model, named by
``--languages`` (default: the demo's en-fr).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

# English names, as LibreTranslate's /languages gives them, of the ISO 639-1 codes a
# translation model is likely to serve; any other code is named by itself.
NAMES = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "az": "Azerbaijani", "be": "Belarusian",
    "bg": "Bulgarian", "bn": "Bengali", "bs": "Bosnian", "ca": "Catalan", "cs": "Czech",
    "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "gl": "Galician", "gu": "Gujarati",
    "ha": "Hausa", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese",
    "ka": "Georgian", "kk": "Kazakh", "km": "Khmer", "kn": "Kannada", "ko": "Korean",
    "ky": "Kyrgyz", "la": "Latin", "lo": "Lao", "lt": "Lithuanian", "lv": "Latvian",
    "mk": "Macedonian", "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi", "ms": "Malay",
    "mt": "Maltese", "my": "Burmese", "nb": "Norwegian", "ne": "Nepali", "nl": "Dutch",
    "no": "Norwegian", "pa": "Punjabi", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian",
    "so": "Somali", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "sw": "Swahili",
    "ta": "Tamil", "te": "Telugu", "tg": "Tajik", "th": "Thai", "tl": "Tagalog",
    "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese",
    "xh": "Xhosa", "yo": "Yoruba", "zh": "Chinese", "zu": "Zulu",
}


def language_name(code: str) -> str:
    return NAMES.get(code.lower(), code)


def parse_pairs(items: Iterable[str]) -> list[tuple[str, str]]:
    """``["en-fr", "en-de"]`` -> ``[("en", "fr"), ("en", "de")]``; a malformed one is a ValueError."""
    pairs = []
    for item in items:
        source, sep, target = item.strip().partition("-")
        if not sep or not source or not target or "-" in target:
            raise ValueError(f"a language pair is SOURCE-TARGET, like en-fr; got {item!r}")
        pairs.append((source.lower(), target.lower()))
    return pairs


@dataclass(frozen=True)
class Catalog:
    """The pairs served, as the gateway's APIs name them, and how requests reach them.

    ``routed``: whether requests name their pair (a repository of pairs or a multilingual model
    takes SOURCE_LANG/TARGET_LANG; a repository without pairs takes no language inputs).
    ``names``: the server's English names of its languages (else ``NAMES``). ``model_codes``:
    the server's code of each language whose public code differs (a multilingual model's
    ``fra_Latn`` is ``fr`` to LibreTranslate's and DeepL's clients).
    """

    pairs: tuple[tuple[str, str], ...]
    routed: bool
    names: Mapping[str, str] = field(default_factory=dict)
    model_codes: Mapping[str, str] = field(default_factory=dict)

    def name(self, code: str) -> str:
        return self.names.get(code) or language_name(code)

    # A multilingual model serves n * (n - 1) pairs: these are computed once per list read.

    @cached_property
    def sources(self) -> list[str]:
        return sorted({s for s, _ in self.pairs})

    @cached_property
    def targets(self) -> list[str]:
        return sorted({t for _, t in self.pairs})

    @cached_property
    def codes(self) -> list[str]:
        """Every language, source or target (LibreTranslate lists them all)."""
        return sorted({c for pair in self.pairs for c in pair})

    @cached_property
    def _targets(self) -> dict[str, list[str]]:
        targets: dict[str, list[str]] = {}
        for s, t in self.pairs:
            targets.setdefault(s, []).append(t)
        return {s: sorted(ts) for s, ts in targets.items()}

    @cached_property
    def _pair_set(self) -> frozenset[tuple[str, str]]:
        return frozenset(self.pairs)

    def targets_of(self, source: str) -> list[str]:
        return self._targets.get(source, [])

    def serves(self, source: str, target: str) -> bool:
        return (source, target) in self._pair_set

    def route(self, source: str, target: str) -> dict[str, str]:
        """The client's keyword arguments that send a request to this pair."""
        if not self.routed:
            return {}
        return {"source_lang": self.model_codes.get(source, source),
                "target_lang": self.model_codes.get(target, target)}


async def discover(translator: Any, unnamed: Sequence[str]) -> Catalog:
    """What ``translator``'s server translates (``AsyncTranslator.languages()``: a repository of
    pairs, or a multilingual model), or ``unnamed`` for one model exported without ``--pair``.
    Raises what the client raises when the server cannot say."""
    served = await translator.languages()
    if not served:
        return Catalog(tuple(parse_pairs(unnamed)), routed=False)
    public = public_codes(served)
    pairs = tuple((public[lang.code], public[t]) for lang in served for t in lang.targets if t in public)
    return Catalog(pairs, routed=True, names={public[lang.code]: lang.name for lang in served},
                   model_codes={p: c for c, p in public.items() if p != c})


def public_codes(languages: Sequence[Any]) -> dict[str, str]:
    """The code each served language gets in the APIs: its ISO 639 code (``fr`` for NLLB's
    ``fra_Latn``), which LibreTranslate's and DeepL's clients send, unless two served languages
    share it (``zho_Hans``, ``zho_Hant``): those keep the server's codes."""
    count: dict[str, int] = {}
    for lang in languages:
        count[lang.iso] = count.get(lang.iso, 0) + 1
    return {lang.code: lang.iso if lang.iso and count[lang.iso] == 1 else lang.code for lang in languages}
