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
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    build_model,
    load_checkpoint,
    save_checkpoint,
)
from .config import ConfigError, TransformerConfig
from .tokenizer import Tokenizer
from .transformer import sinusoidal_positions

log = logging.getLogger(__name__)

SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = "source.spm", "target.spm", "vocab.json", "target_vocab.json"
# Looked for in this order, as ``from_pretrained`` does.
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
)

# ``MarianConfig`` defaults (transformers 5.24, configuration_marian.py) for keys a config.json may omit.
MARIAN_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101, "decoder_vocab_size": None, "max_position_embeddings": 1024,
    "encoder_layers": 12, "encoder_ffn_dim": 4096, "encoder_attention_heads": 16,
    "decoder_layers": 12, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
    "activation_function": "gelu", "d_model": 1024, "dropout": 0.1, "scale_embedding": False,
    "decoder_start_token_id": 58100, "pad_token_id": 58100, "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}

# transformers' ACT2FN name -> nmtserve activation. "gelu" is the exact (erf) GELU in both.
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}


class MarianImportError(CheckpointError):
    """A Marian directory cannot be imported; the message lists every reason at once."""


# ---- the checker: one rule per option nmtserve cannot express --------------------------------
# (key, value assumed when absent, supported(value), what a different value would need).
# Several keys are legacy (transformers 3.x BartConfig-era configs of early opus-mt uploads):
# today's MarianMTModel ignores them, but a non-Marian value says the weights were trained for
# another architecture, so importing them as Marian would be silently wrong.
OptionRule = tuple[str, Any, Callable[[Any], bool], str]
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


def _cross_field_problems(cfg: Mapping[str, Any]) -> list[str]:
    """Options that are fine one by one but need something nmtserve's model does not have."""
    out = []
    if cfg["encoder_attention_heads"] != cfg["decoder_attention_heads"]:
        out.append(f"encoder_attention_heads={cfg['encoder_attention_heads']} != "
                   f"decoder_attention_heads={cfg['decoder_attention_heads']} (one head count for both stacks)")
    if cfg["encoder_ffn_dim"] != cfg["decoder_ffn_dim"]:
        out.append(f"encoder_ffn_dim={cfg['encoder_ffn_dim']} != decoder_ffn_dim={cfg['decoder_ffn_dim']} "
                   "(one feed-forward size for both stacks)")
    return out


def broken_rules(rules: tuple[OptionRule, ...], raw: Mapping[str, Any]) -> list[str]:
    """``key=value: what a different value would need`` for every rule ``raw`` breaks."""
    out = []
    for key, absent, supported, needs in rules:
        value = raw.get(key, absent)
        if not supported(value):
            out.append(f"{key}={value!r}: {needs}")
    return out


def unsupported_options(raw: Mapping[str, Any]) -> list[str]:
    """Every option of a Marian ``config.json`` that nmtserve cannot reproduce (empty: importable)."""
    out = broken_rules(OPTION_RULES, raw)
    if raw.get("model_type") == "marian":
        out += _cross_field_problems({**MARIAN_DEFAULTS, **raw})
    return out


# ---- the weight map -----------------------------------------------------------------------------
# Inside a layer, Marian module -> nmtserve module; the rest of the name (q_proj.weight, bias...)
# is the same on both sides. Marian layers are post-norm: the LayerNorm after a sublayer is the
# norm of nmtserve's Sublayer around it.
LAYER_MODULES: dict[str, dict[str, str]] = {
    "encoder": {
        "self_attn": "self_attn", "self_attn_layer_norm": "sub_attn.norm",
        "fc1": "ffn.fc1", "fc2": "ffn.fc2", "final_layer_norm": "sub_ffn.norm",
    },
    "decoder": {
        "self_attn": "self_attn", "self_attn_layer_norm": "sub_self.norm",
        "encoder_attn": "cross_attn", "encoder_attn_layer_norm": "sub_cross.norm",
        "fc1": "ffn.fc1", "fc2": "ffn.fc2", "final_layer_norm": "sub_ffn.norm",
    },
}
_LAYER_KEY = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.([a-z0-9_]+)\.(.+)")

# Embedding roles: the key that holds each, then where transformers ties it from when that key is
# absent. The tie map is empty unless ``tie_word_embeddings`` (transformers 5.x,
# modeling_utils.get_expanded_tied_weights_keys): all three alias ``model.shared`` when
# ``share_encoder_decoder_embeddings``, else only lm_head aliases the decoder embedding.
EMBEDDING_KEYS = {
    "encoder": "model.encoder.embed_tokens.weight",
    "decoder": "model.decoder.embed_tokens.weight",
    "output": "lm_head.weight",
}
TIE_SOURCES = {
    True: {"encoder": ("model.shared.weight",), "decoder": ("model.shared.weight",),
           "output": ("model.shared.weight", "model.decoder.embed_tokens.weight")},
    False: {"encoder": (), "decoder": (), "output": ("model.decoder.embed_tokens.weight",)},
}
SHARED_KEY = "model.shared.weight"
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


