"""``MultilingualTokenizer`` gives exactly the ids and text of ``transformers``' own tokenizers.

The oracle is transformers (5.24) loading the same directory as a user would
(``AutoTokenizer.from_pretrained``). The directories are written by transformers'
``save_pretrained`` from tiny sentencepiece models (tests/multilingual_fixtures.py), in the layouts
found on the hub, plus variants of their options (clean-up of spaces, NLLB's legacy layout,
``added_tokens_decoder``, ``added_tokens.json``). For each: the source ids of every sentence in four
languages, and the text of the ids a target sentence gets, in the form ``generate`` returns
(``[</s>, lang, ..., </s>, <pad>...]``) and in the form nmtserve's search returns (``[lang, ..., </s>]``),
and of random ids. The sentences have accents, digits, punctuation, runs of spaces, leading and
trailing spaces, characters the models never saw, NFKC-folded characters and literal special and
language tokens; one test checks that they tell a plain sentencepiece tokenization apart.

The one known difference: a directory saved by transformers 5.x's M2M100Tokenizer does not mark
the language tokens special, so transformers decodes ``__fr__`` as text; ours drops it as
transformers does for the hub's own M2M100 files.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("transformers")
import multilingual_fixtures as mf  # noqa: E402

from nmtserve.languages import LanguageError  # noqa: E402
from nmtserve.model.hf_tokenizer import (  # noqa: E402
    MultilingualTokenizer,
    TokenizerFilesError,
    _read_spm,
)

SENTENCES = [
    "", " ", "The red car costs thirty euros.", "  leading and trailing  ", "runs   of    spaces\tand a tab",
    "Ça coûte 12,50 € — n'est-ce pas ?", "Straße über Öl, schön!", "snow \u2603 man \u6f22\u5b57",
    "\ufb01ne \uff11\uff12\uff13", "a </s> b", "</s>", "<unk> <pad> <s>", "fra_Latn eng_Latn", "__fr__ and __en__",
    "fr_XX en_XX", "the  <mask> x", "a  </s>  b</s>c", "x<unk>y <unk> z", "don't you're I'm it's", "Hello , world .", "3.14159 2024-12-01 100%",
    "line one\nline two", "e\u0301te\u0301 \u00a0nbsp", *mf.corpus(30, seed=7),
]

# A few options on top of the hub layouts: name -> (family, layout, edit of the directory).


def _config(**changes) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        mf._edit_json(d / "tokenizer_config.json", **changes)
    return edit


def _added_tokens_decoder(d: Path) -> None:
    """A 4.x-era tokenizer_config.json: every added token with its id (facebook/nllb-200-*)."""
    ref = mf.load_transformers_tokenizer(d.parent / "nllb-saved")
    mf._edit_json(d / "tokenizer_config.json",
                  added_tokens_decoder={str(i): t.__getstate__() for i, t in ref.added_tokens_decoder.items()})


def _added_tokens_json(d: Path) -> None:
    ours = MultilingualTokenizer.from_directory(d)
    (d / "added_tokens.json").write_text(json.dumps(ours.languages), encoding="utf-8")


def _stripping_added_tokens(d: Path) -> None:
    """added_tokens_decoder with AddedToken options: </s> strips the spaces around it, <unk> is a
    single word, and the languages listed as extra special tokens."""
    languages = MultilingualTokenizer.from_directory(d).languages
    plain = dict(lstrip=False, rstrip=False, single_word=False, normalized=False, special=True)
    added = {"0": {"content": "<s>", **plain}, "1": {"content": "<pad>", **plain},
             "2": {"content": "</s>", **plain, "lstrip": True, "rstrip": True},
             "3": {"content": "<unk>", **plain, "single_word": True}}
    added.update({str(i): {"content": code, **plain} for code, i in languages.items()})
    mf._edit_json(d / "tokenizer_config.json", added_tokens_decoder=added, extra_special_tokens=list(languages))


VARIANTS: dict[str, tuple[str, str, Callable[[Path], None] | None]] = {
    **{f"{family}-{layout}": (family, layout, None) for family, layouts in mf.LAYOUTS.items() for layout in layouts},
    "mbart50-saved-clean-up": ("mbart50", "saved", _config(clean_up_tokenization_spaces=True)),
    "mbart50-hub-clean-up": ("mbart50", "hub", _config(clean_up_tokenization_spaces=True)),
    "m2m100-hub-clean-up": ("m2m100", "hub", _config(clean_up_tokenization_spaces=True)),
    "nllb-saved-clean-up": ("nllb", "saved", _config(clean_up_tokenization_spaces=True)),  # BPE: no clean-up
    "nllb-saved-legacy-behaviour": ("nllb", "saved", _config(legacy_behaviour=True)),
    "nllb-spm-added-tokens-decoder": ("nllb", "spm", _added_tokens_decoder),
    "m2m100-hub-added-tokens-json": ("m2m100", "hub", _added_tokens_json),
    "m2m100-hub-stripping-added-tokens": ("m2m100", "hub", _stripping_added_tokens),
}


@pytest.fixture(scope="module")
def directory(tmp_path_factory) -> Callable[[str], Path]:
    """name (a key of VARIANTS) -> its tokenizer directory, written once per module."""
    root = tmp_path_factory.mktemp("multilingual-tokenizers")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            family, layout, edit = VARIANTS[name]
            base = f"{family}-{layout}"
            if base not in cache:
                cache[base] = mf.WRITERS[family](root / base, layout)
            if edit is not None:
                cache[name] = Path(shutil.copytree(cache[base], root / name))
                edit(cache[name])
        return cache[name]

    return get


def _model_code(family: str, code: str) -> str:
    """transformers' src_lang / tgt_lang for a model code: M2M100 takes ``fr`` for ``__fr__``."""
    return code.strip("_") if family == "m2m100" else code


