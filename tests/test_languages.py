"""``nmtserve.languages``: what users type resolves to exactly one model code, or fails saying why.

The model codes are the three families' real lists (written out here; the last test checks them
against transformers' own). Resolution accepts the model's codes in any case and unambiguous ISO
639 codes; ambiguous and unknown codes raise a ``LanguageError`` naming the code (and the
candidates); ``describe`` names every real code from the ISO 639 data.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from nmtserve.languages import Language, LanguageError, describe, resolve

NLLB = [
    "ace_Arab", "ace_Latn", "acm_Arab", "acq_Arab", "aeb_Arab", "afr_Latn", "ajp_Arab", "apc_Arab", "arb_Arab",
    "ars_Arab", "ary_Arab", "arz_Arab", "deu_Latn", "eng_Latn", "est_Latn", "fra_Latn", "ltg_Latn", "lvs_Latn",
    "pes_Arab", "prs_Arab", "swh_Latn", "yue_Hant", "zho_Hans", "zho_Hant", "zsm_Latn",
]
M2M100 = [f"__{c}__" for c in ("af", "ar", "ast", "de", "en", "fr", "ns", "no", "zh", "zu")]
MBART50 = ["ar_AR", "de_DE", "en_XX", "fr_XX", "zh_CN", "pt_XX", "sl_SI"]


@pytest.mark.parametrize("codes, code", [(NLLB, "fra_Latn"), (M2M100, "__fr__"), (MBART50, "fr_XX")])
def test_a_model_code_resolves_to_itself(codes, code):
    assert resolve(code, codes) == code


@pytest.mark.parametrize("codes, typed, expected", [
    (NLLB, "FRA_LATN", "fra_Latn"),
    (NLLB, "fra-latn", "fra_Latn"),
    (M2M100, "fr", "__fr__"),
    (M2M100, "FR", "__fr__"),
    (M2M100, "__FR__", "__fr__"),
    (MBART50, "FR_xx", "fr_XX"),
    (MBART50, " fr_XX ", "fr_XX"),
])
def test_model_codes_are_case_insensitive(codes, typed, expected):
    assert resolve(typed, codes) == expected


@pytest.mark.parametrize("codes, typed, expected", [
    (NLLB, "fr", "fra_Latn"), (NLLB, "fra", "fra_Latn"), (NLLB, "fre", "fra_Latn"), (NLLB, "DE", "deu_Latn"),
    (NLLB, "ger", "deu_Latn"), (NLLB, "yue", "yue_Hant"),
    (M2M100, "fra", "__fr__"), (M2M100, "nso", "__ns__"), (M2M100, "ns", "__ns__"), (M2M100, "ast", "__ast__"),
    (MBART50, "fr", "fr_XX"), (MBART50, "fra", "fr_XX"), (MBART50, "zh", "zh_CN"), (MBART50, "zho", "zh_CN"),
])
def test_unambiguous_iso_codes_resolve(codes, typed, expected):
    assert resolve(typed, codes) == expected


@pytest.mark.parametrize("codes, typed, expected", [
    (NLLB, "sw", "swh_Latn"),     # Swahili, the macrolanguage -> the model's only variety of it
    (NLLB, "ms", "zsm_Latn"),     # Malay -> Standard Malay
    (M2M100, "arb", "__ar__"),    # Standard Arabic -> the model's Arabic
    (M2M100, "nob", "__no__"),    # Norwegian Bokmål -> Norwegian
    (MBART50, "cmn", "zh_CN"),    # Mandarin -> Chinese
])
def test_macrolanguages_resolve_through_their_members(codes, typed, expected):
    assert resolve(typed, codes) == expected


@pytest.mark.parametrize("codes, typed, candidates", [
    (NLLB, "zh", ["zho_Hans", "zho_Hant"]),
    (NLLB, "zho", ["zho_Hans", "zho_Hant"]),
    (NLLB, "ar", ["acm_Arab", "acq_Arab", "aeb_Arab", "ajp_Arab", "apc_Arab", "arb_Arab", "ars_Arab", "ary_Arab",
                  "arz_Arab"]),
    (NLLB, "fa", ["pes_Arab", "prs_Arab"]),
    (NLLB, "lv", ["ltg_Latn", "lvs_Latn"]),
    (NLLB, "ace", ["ace_Arab", "ace_Latn"]),
])
def test_ambiguous_codes_name_the_candidates(codes, typed, candidates):
    with pytest.raises(LanguageError, match="ambiguous") as info:
        resolve(typed, codes)
    message = str(info.value)
    assert repr(typed) in message
    assert all(c in message for c in candidates), message
    assert sum(c in message for c in codes) == len(candidates), message


@pytest.mark.parametrize("codes, typed, match", [
    (NLLB, "xx", "unknown language 'xx'"),
    (NLLB, "klingon", "unknown language 'klingon'"),
    (NLLB, "fra_Cyrl", "unknown language 'fra_Cyrl'"),
    (M2M100, "__xx__", "unknown language '__xx__'"),
    (NLLB, "", "empty language code"),
    (NLLB, "ja", "does not translate Japanese \\('ja'\\)"),
    (MBART50, "it", "does not translate Italian"),
])
def test_unknown_codes_are_refused_by_name(codes, typed, match):
    with pytest.raises(LanguageError, match=match):
        resolve(typed, codes)


def test_language_error_is_a_value_error():
    assert issubclass(LanguageError, ValueError)


def test_describe_gives_iso_codes_and_english_names():
    assert describe(["fra_Latn", "zho_Hans", "zho_Hant", "yue_Hant", "swh_Latn", "ace_Arab"]) == [
        Language("fra_Latn", "fr", "French"),
        Language("zho_Hans", "zh", "Chinese (Hans)"),
        Language("zho_Hant", "zh", "Chinese (Hant)"),
        Language("yue_Hant", "yue", "Yue Chinese"),
        Language("swh_Latn", "swh", "Swahili"),  # the individual language: no ISO 639-1 code
        Language("ace_Arab", "ace", "Achinese"),
    ]
    assert describe(["__fr__", "__ns__", "__no__"]) == [
        Language("__fr__", "fr", "French"), Language("__ns__", "nso", "Pedi"), Language("__no__", "no", "Norwegian")]
    assert describe(["fr_XX", "zh_CN"]) == [Language("fr_XX", "fr", "French"), Language("zh_CN", "zh", "Chinese")]


def test_describe_keeps_codes_it_does_not_know():
    assert describe(["__xx__", "my_code"]) == [Language("__xx__", "xx", "__xx__"), Language("my_code", "my_code", "my_code")]


def test_the_module_imports_nothing_heavy():
    code = "import sys, nmtserve.languages; assert not {'torch', 'numpy', 'iso639'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_real_code_is_named_and_resolves_to_itself():
    """transformers' lists of the three families' codes (all of them, not the samples above)."""
    pytest.importorskip("transformers")
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M
    from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES as MBART
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB_ALL

    for codes in (list(NLLB_ALL), [f"__{c}__" for c in M2M["m2m100"]], list(MBART)):
        described = describe(codes)
        assert [d.code for d in described] == codes
        assert all(d.name != d.code for d in described), [d for d in described if d.name == d.code]
        assert len({d.name for d in described}) == len(codes)
        for code in codes:
            assert resolve(code, codes) == code
            assert resolve(code.upper(), codes) == code


def test_the_families_table_answers_as_python_iso639_does():
    """nmtserve/_language_table.py (scripts/make_language_table.py) holds, for every code in it,
    what python-iso639 says; a release of either that changes an answer fails here."""
    from nmtserve._language_table import TABLE
    from nmtserve.languages import _iso_full

    assert len(TABLE) > 300
    for key, (part1, part3, name, macro) in TABLE.items():
        lang = _iso_full(key)
        assert (lang.part1 or "", lang.part3, lang.name, lang.macrolanguage or "") == (part1, part3, name, macro), key


def test_the_families_codes_are_described_and_resolved_without_python_iso639():
    """A server of NLLB-200, M2M100 or mBART-50 names and resolves its codes from the table: the
    full ISO 639 tables (~13 MB in every Triton stub that tokenizes) load only for other codes or
    a macrolanguage lookup."""
    pytest.importorskip("transformers")
    code = ("import sys\n"
            "from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB\n"
            "from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M\n"
            "from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES as MBART\n"
            "from nmtserve.languages import describe, resolve\n"
            "for codes in (list(NLLB), [f'__{c}__' for c in M2M['m2m100']], list(MBART)):\n"
            "    describe(codes); [resolve(c, codes) for c in codes]\n"
            "assert resolve('fr', list(NLLB)) == 'fra_Latn' and resolve('fre', list(NLLB)) == 'fra_Latn'\n"
            "assert 'iso639' not in sys.modules, 'python-iso639 was loaded'\n"
            "assert resolve('ar', ['arb_Arab', 'fra_Latn']) == 'arb_Arab'  # a macrolanguage: the full tables\n"
            "assert 'iso639' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
