"""The tokenizers of multilingual Hugging Face checkpoints: NLLB-200, M2M100 and mBART-50.

(One job in ~690 lines: the three families share the settings, the special ids and the
language lists, and differ only in how the files map text to ids, written here side by side.)

Torch-free (numpy-free too) on purpose: the Triton models and the export import it. Every id comes
from the checkpoint's own tokenizer files, read with the library the field uses (``tokenizers``
for ``tokenizer.json``, ``sentencepiece`` for ``.model`` files), and the text <-> id mapping is the
one ``transformers`` 5.24 gives for those files (``NllbTokenizer``, ``M2M100Tokenizer``,
``MBart50Tokenizer``); the tests compare both on every sentence.

API::

    tok = MultilingualTokenizer.from_directory(path, family=None)   # "nllb" | "m2m100" | "mbart50"
    tok.encode(text, "fra_Latn")    # source ids: [lang] X </s>  (NLLB legacy_behaviour: X </s> [lang])
    tok.encode_text(text)           # X alone: a target prefix, a label without its specials
    tok.decode(ids)                 # = transformers' decode(ids, skip_special_tokens=True)
    tok.language_id("fra_Latn"); tok.languages   # {model code: id}, in id order
    tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id, tok.vocab_size, tok.family
    tok.files()                     # the file names read: copy them and from_directory works on the copy

Language codes are the model's own tokens (``fra_Latn``, ``__fr__``, ``fr_XX``); ``nmtserve.languages``
resolves what users type (``fr``, ``fra``) to them. ``decode`` takes the decoder output as
nmtserve's search returns it (``[lang, ..., </s>]``) or as ``generate`` does (``[</s>, lang, ...,
</s>, <pad>...]``): a leading EOS is the decoder start and the text ends at the next EOS.

What each family's files hold and where the ids come from:

* ``tokenizer.json`` (NLLB, mBART-50; preferred when present): the whole pipeline, added tokens
  with their ids included; read as is by ``tokenizers.Tokenizer.from_file``.
* ``sentencepiece.bpe.model`` alone (NLLB, mBART-50; the hub's mBART-50 uploads): converted as
  transformers converts it: fairseq's id layout (``<s> <pad> </s> <unk>`` then the pieces after
  sentencepiece's first three), a BPE model with merges rebuilt from the piece order (NLLB) or a
  Unigram model with the piece scores followed by the language codes and ``<mask>`` (mBART-50),
  sentencepiece's precompiled normalizer plus a collapse of repeated spaces, Metaspace.
  The model file is read with a small protobuf reader below (``protobuf`` is not a dependency).
* ``vocab.json`` + ``sentencepiece.bpe.model`` (M2M100): sentencepiece pieces mapped through
  ``vocab.json`` (unknown pieces -> ``<unk>``); language tokens follow the vocabulary
  (``len(vocab.json) + i``), in the order of the ``language_codes`` set the config names.
* ``tokenizer_config.json`` / ``special_tokens_map.json`` / ``added_tokens.json``: the special
  tokens' names, the added tokens with their ids (``added_tokens_decoder``), the language codes
  (``additional_special_tokens`` / ``extra_special_tokens``), ``legacy_behaviour`` (NLLB),
  ``clean_up_tokenization_spaces``. ``config.json`` only when the family must be guessed.

One deliberate difference: an M2M100 directory written by transformers 5.x's ``save_pretrained``
does not list its language tokens as special, and transformers then decodes ``__fr__`` as text;
``decode`` here always drops language tokens (as transformers does for the hub's own files).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE, Unigram

from ..languages import LanguageError

FAMILIES = ("nllb", "m2m100", "mbart50")

TOKENIZER_JSON = "tokenizer.json"
SPM_MODEL = "sentencepiece.bpe.model"
VOCAB_JSON = "vocab.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
ADDED_TOKENS = "added_tokens.json"
MODEL_CONFIG = "config.json"

# tokenizer_class (tokenizer_config.json or config.json) -> family.
TOKENIZER_CLASSES = {
    "NllbTokenizer": "nllb", "NllbTokenizerFast": "nllb",
    "M2M100Tokenizer": "m2m100",
    "MBart50Tokenizer": "mbart50", "MBart50TokenizerFast": "mbart50",
}

# The shape of a language token in each family: which of the files' special tokens are languages.
LANGUAGE_TOKEN = {
    "nllb": re.compile(r"[a-z]{3}_[A-Z][a-z]{3}"),
    "m2m100": re.compile(r"__[A-Za-z0-9_-]+__"),
    "mbart50": re.compile(r"[a-z]{2}_[A-Z]{2}"),
}

# M2M100Tokenizer's language sets (transformers 5.24, tokenization_m2m_100.py), named by the
# ``language_codes`` key of tokenizer_config.json. Used only when the files list no language
# token (transformers 5.x's own save_pretrained writes none); the ids are len(vocab.json) + index.
M2M100_LANGUAGE_SETS = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha "
        "he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my "
        "ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi "
        "wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}

# transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order (the order new special tokens get ids in).
NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class _Added:
    """An added token as transformers/tokenizers describe it (``AddedToken``'s fields)."""

    content: str
    special: bool = True
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False

    @classmethod
    def parse(cls, value: Any, *, special: bool = True) -> _Added:
        if isinstance(value, str):
            return cls(value, special=special, normalized=not special)
        fields = {k: value[k] for k in ("special", "normalized", "lstrip", "rstrip", "single_word") if k in value}
        return cls(str(value["content"]), **fields)

    def to_tokenizers(self) -> AddedToken:
        return AddedToken(self.content, single_word=self.single_word, lstrip=self.lstrip, rstrip=self.rstrip,
                          normalized=self.normalized, special=self.special)


# The class defaults of each family's transformers tokenizer, overridden by the files.
DEFAULT_SPECIALS: dict[str, dict[str, _Added]] = {
    "nllb": {"bos_token": _Added("<s>"), "eos_token": _Added("</s>"), "unk_token": _Added("<unk>"),
             "sep_token": _Added("</s>"), "pad_token": _Added("<pad>"), "cls_token": _Added("<s>"),
             "mask_token": _Added("<mask>", normalized=True, lstrip=True)},
    "m2m100": {"bos_token": _Added("<s>"), "eos_token": _Added("</s>"), "unk_token": _Added("<unk>"),
               "sep_token": _Added("</s>"), "pad_token": _Added("<pad>")},
    "mbart50": {"eos_token": _Added("</s>"), "unk_token": _Added("<unk>"), "sep_token": _Added("</s>"),
                "pad_token": _Added("<pad>"), "cls_token": _Added("<s>"),
                "mask_token": _Added("<mask>", lstrip=True)},
}


class TokenizerFilesError(ValueError):
    """A directory whose tokenizer files are missing, unreadable or inconsistent; names the file."""


# ---- the files ------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerFilesError(f"{path}: cannot be read as JSON ({exc})") from None


@dataclass
class _Settings:
    """What tokenizer_config.json, special_tokens_map.json and added_tokens.json say, merged as
    ``PreTrainedTokenizerBase.from_pretrained`` merges them."""

    specials: dict[str, _Added]     # named special tokens (bos_token, ...) present for this family
    extras: list[_Added]            # extra (additional) special tokens, in the files' order
    added: dict[int, _Added]        # added tokens with their ids
    options: dict[str, Any]         # the rest of tokenizer_config.json
    files: list[str]


def _read_settings(directory: Path, family: str) -> _Settings:
    files: list[str] = []
    config: dict[str, Any] = {}
    if (directory / TOKENIZER_CONFIG).is_file():
        config = _read_json(directory / TOKENIZER_CONFIG)
        files.append(TOKENIZER_CONFIG)
    specials = dict(DEFAULT_SPECIALS[family])
    for key in NAMED_SPECIALS:
        if config.get(key) is not None:
            specials[key] = _named(family, key, config[key])
    extra_list = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if isinstance(extra_list, Mapping):  # named model-specific tokens (no language among them)
        extra_list = list(extra_list.values())
    added: dict[int, _Added] = {}
    if "added_tokens_decoder" in config:
        added = {int(i): _Added.parse(t) for i, t in config["added_tokens_decoder"].items()}
        by_content = {t.content: t for t in added.values()}
        specials = {k: by_content.get(v.content, v) for k, v in specials.items()}
    else:
        # Legacy files (transformers 4.x uploads): special_tokens_map.json overrides, added_tokens.json ids.
        if (directory / SPECIAL_TOKENS_MAP).is_file():
            files.append(SPECIAL_TOKENS_MAP)
            for key, value in _read_json(directory / SPECIAL_TOKENS_MAP).items():
                if key in ("additional_special_tokens", "extra_special_tokens") and isinstance(value, list):
                    known = {_Added.parse(t).content for t in extra_list}
                    extra_list = [*extra_list, *(t for t in value if _Added.parse(t).content not in known)]
                elif key in NAMED_SPECIALS and value is not None:
                    specials[key] = _named(family, key, value)
        if (directory / ADDED_TOKENS).is_file():
            files.append(ADDED_TOKENS)
            names = {t.content for t in specials.values()} | {_Added.parse(t).content for t in extra_list}
            for content, i in _read_json(directory / ADDED_TOKENS).items():
                added[int(i)] = _Added.parse(content, special=content in names)
    extras = [_Added.parse(t) for t in extra_list]
    specials = {k: specials[k] for k in NAMED_SPECIALS if k in specials}
    return _Settings(specials, extras, added, config, files)


def _named(family: str, key: str, value: Any) -> _Added:
    """A named special token from the files: a bare string gets the flags the family's class gives
    it (``<mask>`` strips the spaces before it), a serialized AddedToken keeps its own."""
    default = DEFAULT_SPECIALS[family].get(key)
    if isinstance(value, str) and default is not None:
        return replace(default, content=value)
    return _Added.parse(value)


def _guess_family(directory: Path) -> tuple[str, list[str]]:
    """The family from tokenizer_class (tokenizer_config.json, then config.json) or the files."""
    read: list[str] = []
    for name in (TOKENIZER_CONFIG, MODEL_CONFIG):
        path = directory / name
        if not path.is_file():
            continue
        cfg = _read_json(path)
        if name == MODEL_CONFIG:
            read.append(name)
        cls = cfg.get("tokenizer_class")
        if cls in TOKENIZER_CLASSES:
            return TOKENIZER_CLASSES[cls], read
        if name == MODEL_CONFIG and cfg.get("model_type") == "m2m_100":
            return ("m2m100" if (directory / VOCAB_JSON).is_file() else "nllb"), read
        if cls:
            raise TokenizerFilesError(f"{path}: tokenizer_class {cls!r} is not one of "
                                      f"{', '.join(sorted(TOKENIZER_CLASSES))}")
    raise TokenizerFilesError(
        f"{directory}: cannot tell the tokenizer family: neither {TOKENIZER_CONFIG} nor {MODEL_CONFIG} names a "
        f"tokenizer_class of {', '.join(sorted(TOKENIZER_CLASSES))} (pass family= one of {', '.join(FAMILIES)})")


# ---- sentencepiece model files, without protobuf ----------------------------------------------------


@dataclass(frozen=True)
class _SpmProto:
    pieces: list[tuple[str, float, int]]   # (piece, score, type): 1 normal, 2 unknown, 3 control, 4 user, ...
    precompiled_charsmap: bytes | None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of one protobuf message: ints, or bytes for the other wire types."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        wire = key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield key >> 3, value


def _read_spm(path: Path) -> _SpmProto:
    """The pieces and the normalizer of a sentencepiece ModelProto (sentencepiece_model.proto:
    ModelProto.pieces = 1 {piece = 1, score = 2, type = 3}, normalizer_spec = 3 {precompiled_charsmap = 2})."""
    try:
        buf = path.read_bytes()
        pieces: list[tuple[str, float, int]] = []
        charsmap = None
        for field, value in _fields(buf):
            if field == 1:
                piece, score, kind = "", 0.0, 1
                for f, v in _fields(value):
                    if f == 1:
                        piece = v.decode("utf-8")
                    elif f == 2:
                        score = struct.unpack("<f", v)[0]
                    elif f == 3:
                        kind = v
                pieces.append((piece, score, kind))
            elif field == 3:
                for f, v in _fields(value):
                    if f == 2:
                        charsmap = bytes(v) or None
    except (OSError, ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise TokenizerFilesError(f"{path}: not a sentencepiece model ({exc})") from None
    if len(pieces) < 4:
        raise TokenizerFilesError(f"{path}: not a sentencepiece model ({len(pieces)} pieces)")
    return _SpmProto(pieces, charsmap)


def _generate_merges(vocab: Mapping[str, int]) -> list[tuple[str, str]]:
    """BPE merges from a piece -> rank vocabulary, as transformers' ``generate_merges`` rebuilds
    them for a sentencepiece BPE model: every split of a piece into two pieces, by the merged
    piece's rank, then the left and right lengths."""
    merges = []
    for piece, rank in vocab.items():
        local = [(piece[:i], piece[i:], rank) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])))
    return [(left, right) for left, right, _ in merges]