def _some_languages(tok: MultilingualTokenizer) -> list[str]:
    codes = list(tok.languages)
    french = next(c for c in codes if c.startswith(("fra", "__fr__", "fr_")))
    return [codes[0], french, codes[len(codes) // 2], codes[-1]]


# ---- parity -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_encode_matches_transformers(directory, name):
    family = VARIANTS[name][0]
    ref = mf.load_transformers_tokenizer(directory(name))
    ours = MultilingualTokenizer.from_directory(directory(name))
    for code in _some_languages(ours):
        ref.src_lang = _model_code(family, code)
        for text in SENTENCES:
            assert ours.encode(text, code) == ref(text).input_ids, (code, text)


@pytest.mark.parametrize("name", VARIANTS)
def test_decode_matches_transformers(directory, name):
    family = VARIANTS[name][0]
    ref = mf.load_transformers_tokenizer(directory(name))
    ours = MultilingualTokenizer.from_directory(directory(name))
    # transformers 5.x's own M2M100 save does not mark the language tokens special (module docstring)
    dropped = set(ours.languages.values()) if name == "m2m100-saved" else set()

    def expected(ids: list[int]) -> str:
        return ref.decode([i for i in ids if i not in dropped], skip_special_tokens=True)

    rng = random.Random(0)
    for code in _some_languages(ours):
        ref.tgt_lang = _model_code(family, code)
        for text in SENTENCES:
            target = ref(text_target=text).input_ids  # [lang] X </s>
            generated = [ours.eos_id, *target, ours.pad_id, ours.pad_id]
            assert ours.decode(generated) == expected(generated), (code, text)
            assert ours.decode(target) == expected(generated), (code, text)
        for _ in range(30):
            ids = [rng.randrange(ours.vocab_size) for _ in range(rng.randint(1, 12))]
            assert ours.decode(ids) == expected(ids), ids


def test_language_tokens_are_dropped_even_where_the_files_do_not_mark_them_special(directory):
    d = directory("m2m100-saved")
    ours = MultilingualTokenizer.from_directory(d)
    ids = ours.encode("le chien rouge", "__fr__")
    assert "__fr__" not in ours.decode([ours.eos_id, *ids])
    assert ours.decode(ids) == mf.load_transformers_tokenizer(d).decode(ids[1:], skip_special_tokens=True)


@pytest.mark.parametrize("name", VARIANTS)
def test_ids_come_from_the_files(directory, name):
    ref = mf.load_transformers_tokenizer(directory(name))
    ours = MultilingualTokenizer.from_directory(directory(name))
    family = VARIANTS[name][0]
    expected_codes = {"nllb": 202, "m2m100": 100, "mbart50": 52}[family]
    assert len(ours.languages) == expected_codes
    assert list(ours.languages.values()) == sorted(ours.languages.values())
    for code, i in ours.languages.items():
        assert ref.convert_tokens_to_ids(code) == i, code
    assert (ours.pad_id, ours.eos_id, ours.unk_id) == (ref.pad_token_id, ref.eos_token_id, ref.unk_token_id)
    assert ours.bos_id == ref.convert_tokens_to_ids("<s>")
    assert ours.vocab_size == max(*ref.get_vocab().values(), *ours.languages.values()) + 1


def test_nllb_with_legacy_behaviour_puts_the_language_last(directory):
    ours = MultilingualTokenizer.from_directory(directory("nllb-saved-legacy-behaviour"))
    ids = ours.encode("the cat", "fra_Latn")
    assert ids[-2:] == [ours.eos_id, ours.languages["fra_Latn"]]
    assert ours.encode_text("the cat") == ids[:-2]


def test_encode_text_is_the_source_without_its_specials(directory):
    ours = MultilingualTokenizer.from_directory(directory("mbart50-saved"))
    assert ours.encode("le chien", "fr_XX") == [ours.languages["fr_XX"], *ours.encode_text("le chien"), ours.eos_id]


@pytest.mark.parametrize("name", ["nllb-saved", "nllb-spm", "m2m100-hub", "mbart50-hub"])
def test_the_files_it_names_are_enough(directory, tmp_path, name):
    ours = MultilingualTokenizer.from_directory(directory(name))
    copy = MultilingualTokenizer.from_directory(mf.copy_tokenizer(directory(name), tmp_path / "copy", ours.files()))
    assert copy.languages == ours.languages and copy.files() == ours.files()
    code = next(iter(ours.languages))
    assert all(copy.encode(t, code) == ours.encode(t, code) for t in SENTENCES)


def test_the_sentences_tell_plain_sentencepiece_from_the_converted_tokenizer(directory):
    """transformers converts a lone sentencepiece model (runs of spaces collapsed, no stripping):
    encoding with sentencepiece itself and fairseq's +1 offset differs on these sentences, so
    the parity tests would catch a tokenizer that took that shortcut."""
    import sentencepiece as spm

    d = directory("mbart50-hub")
    sp = spm.SentencePieceProcessor(model_file=str(d / mf.SPM_MODEL))
    ours = MultilingualTokenizer.from_directory(d)
    shortcut = [[i + 1 if i > 2 else {0: 3, 1: 0, 2: 2}[i] for i in sp.encode(t)] for t in SENTENCES]
    assert sum(s != ours.encode_text(t) for s, t in zip(shortcut, SENTENCES, strict=True)) >= 3


def test_the_sentencepiece_reader_matches_sentencepiece(directory):
    import sentencepiece as spm

    path = directory("nllb-spm") / mf.SPM_MODEL
    sp = spm.SentencePieceProcessor(model_file=str(path))
    proto = _read_spm(path)
    assert [(p, s) for p, s, _ in proto.pieces] == [(sp.id_to_piece(i), sp.get_score(i))
                                                   for i in range(sp.get_piece_size())]
    assert [t for _, _, t in proto.pieces[:3]] == [2, 3, 3]  # <unk> unknown, <s> </s> control
    assert proto.precompiled_charsmap


# ---- what is refused -----------------------------------------------------------------------------------


def test_an_unknown_or_wrongly_cased_language_code_is_refused(directory):
    ours = MultilingualTokenizer.from_directory(directory("nllb-saved"))
    for code in ("FRA_LATN", "fra", "xyz_Latn", "__fr__"):
        with pytest.raises(LanguageError, match=repr(code)):
            ours.encode("the cat", code)


def test_the_family_comes_from_config_json_when_tokenizer_config_names_none(directory, tmp_path):
    d = Path(shutil.copytree(directory("nllb-hub"), tmp_path / "d"))
    mf._edit_json(d / "tokenizer_config.json", drop=("tokenizer_class",))
    with pytest.raises(TokenizerFilesError, match="tokenizer_class"):
        MultilingualTokenizer.from_directory(d)
    (d / "config.json").write_text(json.dumps({"model_type": "m2m_100", "tokenizer_class": "NllbTokenizer"}))
    ours = MultilingualTokenizer.from_directory(d)
    assert ours.family == "nllb" and "config.json" in ours.files()


@pytest.mark.parametrize("case, match", [
    ("empty", "cannot tell the tokenizer family"),
    ("no-tokenizer-file", "neither tokenizer.json nor sentencepiece.bpe.model"),
    ("m2m100-without-vocab", "needs vocab.json"),
    ("spm-without-languages", "no language codes"),
    ("wrong-added-token-id", "'fra_Latn' has id 7 \\(gets"),
    ("broken-spm", "sentencepiece.bpe.model: not a sentencepiece model"),
    ("unknown-family", "unknown tokenizer family 'marian'"),
    ("m2m100-shifted-languages", "differ from len"),
])
def test_bad_directories_are_refused_with_the_file_named(directory, tmp_path, case, match):
    family = None
    if case == "empty":
        d = tmp_path
    elif case == "no-tokenizer-file":
        d, family = tmp_path, "nllb"
    elif case == "m2m100-without-vocab":
        d = Path(shutil.copytree(directory("m2m100-saved"), tmp_path / "d"))
        (d / "vocab.json").unlink()
    elif case == "spm-without-languages":
        d = Path(shutil.copytree(directory("nllb-spm"), tmp_path / "d"))
        mf._edit_json(d / "tokenizer_config.json", drop=("extra_special_tokens",))
    elif case == "wrong-added-token-id":
        d = Path(shutil.copytree(directory("nllb-spm-added-tokens-decoder"), tmp_path / "d"))
        config = json.loads((d / "tokenizer_config.json").read_text())
        french = next(k for k, v in config["added_tokens_decoder"].items() if v["content"] == "fra_Latn")
        config["added_tokens_decoder"]["7"] = config["added_tokens_decoder"].pop(french)
        (d / "tokenizer_config.json").write_text(json.dumps(config))
    elif case == "broken-spm":
        d = Path(shutil.copytree(directory("mbart50-hub"), tmp_path / "d"))
        (d / mf.SPM_MODEL).write_bytes(b"\xff\xff\xff")
    elif case == "unknown-family":
        d, family = directory("nllb-saved"), "marian"
    else:  # added_tokens.json puts the languages one id later than M2M100Tokenizer's own numbering
        d = Path(shutil.copytree(directory("m2m100-hub"), tmp_path / "d"))
        languages = MultilingualTokenizer.from_directory(d).languages
        (d / "added_tokens.json").write_text(json.dumps({k: v + 1 for k, v in languages.items()}))
    with pytest.raises(TokenizerFilesError, match=match):
        MultilingualTokenizer.from_directory(d, family=family)


def test_neither_transformers_nor_torch_is_imported():
    code = ("import sys, nmtserve.model.hf_tokenizer, nmtserve.languages; "
            "assert not {'transformers', 'torch'} & set(sys.modules), sorted({'transformers', 'torch'} & set(sys.modules))")
    subprocess.run([sys.executable, "-c", code], check=True)
