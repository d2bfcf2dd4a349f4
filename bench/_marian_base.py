"""The ``base`` size of bench/compare.py: an opus-mt-base-shaped Marian with random weights.

Built here, no downloads (as tests/test_marian.py builds its Marian checkpoints):

* tokenizer: one sentencepiece model trained on generated English/French text
  (``nmtserve.demo.corpus.generate_pairs``), plus filler pieces ``▁w00000``, ``▁w00001`` ...
  added as user-defined symbols so that the vocabulary has opus-mt's 58,101 entries and every
  id decodes to a piece (a random model mostly emits fillers: "w03121 w40007 ...");
  ``vocab.json`` is laid out as opus-mt's: ``</s>`` 0, ``<unk>`` 1, pieces, ``<pad>`` 58100;
* model: ``MarianMTModel`` with the opus-mt-en-de shape (d_model 512, 6+6 layers, 8 heads,
  FFN 2048, swish, scaled embeddings, static sinusoidal positions, shared and tied embeddings),
  seeded random weights, written with ``save_pretrained``. As in the tests, the decoder's
  cross-attention and last LayerNorm are scaled up so that outputs depend on the source and
  the output distributions are peaked (otherwise every sentence decodes alike and near-ties
  decide the beams).

The same directory feeds every engine: ``nmtserve export`` (the Marian importer),
``transformers`` (``from_pretrained``) and CTranslate2 (its own ``TransformersConverter``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

VOCAB_SIZE = 58101
PAD_ID = VOCAB_SIZE - 1
# Helsinki-NLP/opus-mt-en-de's shape (tests/test_marian.py LEGACY_OPUS_MT_CONFIG).
BASE_CONFIG = {
    "d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
    "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048,
    "activation_function": "swish", "scale_embedding": True, "max_position_embeddings": 512,
    "vocab_size": VOCAB_SIZE, "decoder_vocab_size": VOCAB_SIZE, "pad_token_id": PAD_ID,
    "decoder_start_token_id": PAD_ID, "eos_token_id": 0, "forced_eos_token_id": 0,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}

# Bergamot's and Firefox Translations' "tiny" students (d_model 256, 6 encoder and 2 decoder
# layers, FFN 1536, 8 heads, a 32k joint vocabulary; their decoder's SSRU is a standard layer here).
STUDENT_VOCAB_SIZE = 32000
STUDENT_CONFIG = {
    **BASE_CONFIG, "d_model": 256, "encoder_layers": 6, "decoder_layers": 2, "encoder_attention_heads": 8,
    "decoder_attention_heads": 8, "encoder_ffn_dim": 1536, "decoder_ffn_dim": 1536,
    "vocab_size": STUDENT_VOCAB_SIZE, "decoder_vocab_size": STUDENT_VOCAB_SIZE, "pad_token_id": STUDENT_VOCAB_SIZE - 1,
    "decoder_start_token_id": STUDENT_VOCAB_SIZE - 1,
}

Decoder = Callable[[list[list[int]]], list[list[int]]]  # id lists -> best token lists


def base_sentences(n: int, seed: int = 11) -> list[str]:
    """n generated English sentences (the source side of generate_pairs)."""
    from nmtserve.demo.corpus import generate_pairs

    return [src for src, _ in generate_pairs(n, seed)]


def write_tokenizer_files(directory: Path, seed: int = 7, vocab_size: int = VOCAB_SIZE) -> None:
    """source.spm = target.spm (trained + filler pieces) and a ``vocab_size``-entry vocab.json
    (58,101: opus-mt's), ``<pad>`` last."""
    import sentencepiece as spm

    from nmtserve.demo.corpus import generate_pairs

    texts = [text for pair in generate_pairs(2000, seed) for text in pair]
    fillers = [f"\u2581w{i:05d}" for i in range(vocab_size)]
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=proto, vocab_size=len(fillers) + 1000,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
        num_threads=1, user_defined_symbols=fillers,
    )
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    filler_set = set(fillers)
    learned = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
               if not (sp.is_control(i) or sp.is_unknown(i) or sp.id_to_piece(i) in filler_set)]
    pieces = ["</s>", "<unk>", *learned, *fillers][: vocab_size - 1]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    vocab["<pad>"] = vocab_size - 1
    if len(vocab) != vocab_size:
        raise RuntimeError(f"built {len(vocab)} vocabulary entries, expected {vocab_size}")
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(proto.getvalue())
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")