def _metaspace(tokenizer: Tokenizer, charsmap: bytes | None, *, always_collapse: bool) -> None:
    steps: list[normalizers.Normalizer] = [normalizers.Precompiled(charsmap)] if charsmap else []
    if charsmap or always_collapse:
        steps.append(normalizers.Replace(Regex(r" {2,}"), " "))
    if steps:
        tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)


def _tokenizer_from_spm(path: Path, family: str, settings: _Settings, languages: list[str]) -> Tokenizer:
    """The ``tokenizers`` pipeline transformers builds from a lone sentencepiece model
    (``TokenizersBackend.convert_to_native_format`` + the family's ``__init__``), added tokens included."""
    proto = _read_spm(path)
    names = {k: v.content for k, v in settings.specials.items()}
    if family == "nllb":
        # NllbConverter.convert_from_spm: fairseq's four first, then the pieces in sentencepiece's order.
        ranks = {piece: i for i, (piece, _, _) in enumerate(proto.pieces)}
        vocab = {names["bos_token"]: 0, names["pad_token"]: 1, names["eos_token"]: 2, names["unk_token"]: 3}
        for piece in ranks:
            vocab.setdefault(piece, len(vocab))
        tokenizer = Tokenizer(BPE(vocab=vocab, merges=_generate_merges(ranks), dropout=None,
                                  unk_token=names["unk_token"], fuse_unk=True, byte_fallback=False))
        _metaspace(tokenizer, proto.precompiled_charsmap, always_collapse=False)
        # TokenizersBackend.__init__, then PreTrainedTokenizerBase._post_init re-adds the specials.
        tokenizer.add_tokens([t.to_tokenizers() for t in _tokens_to_add(settings)])
        again = [*settings.specials.values(), *settings.extras]
        tokenizer.add_special_tokens([t.to_tokenizers() for t in again])
        return tokenizer
    # MBart50Converter.convert_from_spm + MBart50Tokenizer.__init__: a Unigram model whose vocabulary
    # ends with the language codes and <mask> (mBART-50 overrides _post_init: no second pass).
    scores = [(names.get("cls_token", "<s>"), 0.0), (names["pad_token"], 0.0), (names["eos_token"], 0.0),
              (names["unk_token"], 0.0)]
    scores += [(piece, score) for piece, score, _ in proto.pieces[3:]]
    scores += [(code, 0.0) for code in languages]
    scores.append((names.get("mask_token", "<mask>"), 0.0))
    tokenizer = Tokenizer(Unigram(scores, unk_id=3, byte_fallback=False))
    _metaspace(tokenizer, proto.precompiled_charsmap, always_collapse=True)
    tokenizer.add_tokens([t.to_tokenizers() for t in _tokens_to_add(settings)])
    return tokenizer


