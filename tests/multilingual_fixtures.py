"""Tiny tokenizer directories of the three multilingual families, written by ``transformers`` itself.

Each ``write_*`` function trains a small sentencepiece model on generated text (a few hundred
lines with accents, digits and punctuation, in well under a second), builds the family's
transformers tokenizer from it, saves it with ``save_pretrained`` into the given folder, reshapes
the folder into one of the layouts found on the hub, and returns the folder. The language codes
are the real ones (NLLB's 202, M2M100's 100, mBART-50's 52), so ids look like the real layouts
in miniature. ``load_transformers_tokenizer`` loads a folder as a user would
(``AutoTokenizer.from_pretrained``); it is the oracle of tests/test_hf_tokenizer.py, and other
tests use these folders to build tiny full models.

Layouts (transformers 5.24):

* NLLB ``saved`` (the default): ``tokenizer.json`` + ``tokenizer_config.json`` (save_pretrained)
  + the sentencepiece model; ``hub``: as the 4.x-era uploads (facebook/nllb-200-*):
  ``tokenizer.json``, ``special_tokens_map.json`` listing the languages, a tokenizer_config.json
  without them; ``spm``: the sentencepiece model and tokenizer_config.json only (transformers
  converts the model file).
* M2M100 ``hub`` (the default; facebook/m2m100_418M): ``vocab.json`` + ``sentencepiece.bpe.model``
  + ``special_tokens_map.json`` listing the ``__xx__`` tokens + tokenizer_config.json; ``saved``:
  as transformers 5.x saves it, the tokenizer_config.json naming only the ``language_codes`` set
  (transformers then treats the language tokens as text: they are not special, not counted in
  ``len(tokenizer)``, and ``decode`` keeps them). ``vocab.json`` is in fairseq's style: ids
  unrelated to sentencepiece's (pieces shuffled), a few pieces left out (they map to ``<unk>``).
* mBART-50 ``saved`` (the default): ``tokenizer.json`` + tokenizer_config.json + the sentencepiece
  model; ``hub`` (facebook/mbart-large-50-many-to-many-mmt): the sentencepiece model,
  tokenizer_config.json and special_tokens_map.json listing the languages, no tokenizer.json.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import tempfile
from functools import cache
from pathlib import Path

import sentencepiece as spm

SPM_MODEL = "sentencepiece.bpe.model"

_WORDS = (
    "the cat dog house red blue green car costs thirty euros on Thursday morning and evening with "
    "le chien la maison rouge bleu vert voiture coûte trente élève garçon déjà naïve façade où "
    "der Hund das Haus rot blau grün Straße über Öl schön Mädchen "
    "el perro la casa roja azul verde año niño señor mañana "
    "I you we they is are was were don't it's you're I'm n't 's "
    "0 1 2 3 4 5 6 7 8 9 12 2024 3,50 7.45 100% , . ! ? ; : ' \" ( ) - / €"
).split()


def corpus(n: int = 400, seed: int = 0) -> list[str]:
    """Generated lines for training the tiny sentencepiece models."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14))) for _ in range(n)]


@cache
def train_spm(model_type: str, vocab_size: int = 240) -> bytes:
    """A sentencepiece model (nmt_nfkc normalization: the precompiled charsmap is exercised)."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )
    return buf.getvalue()


@contextlib.contextmanager
def _protobuf_for_transformers():
    """transformers converts a lone sentencepiece model through ``sentencepiece_model_pb2``;
    sentencepiece 0.2.3's copy needs protobuf >= 7, which the serving stack's pins exclude, so
    transformers' own copy for protobuf 4+ is used meanwhile (the same proto)."""
    import transformers.convert_slow_tokenizer as convert

    try:
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
        usable = True
    except Exception:  # protobuf's VersionError
        usable = False
    if usable:
        yield
        return
    from transformers.utils import sentencepiece_model_pb2_new

    original = convert.import_protobuf
    convert.import_protobuf = lambda *args, **kwargs: sentencepiece_model_pb2_new
    try:
        yield
    finally:
        convert.import_protobuf = original


def load_transformers_tokenizer(directory: Path, **kwargs):
    """``AutoTokenizer.from_pretrained(directory)``, as a user of the checkpoint would load it."""
    from transformers import AutoTokenizer

    with _protobuf_for_transformers():
        return AutoTokenizer.from_pretrained(str(directory), **kwargs)


