"""Import Hugging Face Marian (opus-mt) checkpoint directories.

A fixed pipeline, as CTranslate2's converters: read the files -> check the config (every
unsupported option collected, one error listing all) -> map config and weights (tables, below)
-> strict load. ``load_marian`` returns a ``Checkpoint`` that the export pipeline uses as is;
``convert_marian`` writes an nmtserve checkpoint directory.

What differs from nmtserve's own checkpoints, and why the mapping looks the way it does:

* ids come from ``vocab.json`` (piece -> Marian id), not from sentencepiece: the tokenizer maps
  pieces through it, unknown pieces -> ``<unk>``, EOS appended (as ``MarianTokenizer``);
* the decoder starts with ``decoder_start_token_id``, which is the pad id in opus-mt;
* positions are sinusoids in the "concat" layout ([sin | cos]), never stored in the weights;
* post-norm layers, no final stack LayerNorm, LayerNorm eps 1e-5, a ``final_logits_bias``;
* which embedding tensors are tied is decided by ``share_encoder_decoder_embeddings`` and
  ``tie_word_embeddings`` and by which aliases the file happens to hold (docs/notes/marian.md §2-3).

``transformers`` is not imported: it is only a test dependency. Pickled ``.bin`` weights are read
with ``torch.load(weights_only=True)``, which refuses to run code.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint, build_model, load_checkpoint, save_checkpoint
from ..config import ConfigError, TransformerConfig
from ..tokenizer import Tokenizer
from ..transformer import sinusoidal_positions
from .base import ImportFailure, OptionRule, broken_rules, place_embeddings
from .hf_files import (
    _LAYER_KEY,
    ACTIVATIONS,
    EMBEDDING_KEYS,
    LAYER_MODULES,
    SHARED_KEY,
    TIE_SOURCES,
    _cross_field_problems,
    _generation_config,
    _log_generation_differences,
    _read_json,
    find_weights,
)

log = logging.getLogger(__name__)

SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = "source.spm", "target.spm", "vocab.json", "target_vocab.json"

# ``MarianConfig`` defaults (transformers 5.24, configuration_marian.py) for keys a config.json may omit.
MARIAN_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101, "decoder_vocab_size": None, "max_position_embeddings": 1024,
    "encoder_layers": 12, "encoder_ffn_dim": 4096, "encoder_attention_heads": 16,
    "decoder_layers": 12, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
    "activation_function": "gelu", "d_model": 1024, "dropout": 0.1, "scale_embedding": False,
    "decoder_start_token_id": 58100, "pad_token_id": 58100, "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}


class MarianImportError(ImportFailure):
    """A Marian directory cannot be imported; the message lists every reason at once."""


# ---- the checker: one rule per option nmtserve cannot express --------------------------------
# Several keys are legacy (transformers 3.x BartConfig-era configs of early opus-mt uploads):
# today's MarianMTModel ignores them, but a non-Marian value says the weights were trained for
# another architecture, so importing them as Marian would be silently wrong.
OPTION_RULES: tuple[OptionRule, ...] = (
    ("model_type", None, lambda v: v == "marian", "only Marian (MarianMTModel) checkpoints are supported"),
    ("architectures", None, lambda v: v is None or "MarianMTModel" in v,
     "the weights must be a MarianMTModel (with lm_head and final_logits_bias)"),
    ("is_encoder_decoder", True, lambda v: v is True, "an encoder-decoder model is required"),
    ("is_decoder", False, lambda v: not v, "a decoder-only model cannot be imported"),
    ("activation_function", "gelu", lambda v: v in ACTIVATIONS, f"supported activations: {', '.join(ACTIVATIONS)}"),
    ("normalize_before", False, lambda v: not v, "pre-norm layers (Marian is post-norm)"),
    ("normalize_embedding", False, lambda v: not v, "a LayerNorm on the embeddings"),
    ("layernorm_embedding", False, lambda v: not v, "a LayerNorm on the embeddings"),
    ("add_final_layer_norm", False, lambda v: not v, "a final LayerNorm after each stack"),
    ("add_bias_logits", False, lambda v: not v, "a separate logits bias layer"),
    ("static_position_embeddings", True, lambda v: v is True, "learned position embeddings"),
    ("pruned_heads", None, lambda v: not v, "pruned attention heads"),
    ("tie_encoder_decoder", False, lambda v: not v, "encoder weights tied to the decoder's"),
    ("quantization_config", None, lambda v: v is None, "quantized weights"),
    ("pad_token_id", 58100, lambda v: isinstance(v, int), "a pad id (source mask, decoder start)"),
    ("eos_token_id", 0, lambda v: isinstance(v, int) or (isinstance(v, list) and len(v) == 1),
     "exactly one EOS id"),
)


def unsupported_options(raw: Mapping[str, Any]) -> list[str]:
    """Every option of a Marian ``config.json`` that nmtserve cannot reproduce (empty: importable)."""
    out = broken_rules(OPTION_RULES, raw)
    if raw.get("model_type") == "marian":
        out += _cross_field_problems({**MARIAN_DEFAULTS, **raw})
    return out


# Not weights: Marian's sinusoid table, recomputed at load (older .bin files may still hold it).
POSITION_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
BIAS_KEY = "final_logits_bias"  # a (1, V) buffer; zeros when absent (transformers does the same)


@dataclass
class MarianFiles:
    """What a Marian directory holds, read but not yet interpreted."""

    path: Path
    config: dict[str, Any]
    generation: dict[str, Any]
    vocab: dict[str, int]
    weights: dict[str, torch.Tensor]
    weights_file: Path


def read_marian_directory(path: str | Path) -> MarianFiles:
    """Read every file; fail once naming all that are missing, unreadable or unsupported."""
    path = Path(path)
    if not path.is_dir():
        raise MarianImportError(f"{path}: not a directory")
    problems: list[str] = []
    config = _read_json(path / "config.json", problems, required=True)
    if config:
        problems += unsupported_options(config)
    for name in (SOURCE_SPM, TARGET_SPM):
        if not (path / name).is_file():
            problems.append(f"{name} is missing")
    tok_config = _read_json(path / "tokenizer_config.json", problems)
    if tok_config.get("separate_vocabs") or (path / TARGET_VOCAB).is_file():
        problems.append("separate source/target vocabularies (separate_vocabs, target_vocab.json): "
                        "nmtserve's Tokenizer maps both sides through one vocab.json")
    vocab = _read_json(path / VOCAB, problems, required=True)
    if vocab and not all(isinstance(v, int) for v in vocab.values()):
        problems.append(f"{VOCAB}: ids must be integers")
        vocab = {}
    weights_file, weights = find_weights(path, problems, read=config.get("model_type") == "marian")
    generation = _generation_config(path, config, problems)
    if problems:
        raise MarianImportError(f"{path}: cannot import as a Marian checkpoint:\n  - " + "\n  - ".join(problems))
    return MarianFiles(path, config, generation, vocab, weights, weights_file)


# ---- mapping ------------------------------------------------------------------------------------
def _resolve_embeddings(weights: Mapping[str, torch.Tensor], share: bool, tie: bool,
                        problems: list[str]) -> dict[str, torch.Tensor]:
    tie_sources = TIE_SOURCES[share] if tie else {role: () for role in EMBEDDING_KEYS}
    out = {}
    for role, key in EMBEDDING_KEYS.items():
        found = next((k for k in (key, *tie_sources[role]) if k in weights), None)
        if found is None:
            problems.append(f"missing tensor {key} (and nothing it is tied to: "
                            f"share_encoder_decoder_embeddings={share}, tie_word_embeddings={tie})")
        else:
            out[role] = weights[found]
    return out


def _map_layers(weights: Mapping[str, torch.Tensor], problems: list[str]) -> dict[str, torch.Tensor]:
    out, unknown = {}, []
    known = {*EMBEDDING_KEYS.values(), SHARED_KEY, *POSITION_KEYS, BIAS_KEY}
    for key, tensor in weights.items():
        match = _LAYER_KEY.fullmatch(key)
        module = LAYER_MODULES[match[1]].get(match[3]) if match else None
        if module is not None:
            out[f"{match[1]}_layers.{match[2]}.{module}.{match[4]}"] = tensor
        elif key not in known:
            unknown.append(key)
    if unknown:
        problems.append("tensors with no nmtserve counterpart: " + ", ".join(sorted(unknown)))
    return out


def _check_positions(weights: Mapping[str, torch.Tensor], max_positions: int, d_model: int,
                     problems: list[str]) -> None:
    table = sinusoidal_positions(max_positions, d_model, "concat")
    for key in POSITION_KEYS:
        if key in weights:
            stored = weights[key].float()
            if stored.shape != table.shape or not torch.allclose(stored, table, atol=1e-3):
                problems.append(f"{key} is not Marian's sinusoid table (learned positions are not supported)")


def marian_to_nmtserve(files: MarianFiles, *, renormalize_pad: bool | None = None
                       ) -> tuple[TransformerConfig, dict[str, torch.Tensor]]:
    """The nmtserve config and state dict (fp32) of a Marian directory; one error lists all problems.

    ``renormalize_pad``: ban pad *before* the log-softmax (the remaining tokens' probabilities are
    renormalised), which is what generate does with ``bad_words_ids=[[pad]]`` plus
    ``renormalize_logits=True`` (opus-mt hub generation configs since transformers PR #25459).
    It is written as -inf in ``final_logits_bias[pad]``, so the exported graphs need nothing new.
    None: follow the directory's generation config (``renormalize_logits``, default False).
    """
    raw = {**MARIAN_DEFAULTS, **{k: v for k, v in files.config.items() if v is not None}}
    problems: list[str] = []
    share, tie = bool(raw["share_encoder_decoder_embeddings"]), bool(raw["tie_word_embeddings"])
    d_model, max_positions = int(raw["d_model"]), int(raw["max_position_embeddings"])
    eos = raw["eos_token_id"][0] if isinstance(raw["eos_token_id"], list) else raw["eos_token_id"]
    pad = raw["pad_token_id"]
    src_vocab = int(raw["vocab_size"])
    tgt_vocab = src_vocab if share else int(raw["decoder_vocab_size"] or src_vocab)

    # The tokenizer's special pieces must be the model's ids (MarianTokenizer reads them from vocab.json).
    vocab = files.vocab
    unk = vocab.get("<unk>")
    if unk is None:
        problems.append(f"{VOCAB} has no <unk> piece")
    for piece, expected, name in (("</s>", eos, "eos_token_id"), ("<pad>", pad, "pad_token_id")):
        if piece in vocab and vocab[piece] != expected:
            problems.append(f"{VOCAB}: {piece} is {vocab[piece]} but config {name} is {expected}")
    if vocab and not 0 <= min(vocab.values()) <= max(vocab.values()) < min(src_vocab, tgt_vocab):
        problems.append(f"{VOCAB} ids {min(vocab.values())}..{max(vocab.values())} do not fit "
                        f"the embeddings ({src_vocab} source, {tgt_vocab} target rows)")

    weights = {k: v.float() for k, v in files.weights.items()}
    embeddings = _resolve_embeddings(weights, share, tie, problems)
    state = _map_layers(weights, problems)
    _check_positions(weights, max_positions, d_model, problems)

    if renormalize_pad is None:
        renormalize_pad = bool(files.generation.get("renormalize_logits", False))
    bias = weights.get(BIAS_KEY, torch.zeros(1, tgt_vocab)).reshape(-1).clone()
    if renormalize_pad and 0 <= pad < bias.numel():
        bias[pad] = -math.inf
    use_bias = bool(bias.ne(0).any())

    share_tables, share_output = place_embeddings(embeddings, state)
    if use_bias:
        state["final_logits_bias"] = bias

    config = None
    try:
        config = TransformerConfig(
            src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=d_model,
            h=int(raw["encoder_attention_heads"]), d_ff=int(raw["encoder_ffn_dim"]),
            encoder_layers=int(raw["encoder_layers"]), decoder_layers=int(raw["decoder_layers"]),
            dropout=float(raw["dropout"]), activation=ACTIVATIONS.get(raw["activation_function"], "?"),
            pre_norm=False, layer_norm_eps=1e-5, scale_embedding=bool(raw["scale_embedding"]),
            position_layout="concat", max_positions=max_positions,
            share_embeddings=share_tables, tie_output=share_output, final_logits_bias=use_bias,
            pad_id=pad, bos_id=int(raw["decoder_start_token_id"]), eos_id=eos, unk_id=unk if unk is not None else 0,
        )
    except (ConfigError, TypeError, ValueError) as exc:
        problems.append(str(exc))
    if problems:
        raise MarianImportError(f"{files.path}: cannot import as a Marian checkpoint:\n  - " + "\n  - ".join(problems))
    return config, state


def load_marian(path: str | Path, *, renormalize_pad: bool | None = None) -> Checkpoint:
    """Load a Hugging Face Marian directory as an nmtserve ``Checkpoint`` (fp32, eval mode, CPU)."""
    files = read_marian_directory(path)
    config, state = marian_to_nmtserve(files, renormalize_pad=renormalize_pad)
    model = build_model(config, state, str(files.weights_file))
    _log_generation_differences(files, config.pad_id)
    tokenizer = Tokenizer.from_files(files.path / SOURCE_SPM, files.path / TARGET_SPM, config, files.vocab)
    log.info("imported Marian %s (%d parameters; shared embeddings %s, tied output %s, logits bias %s)",
             files.path, sum(p.numel() for p in model.parameters()), config.share_embeddings,
             config.tie_output, config.final_logits_bias)
    return Checkpoint(model=model, tokenizer=tokenizer, path=files.path)


def convert_marian(path: str | Path, out_dir: str | Path, *, renormalize_pad: bool | None = None) -> Path:
    """Write a Marian directory as an nmtserve checkpoint: config.json, model.safetensors,
    source.spm, target.spm and vocab.json. The result is loaded back and checked before it is
    moved into place, so a loader that would mis-read it (ignoring vocab.json) fails here.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise MarianImportError(f"{out_dir}: exists and is not empty")
    ckpt = load_marian(path, renormalize_pad=renormalize_pad)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".marian-", dir=out_dir.parent) as tmp_name:
        tmp = Path(tmp_name) / "checkpoint"
        save_checkpoint(ckpt.model, tmp, ckpt.path / SOURCE_SPM, ckpt.path / TARGET_SPM)
        vocab_json = json.dumps(ckpt.tokenizer.vocab, ensure_ascii=False, indent=2)
        (tmp / VOCAB).write_text(vocab_json + "\n", encoding="utf-8")
        back = load_checkpoint(tmp)
        if back.tokenizer.vocab != ckpt.tokenizer.vocab:
            raise MarianImportError(
                "nmtserve's checkpoint loader does not read vocab.json, so the converted checkpoint "
                "would tokenize with sentencepiece ids; export the Marian directory directly instead")
        if out_dir.exists():
            out_dir.rmdir()
        shutil.move(str(tmp), str(out_dir))
    return out_dir


def load(path: Path, options) -> Checkpoint:
    """The registry's entry (``importers.FORMATS``)."""
    if options.tokenizer is not None:
        raise MarianImportError(f"{path}: a Marian directory carries its sentencepiece models; --tokenizer is not used")
    return load_marian(path)