def _tokens_to_add(settings: _Settings) -> list[_Added]:
    """The added tokens in the order ``TokenizersBackend.__init__`` adds them: the files' added
    tokens by id, then the named special tokens, then the extra ones (new ones get the next ids)."""
    out = [settings.added[i] for i in sorted(settings.added)]
    seen = {t.content for t in out}
    named = [replace(t, special=True) for t in settings.specials.values()]  # named tokens are special
    for token in [*named, *settings.extras]:
        if token.content not in seen:
            seen.add(token.content)
            out.append(token)
    return out


# ---- the two backends ----------------------------------------------------------------------------------


class _Backend(Protocol):
    def ids(self, text: str) -> list[int]: ...
    def text(self, ids: Sequence[int]) -> str: ...
    def token_id(self, token: str) -> int | None: ...
    def piece(self, i: int) -> str | None: ...
    @property
    def max_id(self) -> int: ...


def _clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization`` (``clean_up_tokenization_spaces: true``)."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                     (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(old, new)
    return text


class _TokenizersBackend:
    """A ``tokenizers.Tokenizer`` used as ``TokenizersBackend`` uses it (NLLB, mBART-50)."""

    def __init__(self, tokenizer: Tokenizer, options: Mapping[str, Any]):
        self.tokenizer = tokenizer
        tokenizer.encode_special_tokens = bool(options.get("split_special_tokens", False))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        # _decode skips the clean-up for BPE models unless explicitly forced.
        self.clean_up = bool(options.get("clean_up_tokenization_spaces", False)) and (
            type(tokenizer.model).__name__ != "BPE"
            or bool(options.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output")))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self._max_id = max(vocab.values())
        self._special = frozenset(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special)

    def ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def text(self, ids: Sequence[int]) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        return _clean_up_tokenization(text) if self.clean_up else text

    def token_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def piece(self, i: int) -> str | None:
        """The vocabulary entry of ``i`` ("▁maison"); None for an added special token."""
        return None if i in self._special else self.tokenizer.id_to_token(i)

    @property
    def max_id(self) -> int:
        return self._max_id


class _M2M100Backend:
    """``M2M100Tokenizer`` (a python tokenizer): sentencepiece pieces through vocab.json, the text
    split on the added tokens first (``PreTrainedTokenizer.tokenize``)."""

    def __init__(self, sp: spm.SentencePieceProcessor, vocab: Mapping[str, int], settings: _Settings,
                 language_set_ids: Mapping[str, int]):
        self.sp = sp
        self.encoder = dict(vocab)
        self.decoder = {i: p for p, i in self.encoder.items()}
        self.language_set_ids = dict(language_set_ids)
        self.unk = settings.specials["unk_token"].content
        self.split_special_tokens = bool(settings.options.get("split_special_tokens", False))
        self.clean_up = bool(settings.options.get("clean_up_tokenization_spaces", False))
        # PreTrainedTokenizer.__init__: the files' added tokens, then every special token not yet
        # among them at the next free id (an id of vocab.json when it is a piece there).
        self.added: dict[int, _Added] = dict(settings.added)
        self.special_tokens = list(dict.fromkeys(t.content for t in [*settings.specials.values(), *settings.extras]))
        added_ids = {t.content: i for i, t in self.added.items()}
        current = {(self.added[i].content if i in self.added else self.decoder.get(i, self.unk)): i
                   for i in range(len(self.encoder))}
        current.update(added_ids)
        next_id = len(current)
        for content in self.special_tokens:
            if content in added_ids:
                continue
            if content not in current:
                current[content], next_id = next_id, next_id + 1
            self.added[current[content]] = _Added(content)
            added_ids[content] = current[content]
        self.added_ids = added_ids
        self.special_ids = {self._id(t) for t in self.special_tokens}
        self._split = (re.compile("|".join(re.escape(t) for t in sorted(added_ids, key=len, reverse=True)))
                       if added_ids else None)
        self._max_id = max([*self.encoder.values(), *added_ids.values(), *self.language_set_ids.values()])

    def _id(self, token: str) -> int:
        if token in self.added_ids:
            return self.added_ids[token]
        if token in self.language_set_ids:
            return self.language_set_ids[token]
        return self.encoder.get(token, self.encoder[self.unk])

    def _tokens(self, text: str) -> list[str]:
        if self.split_special_tokens or self._split is None:
            return self.sp.encode(text, out_type=str)
        chunks: list[str] = []
        pos = 0
        for m in self._split.finditer(text):
            chunks += [text[pos:m.start()], m.group()]
            pos = m.end()
        chunks.append(text[pos:])
        chunks = [c for c in chunks if c]  # Trie.cut_text drops empty cuts
        for i, chunk in enumerate(chunks):  # AddedToken's lstrip / rstrip / single_word, as tokenize()
            if chunk not in self.added_ids:
                continue
            token = self.added[self.added_ids[chunk]]
            left = chunks[i - 1] if i > 0 else None
            right = chunks[i + 1] if i < len(chunks) - 1 else None
            if token.rstrip and right:
                chunks[i + 1] = right.lstrip()
            if token.lstrip and left:
                chunks[i - 1] = left.rstrip()
            if token.single_word:
                if left and left[-1] != " ":
                    chunks[i - 1] += chunk
                    chunks[i] = ""
                elif right and right[0] != " ":
                    chunks[i + 1] = chunk + chunks[i + 1]
                    chunks[i] = ""
        specials = set(self.special_tokens)
        out: list[str] = []
        for chunk in chunks:
            if not chunk:
                continue
            if chunk in self.added_ids or chunk in specials:
                out.append(chunk)
            else:
                out.extend(self.sp.encode(chunk, out_type=str))
        return out

    def ids(self, text: str) -> list[int]:
        return [self._id(t) for t in self._tokens(text)]

    def text(self, ids: Sequence[int]) -> str:
        # PreTrainedTokenizer._decode -> M2M100Tokenizer.convert_tokens_to_string
        id_to_language = {i: t for t, i in self.language_set_ids.items()}
        tokens = []
        for i in ids:
            if i in self.special_ids:
                continue
            if i in self.added:
                tokens.append(self.added[i].content)
            else:
                tokens.append(id_to_language.get(i) or self.decoder.get(i, self.unk))
        specials = set(self.special_tokens)
        out, pieces = "", list[str]()
        for token in tokens:
            if token in specials:
                out += self.sp.decode(pieces) + token
                pieces = []
            else:
                pieces.append(token)
        out = (out + self.sp.decode(pieces)).strip()
        return _clean_up_tokenization(out) if self.clean_up else out

    def token_id(self, token: str) -> int | None:
        if token in self.added_ids or token in self.language_set_ids or token in self.encoder:
            return self._id(token)
        return None

    def piece(self, i: int) -> str | None:
        """The sentencepiece piece of ``i``; None for an added or special token."""
        return None if i in self.added or i in self.special_ids else self.decoder.get(i)

    @property
    def max_id(self) -> int:
        return self._max_id


# ---- the tokenizer -----------------------------------------------------------------------------------


class MultilingualTokenizer:
    """Text <-> ids of an NLLB-200, M2M100 or mBART-50 checkpoint (see the module docstring)."""

    def __init__(self, family: str, backend: _Backend, languages: Mapping[str, int], specials: Mapping[str, int],
                 files: Iterable[str], *, legacy_layout: bool = False):
        self.family = family
        self._backend = backend
        self.languages = dict(sorted(languages.items(), key=lambda kv: kv[1]))
        self._language_ids = frozenset(self.languages.values())
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (
            specials["pad"], specials["bos"], specials["eos"], specials["unk"])
        self.vocab_size = max([backend.max_id, *self._language_ids]) + 1
        # Ids with no piece of text (``source_pieces``): the specials and the language tokens.
        self._no_piece = frozenset({self.pad_id, self.bos_id, self.eos_id, self.unk_id, *self._language_ids})
        self.legacy_layout = legacy_layout
        self._files = list(dict.fromkeys(files))

    @classmethod
    def from_directory(cls, path: str | Path, family: str | None = None) -> MultilingualTokenizer:
        """Read a checkpoint (or exported) directory; ``family`` is guessed from tokenizer_class
        (tokenizer_config.json, else config.json) when None."""
        directory = Path(path)
        if not directory.is_dir():
            raise TokenizerFilesError(f"{directory}: not a directory")
        read: list[str] = []
        if family is None:
            family, read = _guess_family(directory)
        elif family not in FAMILIES:
            raise TokenizerFilesError(f"unknown tokenizer family {family!r}: one of {', '.join(FAMILIES)}")
        settings = _read_settings(directory, family)
        read = [*settings.files, *read]
        if family == "m2m100":
            return cls._m2m100(directory, settings, read)
        return cls._fast(directory, family, settings, read)

    @classmethod
    def _fast(cls, directory: Path, family: str, settings: _Settings, read: list[str]) -> MultilingualTokenizer:
        pattern = LANGUAGE_TOKEN[family]
        if (directory / TOKENIZER_JSON).is_file():
            try:
                tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_JSON))
            except Exception as exc:  # the Rust parser raises plain Exceptions
                raise TokenizerFilesError(f"{directory / TOKENIZER_JSON}: cannot be read ({exc})") from None
            languages = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()
                         if pattern.fullmatch(t.content)}
            files = [TOKENIZER_JSON, *read]
        elif (directory / SPM_MODEL).is_file():
            listed = [settings.added[i].content for i in sorted(settings.added)] + [t.content for t in settings.extras]
            codes = list(dict.fromkeys(c for c in listed if pattern.fullmatch(c)))
            if not codes:
                raise TokenizerFilesError(
                    f"{directory}: no language codes: {SPM_MODEL} holds none, and neither {TOKENIZER_CONFIG} "
                    f"nor {SPECIAL_TOKENS_MAP} lists any (added_tokens_decoder / additional_special_tokens)")
            tokenizer = _tokenizer_from_spm(directory / SPM_MODEL, family, settings, codes)
            wrong = [f"{t.content!r} has id {i} (gets {tokenizer.token_to_id(t.content)})"
                     for i, t in sorted(settings.added.items()) if tokenizer.token_to_id(t.content) != i]
            if wrong:
                source = TOKENIZER_CONFIG if "added_tokens_decoder" in settings.options else ADDED_TOKENS
                raise TokenizerFilesError(
                    f"{directory / source}: {len(wrong)} added tokens' ids differ from those {SPM_MODEL} and the "
                    f"other added tokens give them: {'; '.join(wrong[:5])}")
            languages = {c: i for c in codes if (i := tokenizer.token_to_id(c)) is not None}
            files = [SPM_MODEL, *read]
        else:
            raise TokenizerFilesError(f"{directory}: no tokenizer: neither {TOKENIZER_JSON} nor {SPM_MODEL}")
        if not languages:
            raise TokenizerFilesError(f"{directory / TOKENIZER_JSON}: no language code among its added tokens")
        backend = _TokenizersBackend(tokenizer, settings.options)
        legacy = family == "nllb" and bool(settings.options.get("legacy_behaviour", False))
        return cls(family, backend, languages, _special_ids(directory, settings, backend), files, legacy_layout=legacy)

    @classmethod
    def _m2m100(cls, directory: Path, settings: _Settings, read: list[str]) -> MultilingualTokenizer:
        missing = [name for name in (VOCAB_JSON, SPM_MODEL) if not (directory / name).is_file()]
        if missing:
            raise TokenizerFilesError(f"{directory}: an M2M100 tokenizer needs {' and '.join(missing)}")
        vocab = _read_json(directory / VOCAB_JSON)
        if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
            raise TokenizerFilesError(f"{directory / VOCAB_JSON}: not a piece -> id mapping")
        try:
            sp = spm.SentencePieceProcessor(model_file=str(directory / SPM_MODEL))
        except (OSError, RuntimeError) as exc:
            raise TokenizerFilesError(f"{directory / SPM_MODEL}: not a sentencepiece model ({exc})") from None
        set_name = settings.options.get("language_codes", "m2m100")
        if set_name not in M2M100_LANGUAGE_SETS:
            raise TokenizerFilesError(f"{directory / TOKENIZER_CONFIG}: language_codes {set_name!r} is not one of "
                                      f"{', '.join(M2M100_LANGUAGE_SETS)}")
        language_set_ids = {f"__{c}__": len(vocab) + i for i, c in enumerate(M2M100_LANGUAGE_SETS[set_name])}
        backend = _M2M100Backend(sp, vocab, settings, language_set_ids)
        pattern = LANGUAGE_TOKEN["m2m100"]
        listed = [t for t in backend.added_ids if pattern.fullmatch(t)]
        languages = {t: backend.added_ids[t] for t in listed} or language_set_ids
        # M2M100Tokenizer prefixes the source with the set's id and splits the text on the added
        # tokens' ids: files where the two differ are inconsistent.
        wrong = [f"{t} ({i}, not {language_set_ids[t]})" for t, i in languages.items()
                 if t in language_set_ids and language_set_ids[t] != i]
        if wrong:
            raise TokenizerFilesError(
                f"{directory}: the language tokens' ids in the files differ from len({VOCAB_JSON}) + their index in "
                f"the {set_name!r} language set: {', '.join(wrong[:5])}")
        return cls("m2m100", backend, languages, _special_ids(directory, settings, backend),
                   [VOCAB_JSON, SPM_MODEL, *read])

    # ---- use -------------------------------------------------------------------------------------

    def language_id(self, code: str) -> int:
        """The id of a model language code (``fra_Latn``, ``__fr__``, ``fr_XX``); see ``nmtserve.languages.resolve``."""
        try:
            return self.languages[code]
        except KeyError:
            raise LanguageError(f"{code!r} is not a language code of this {self.family} tokenizer "
                                f"(e.g. {', '.join(list(self.languages)[:3])})") from None

    def encode_text(self, text: str) -> list[int]:
        """The text's ids alone, without a language token or EOS."""
        return self._backend.ids(text)

    def encode(self, text: str, source_lang: str) -> list[int]:
        """Source ids as transformers lays them out: ``[lang] X </s>`` (NLLB with
        ``legacy_behaviour: true``: ``X </s> [lang]``). ``source_lang`` is a model code."""
        lang = self.language_id(source_lang)
        ids = self._backend.ids(text)
        return [*ids, self.eos_id, lang] if self.legacy_layout else [lang, *ids, self.eos_id]

    def source_pieces(self, ids: Iterable[int]) -> list[str | None]:
        """Each id's piece, None for the special and language tokens (``nmtserve.alignment``)."""
        return [None if int(i) in self._no_piece else self._backend.piece(int(i)) for i in ids]

    target_pieces = source_pieces  # one vocabulary

    def decode(self, ids: Iterable[int]) -> str:
        """transformers' ``decode(ids, skip_special_tokens=True)``: special tokens (decoder start,
        EOS, padding, <unk>) and language tokens are dropped wherever they are."""
        return self._backend.text([i for i in map(int, ids) if i not in self._language_ids])

    def files(self) -> list[str]:
        """The names of the files read, all directly in the directory."""
        return list(self._files)

    def __repr__(self) -> str:
        return (f"MultilingualTokenizer({self.family}, {len(self.languages)} languages, vocab_size={self.vocab_size}, "
                f"files={self._files})")


def _special_ids(directory: Path, settings: _Settings, backend: _Backend) -> dict[str, int]:
    names = {k.removesuffix("_token"): v.content for k, v in settings.specials.items()}
    names.setdefault("bos", names.get("cls", "<s>"))
    out, missing = {}, []
    for key in ("pad", "bos", "eos", "unk"):
        i = backend.token_id(names[key]) if key in names else None
        if i is None:
            missing.append(f"{key} {names.get(key)!r}")
        else:
            out[key] = i
    if missing:
        raise TokenizerFilesError(f"{directory}: special tokens missing from the vocabulary: {', '.join(missing)}")
    return out