def _edit_json(path: Path, drop: tuple[str, ...] = (), **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key in drop:
        data.pop(key, None)
    data.update(changes)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


def _special_tokens_map(languages: list[str], **named: str) -> dict:
    return {**named, "additional_special_tokens": languages}


def write_nllb(folder: Path, layout: str = "saved") -> Path:
    """An NLLB-200 tokenizer directory (layouts: saved, hub, spm)."""
    from transformers import NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / SPM_MODEL).write_bytes(train_spm("bpe"))
        with _protobuf_for_transformers():
            # extra_special_tokens: a lone model file lists no language (transformers would then add none).
            tok = NllbTokenizer.from_pretrained(tmp, extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES))
        tok.save_pretrained(str(folder))
    (folder / SPM_MODEL).write_bytes(train_spm("bpe"))
    if layout == "hub":
        _edit_json(folder / "tokenizer_config.json", drop=("extra_special_tokens", "backend"))
        named = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", sep_token="</s>", pad_token="<pad>",
                     cls_token="<s>", mask_token="<mask>")
        (folder / "special_tokens_map.json").write_text(
            json.dumps(_special_tokens_map(list(FAIRSEQ_LANGUAGE_CODES), **named)), encoding="utf-8")
    elif layout == "spm":
        (folder / "tokenizer.json").unlink()
    elif layout != "saved":
        raise ValueError(f"unknown NLLB layout {layout!r}")
    return folder


def write_m2m100(folder: Path, layout: str = "hub", *, seed: int = 0) -> Path:
    """An M2M100 tokenizer directory (layouts: hub, saved)."""
    from transformers import M2M100Tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    proto = train_spm("bpe")
    sp = spm.SentencePieceProcessor(model_proto=proto)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    random.Random(seed).shuffle(pieces)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in pieces[:-4]:  # fairseq's dictionary misses some pieces: they map to <unk>
        vocab[piece] = len(vocab)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (Path(tmp) / SPM_MODEL).write_bytes(proto)
        tok = M2M100Tokenizer(vocab_file=str(Path(tmp) / "vocab.json"), spm_file=str(Path(tmp) / SPM_MODEL))
        tok.save_pretrained(str(folder))
    if layout == "hub":
        _edit_json(folder / "tokenizer_config.json", drop=("added_tokens_decoder", "extra_special_tokens", "backend"))
        (folder / "special_tokens_map.json").write_text(json.dumps(_special_tokens_map(
            list(tok.lang_token_to_id), bos_token="<s>", eos_token="</s>", unk_token="<unk>", sep_token="</s>",
            pad_token="<pad>")), encoding="utf-8")
    elif layout != "saved":
        raise ValueError(f"unknown M2M100 layout {layout!r}")
    return folder


def write_mbart50(folder: Path, layout: str = "saved") -> Path:
    """An mBART-50 tokenizer directory (layouts: saved, hub)."""
    from transformers import MBart50Tokenizer
    from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / SPM_MODEL).write_bytes(train_spm("unigram"))
        with _protobuf_for_transformers():
            tok = MBart50Tokenizer.from_pretrained(tmp)
        tok.save_pretrained(str(folder))
    (folder / SPM_MODEL).write_bytes(train_spm("unigram"))
    if layout == "hub":
        (folder / "tokenizer.json").unlink()
        _edit_json(folder / "tokenizer_config.json", drop=("extra_special_tokens", "backend"),
                   additional_special_tokens=list(FAIRSEQ_LANGUAGE_CODES))
        (folder / "special_tokens_map.json").write_text(json.dumps(_special_tokens_map(
            list(FAIRSEQ_LANGUAGE_CODES), bos_token="<s>", eos_token="</s>", unk_token="<unk>", sep_token="</s>",
            pad_token="<pad>", cls_token="<s>", mask_token="<mask>")), encoding="utf-8")
    elif layout != "saved":
        raise ValueError(f"unknown mBART-50 layout {layout!r}")
    return folder


WRITERS = {"nllb": write_nllb, "m2m100": write_m2m100, "mbart50": write_mbart50}
LAYOUTS = {"nllb": ("saved", "hub", "spm"), "m2m100": ("hub", "saved"), "mbart50": ("saved", "hub")}


def copy_tokenizer(src: Path, dst: Path, names: list[str]) -> Path:
    """Only the named files of ``src`` into ``dst`` (what an export ships)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(src / name, dst / name)
    return dst
