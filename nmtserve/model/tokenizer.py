"""Sentencepiece tokenization shared by training, reference decoding and the Triton models.

Torch-free on purpose: the serving processes import it. Two layouts are supported:

* nmtserve's own checkpoints: the sentencepiece ids are the model's ids (pad 0, bos 1, eos 2,
  unk 3, fixed when the sentencepiece model is trained);
* vocabulary-mapped checkpoints (Marian / opus-mt, and the toolkits' imports): pieces come from
  sentencepiece and are mapped to ids through a ``vocab.json`` (and a ``target_vocab.json`` where
  the target side has its own); pieces not in it map to ``unk``. A toolkit may also start or end
  a source sentence otherwise than with a lone EOS (``source_prefix`` / ``source_suffix``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import sentencepiece as spm

if TYPE_CHECKING:
    from .hf_tokenizer import MultilingualTokenizer

# Marian's tokenizer keeps these literal special tokens whole when they appear in the text.
_MARIAN_SPECIALS = re.compile("(</s>|<unk>|<pad>)")


def _vocab_pieces(sp: spm.SentencePieceProcessor, text: str) -> list[str]:
    """Pieces as MarianTokenizer makes them: specials kept whole, a leading >>xx<< code kept whole."""
    pieces: list[str] = []
    for segment in _MARIAN_SPECIALS.split(text):
        if not segment:
            continue
        if _MARIAN_SPECIALS.fullmatch(segment):
            pieces.append(segment)
            continue
        if segment.startswith(">>") and "<<" in segment:
            end = segment.index("<<") + 2
            pieces.append(segment[:end])
            segment = segment[end:]
        pieces.extend(sp.encode(segment, out_type=str))
    return pieces


class SpecialIds(Protocol):
    """Anything with the four special ids (a TransformerConfig, a frozen ModelSpec): read-only."""

    @property
    def pad_id(self) -> int: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    @property
    def unk_id(self) -> int: ...


class Tokenizer:
    """Text <-> ids for one model. ``encode`` appends EOS; ``decode`` drops special tokens."""

    def __init__(
        self,
        source: spm.SentencePieceProcessor,
        target: spm.SentencePieceProcessor,
        special: SpecialIds,
        vocab: Mapping[str, int] | None = None,
        *,
        target_vocab: Mapping[str, int] | None = None,
        source_prefix: Sequence[int] = (),
        source_suffix: Sequence[int] | None = None,
        keep_specials: bool = True,
    ):
        """``vocab``: piece -> id of the source side (and of the target side unless
        ``target_vocab`` is given; both or neither). ``source_prefix`` / ``source_suffix``: the ids
        a source sentence starts / ends with (default: none / EOS). ``keep_specials``: Marian's
        literal ``</s>``, ``<unk>``, ``<pad>`` and a leading ``>>xx<<`` in the text are kept whole."""
        self.source = source
        self.target = target
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (
            special.pad_id, special.bos_id, special.eos_id, special.unk_id,
        )
        if target_vocab is not None and vocab is None:
            raise ValueError("a target vocabulary needs a source vocabulary")
        self.vocab = dict(vocab) if vocab is not None else None
        self.target_vocab = dict(target_vocab) if target_vocab is not None else self.vocab
        self.source_id_to_piece = {i: p for p, i in self.vocab.items()} if self.vocab is not None else None
        self.id_to_piece = {i: p for p, i in self.target_vocab.items()} if self.target_vocab is not None else None
        self.special_ids = {self.pad_id, self.bos_id, self.eos_id}
        self.source_prefix = tuple(int(i) for i in source_prefix)
        self.source_suffix = (self.eos_id,) if source_suffix is None else tuple(int(i) for i in source_suffix)
        self.keep_specials = keep_specials

    def _pieces_of(self, sp: spm.SentencePieceProcessor, text: str) -> list[str]:
        return _vocab_pieces(sp, text) if self.keep_specials else sp.encode(text, out_type=str)

    @classmethod
    def from_files(
        cls,
        source_model: str | Path,
        target_model: str | Path | None,
        special: SpecialIds,
        vocab: Mapping[str, int] | None = None,
        **options,
    ) -> Tokenizer:
        """``options``: the keywords of ``Tokenizer`` after ``vocab``."""
        source = spm.SentencePieceProcessor(model_file=str(source_model))
        target = spm.SentencePieceProcessor(model_file=str(target_model)) if target_model else source
        return cls(source, target, special, vocab, **options)

    def encode(self, text: str) -> list[int]:
        """Source text -> ids, with the model's prefix (none by default) and suffix (EOS by default)."""
        if self.vocab is None:
            ids = self.source.encode(text, out_type=int)
        else:
            ids = [self.vocab.get(p, self.unk_id) for p in self._pieces_of(self.source, text)]
        return [*self.source_prefix, *ids, *self.source_suffix]

    def encode_target(self, text: str) -> list[int]:
        """Target text -> ids ending with EOS (training labels)."""
        if self.target_vocab is None:
            ids = self.target.encode(text, out_type=int)
        else:
            ids = [self.target_vocab.get(p, self.unk_id) for p in self._pieces_of(self.target, text)]
        return [*ids, self.eos_id]

    def source_pieces(self, ids: Sequence[int]) -> list[str | None]:
        """Each source id's piece; None for the special tokens (what ``alignment.piece_words`` reads)."""
        return self._pieces(ids, self.source, self.source_id_to_piece)

    def target_pieces(self, ids: Sequence[int]) -> list[str | None]:
        """Each generated id's piece; None for the special tokens and unknowns ``decode`` drops."""
        return self._pieces(ids, self.target, self.id_to_piece)

    def _pieces(self, ids: Sequence[int], sp: spm.SentencePieceProcessor,
                id_to_piece: Mapping[int, str] | None) -> list[str | None]:
        out: list[str | None] = []
        for i in ids:
            i = int(i)
            if i in self.special_ids or (id_to_piece is not None and i == self.unk_id):
                out.append(None)
            elif id_to_piece is not None:
                out.append(id_to_piece.get(i))
            else:
                out.append(sp.id_to_piece(i) if 0 <= i < sp.get_piece_size() else None)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Target ids -> text; stops at EOS, drops pad/bos."""
        kept = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in self.special_ids:
                kept.append(i)
        if self.id_to_piece is None:
            return self.target.decode(kept)
        # As MarianTokenizer.decode(skip_special_tokens=True): unknowns dropped, result stripped.
        pieces = [self.id_to_piece.get(i, "") for i in kept if i != self.unk_id]
        return self.target.decode_pieces(pieces).replace("\u2581", " ").strip()


def load_tokenizer(folder: Path, spec) -> Tokenizer | MultilingualTokenizer:
    """The tokenizer an export shipped in ``folder``, as its ``spec.tokenizer`` (a ModelSpec's)
    names it: nmtserve's ``Tokenizer`` (sentencepiece models, Marian's vocab.json), or a
    multilingual checkpoint's own tokenizer files (``MultilingualTokenizer``)."""
    files = spec.tokenizer or {"source": "source.spm"}
    if files.get("kind") == "multilingual":
        from .hf_tokenizer import MultilingualTokenizer

        return MultilingualTokenizer.from_directory(folder / files["folder"], family=files["family"])
    vocab = target_vocab = None
    if files.get("vocab"):
        vocab = json.loads((folder / files["vocab"]).read_text(encoding="utf-8"))
    if files.get("target_vocab"):
        target_vocab = json.loads((folder / files["target_vocab"]).read_text(encoding="utf-8"))
    target = folder / files["target"] if files.get("target") else None
    return Tokenizer.from_files(folder / files["source"], target, spec, vocab, target_vocab=target_vocab,
                                source_prefix=files.get("source_prefix", ()), source_suffix=files.get("source_suffix"),
                                keep_specials=files.get("keep_specials", True))


def tokenizer_files(tok: Tokenizer) -> dict:
    """What ``load_tokenizer`` needs besides the files themselves to rebuild ``tok``: the source's
    prefix and suffix ids and the Marian specials rule, where they differ from the defaults."""
    out: dict = {}
    if tok.source_prefix:
        out["source_prefix"] = list(tok.source_prefix)
    if tok.source_suffix != (tok.eos_id,):
        out["source_suffix"] = list(tok.source_suffix)
    if not tok.keep_specials:
        out["keep_specials"] = False
    return out