def _read_json(path: Path, problems: list[str], *, required: bool = False) -> dict:
    """The JSON object in ``path``; {} (and a problem when required) if missing or unreadable."""
    if not path.is_file():
        if required:
            problems.append(f"{path.name} is missing")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: cannot be read as JSON ({exc})")
        return {}
    if not isinstance(data, dict):
        problems.append(f"{path.name}: expected a JSON object")
        return {}
    return data


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """safetensors, a sharded safetensors/bin index, or a pickle-free ``torch.load`` of a .bin."""
    if path.name.endswith(".index.json"):
        shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        out: dict[str, torch.Tensor] = {}
        for shard in shards:
            out.update(_read_weights(path.parent / shard))
        return out
    if path.suffix == ".safetensors":
        return load_file(str(path))
    # weights_only=True: plain tensors and containers only, no code from the pickle runs.
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, Mapping) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise MarianImportError(f"{path}: expected a flat state dict of tensors")
    return dict(data)


def find_weights(path: Path, problems: list[str], *, read: bool) -> tuple[Path | None, dict[str, torch.Tensor]]:
    """The directory's weights file (``WEIGHT_FILES``, ``from_pretrained``'s order) and, when
    ``read`` (a config of the right model type), its tensors; a problem names what is wrong."""
    weights_file = next((path / n for n in WEIGHT_FILES if (path / n).is_file()), None)
    weights: dict[str, torch.Tensor] = {}
    if weights_file is None:
        problems.append(f"no PyTorch weights (looked for {', '.join(WEIGHT_FILES)})")
    elif read:
        try:
            weights = _read_weights(weights_file)
        except (OSError, ValueError, RuntimeError, KeyError, pickle.UnpicklingError) as exc:
            problems.append(f"{weights_file.name}: cannot be read ({exc})")
    return weights_file, weights


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


_LEGACY_GENERATION_KEYS = ("num_beams", "max_length", "bad_words_ids", "forced_eos_token_id", "length_penalty")


def _generation_config(path: Path, config: Mapping[str, Any], problems: list[str],
                       legacy: tuple[str, ...] = _LEGACY_GENERATION_KEYS) -> dict[str, Any]:
    """generation_config.json, or the ``legacy`` generation keys of config.json (moved there by transformers)."""
    if (path / "generation_config.json").is_file():
        return _read_json(path / "generation_config.json", problems, required=True)
    return {k: config[k] for k in legacy if k in config}


# Decoding settings of transformers' generate that nmtserve's search does not apply (model
# conversion is unaffected; the difference is only in what generate would do with them).
_GENERATION_NOT_APPLIED = {
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "repetition_penalty": 1.0,
    "suppress_tokens": None, "begin_suppress_tokens": None, "diversity_penalty": 0.0,
}


def _log_generation_differences(files: MarianFiles, pad_id: int) -> None:
    gen = files.generation
    for key, neutral in _GENERATION_NOT_APPLIED.items():
        if gen.get(key, neutral) not in (neutral, None):
            log.warning("%s: generation_config %s=%r is not applied by nmtserve's search", files.path, key, gen[key])
    bad = gen.get("bad_words_ids")
    if bad and bad != [[pad_id]]:
        log.warning("%s: bad_words_ids=%r: nmtserve bans only the pad token", files.path, bad)
    if gen.get("forced_eos_token_id") is not None:
        log.info("%s: forced_eos_token_id is not applied: a hypothesis cut at the maximum length ends "
                 "without a forced EOS (only sentences that reach max length can differ)", files.path)


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


def place_embeddings(embeddings: Mapping[str, torch.Tensor], state: dict[str, torch.Tensor]) -> tuple[bool, bool]:
    """Put the encoder, decoder and output tables (``EMBEDDING_KEYS``' roles) into nmtserve's
    ``state``, tying what is equal: the same values give the same computation, and one table
    exports smaller. Returns (share_embeddings, tie_output) for the config; (False, False) when
    a table is missing (already reported)."""
    if len(embeddings) != 3:
        return False, False
    enc, dec, out = embeddings["encoder"], embeddings["decoder"], embeddings["output"]
    share_tables = enc.shape == dec.shape and torch.equal(enc, dec)
    share_output = dec.shape == out.shape and torch.equal(dec, out)
    state["src_embed.lut.weight"] = enc
    if not share_tables:
        state["tgt_embed.lut.weight"] = dec
    if not share_output:
        state["generator.weight"] = out
    return share_tables, share_output


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