def build_marian(directory: Path, seed: int = 0, config: dict | None = None) -> Path:
    """Write a random Marian directory (config, weights, tokenizer files): the base size, or
    ``config`` (``STUDENT_CONFIG``)."""
    import tempfile

    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    torch.manual_seed(seed)
    config = config or BASE_CONFIG
    model = MarianMTModel(MarianConfig(**config)).eval()
    with torch.no_grad():
        for layer in model.model.decoder.layers:
            layer.encoder_attn.q_proj.weight.mul_(4.0)  # outputs follow the source
            layer.encoder_attn.v_proj.weight.mul_(4.0)
            layer.fc1.weight.mul_(4.0)  # the fed-back token's embedding does not dominate the
            layer.fc2.weight.mul_(4.0)  # residual stream (else each decode repeats one token)
        model.model.decoder.layers[-1].final_layer_norm.weight.mul_(4.0)  # peaked distributions
    model.save_pretrained(directory)
    with tempfile.TemporaryDirectory(prefix="nmtserve-marian-tok-") as tok_name:
        tok_dir = Path(tok_name)
        write_tokenizer_files(tok_dir, vocab_size=config["vocab_size"])
        MarianTokenizer(source_spm=str(tok_dir / "source.spm"), target_spm=str(tok_dir / "target.spm"),
                        vocab=str(tok_dir / "vocab.json")).save_pretrained(directory)
    return directory


def convert_ct2(marian_dir: Path, out_dir: Path) -> list[str]:
    """CTranslate2's own converter on the Marian directory; returns id -> piece (vocab.json order).

    CT2 drops ``<pad>`` (the last id) from its vocabulary and starts the decoder from a zero
    embedding instead, so it never generates pad (nmtserve and generate ban it too)."""
    from ctranslate2.converters import TransformersConverter

    TransformersConverter(str(marian_dir)).convert(str(out_dir), force=True)
    vocab = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))
    return [piece for piece, _ in sorted(vocab.items(), key=lambda item: item[1])]


def ct2_decoder(translator, vocab: list[str], beam: int, max_new_tokens: int) -> Decoder:
    """CTranslate2 ``translate_batch`` on source pieces (EOS included, as MarianTokenizer makes)."""
    piece_id = {p: i for i, p in enumerate(vocab)}

    def run(batch: list[list[int]]) -> list[list[int]]:
        results = translator.translate_batch(
            [[vocab[i] for i in ids] for ids in batch], beam_size=beam, length_penalty=1.0,
            max_decoding_length=max_new_tokens, min_decoding_length=0, return_end_token=True)
        return [[piece_id[p] for p in r.hypotheses[0]] for r in results]

    return run


def generated_tokens(sequences, eos: int, pad: int) -> list[list[int]]:
    """generate's rows -> generated ids (decoder start dropped, up to and with EOS, no filler pad)."""
    out = []
    for row in sequences.tolist():
        kept = row[1:]
        if eos in kept:
            kept = kept[: kept.index(eos) + 1]
        out.append([t for t in kept if t != pad])  # pad is banned: any pad is batch filler
    return out


def hf_decoder(model, beam: int, max_new_tokens: int) -> Decoder:
    """``MarianMTModel.generate`` on nmtserve's source ids (the same ids MarianTokenizer makes).

    Settings as tests/test_marian.py: pad banned (nmtserve gives it -inf), no forced EOS at the
    last step, the transformers stopping rule (``early_stopping=False``), length penalty 1.
    """
    import torch

    cfg = model.config
    pad, eos = cfg.pad_token_id, cfg.eos_token_id
    beam_args = {"num_beams": beam, "early_stopping": False} if beam > 1 else {"num_beams": 1}

    def run(batch: list[list[int]]) -> list[list[int]]:
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in batch])
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=input_ids.ne(pad), do_sample=False,
                                 max_new_tokens=max_new_tokens, length_penalty=1.0, bad_words_ids=[[pad]],
                                 forced_eos_token_id=None, **beam_args)
        return generated_tokens(out, eos, pad)

    return run
