"""Import Hugging Face M2M100 / NLLB-200 (``m2m_100``) and mBART-50 (``mbart``) checkpoint directories.

The same fixed pipeline as ``marian.py`` (whose file readers it uses): read the files -> check
the config (every unsupported option collected, one error listing all) -> map config and weights
(tables, below) -> check the mapped tensors against the model the config builds -> strict load.
The tokenizer of these directories is not read here (``hf_tokenizer.py``).

The architecture is transformers' (5.24: ``modeling_m2m_100.py``, ``modeling_mbart.py``), which
is fairseq's, not Marian's:

* pre-norm layers and a final LayerNorm after each stack (``model.{encoder,decoder}.layer_norm``);
  LayerNorm eps 1e-5 (``nn.LayerNorm``'s default), attention scaled by d_k^-0.5;
* M2M100 / NLLB: fairseq's sinusoids (``position_layout="m2m100"``), never stored. transformers
  numbers a token's position from ``padding_idx + 1`` by counting the non-pad tokens before it;
  with padding only at the end (as every tokenizer pads) that is ``padding_idx + 1 + p`` for the
  p-th token, i.e. ``position_offset = pad_token_id + 1`` (a pad id inside a sentence would
  shift transformers' later positions and is masked by nmtserve: tokenizers must not produce one);
* mBART: a learned position table per stack of ``max_position_embeddings + 2`` rows read at row
  ``p + 2`` (``MBartLearnedPositionalEmbedding.offset``), and ``layernorm_embedding`` on the
  token + position sum of each stack (``embedding_norm``), and ``final_logits_bias``;
* ``scale_embedding`` multiplies token embeddings by sqrt(d_model) (NLLB, M2M100, mBART-50);
* one token table for both stacks and the output projection when ``tie_word_embeddings`` (all
  three alias ``model.shared``); without it transformers 5.x ties nothing, so each is read from
  its own key (as Marian's ``TIE_SOURCES[True]``).

``transformers`` is not imported: it is only a test dependency.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint, build_model
from ..config import ConfigError, TransformerConfig
from ..transformer import Transformer, sinusoidal_positions
from .base import ImportFailure, OptionRule, broken_rules, check_against_model, place_embeddings
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

# fairseq dictionaries (and so every tokenizer of these families) put <s> 0, <pad> 1, </s> 2,
# <unk> 3; config.json names all but <unk>.
FAIRSEQ_UNK_ID = 3


class MultilingualImportError(ImportFailure):
    """An M2M100 / NLLB / mBART directory cannot be imported; the message lists every reason at once."""


# ---- the families: what differs between the two model classes --------------------------------
@dataclass(frozen=True)
class Family:
    model_type: str
    architecture: str  # the transformers class whose weights are mapped
    defaults: Mapping[str, Any]  # its config class's defaults, for keys a config.json may omit
    learned_positions: bool
    embedding_norm: bool  # layernorm_embedding
    logits_bias: bool  # the class has a final_logits_bias buffer
    position_offset: Callable[[Mapping[str, Any]], int]  # table row of position 0


_COMMON_DEFAULTS: dict[str, Any] = {
    "max_position_embeddings": 1024, "encoder_layers": 12, "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16, "decoder_layers": 12, "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16, "d_model": 1024, "dropout": 0.1, "pad_token_id": 1,
    "bos_token_id": 0, "eos_token_id": 2, "tie_word_embeddings": True,
}
# Defaults of transformers 5.24's M2M100Config / MBartConfig.
FAMILIES: dict[str, Family] = {
    "m2m_100": Family(
        "m2m_100", "M2M100ForConditionalGeneration",
        {**_COMMON_DEFAULTS, "vocab_size": 128112, "activation_function": "relu", "scale_embedding": True,
         "decoder_start_token_id": 2},
        learned_positions=False, embedding_norm=False, logits_bias=False,
        position_offset=lambda cfg: int(cfg["pad_token_id"]) + 1,
    ),
    "mbart": Family(
        "mbart", "MBartForConditionalGeneration",
        {**_COMMON_DEFAULTS, "vocab_size": 50265, "activation_function": "gelu", "scale_embedding": False,
         "decoder_start_token_id": None},
        learned_positions=True, embedding_norm=True, logits_bias=True,
        position_offset=lambda cfg: 2,
    ),
}


# ---- the checker: one rule per option nmtserve cannot express (base.OptionRule) ---------------
OPTION_RULES: tuple[OptionRule, ...] = (
    ("model_type", None, lambda v: v in FAMILIES, f"supported model types: {', '.join(FAMILIES)}"),
    ("is_encoder_decoder", True, lambda v: v is True, "an encoder-decoder model is required"),
    ("is_decoder", False, lambda v: not v, "a decoder-only model cannot be imported"),
    ("activation_function", "relu", lambda v: v in ACTIVATIONS, f"supported activations: {', '.join(ACTIVATIONS)}"),
    ("add_bias_logits", False, lambda v: not v, "a separate logits bias layer"),
    ("pruned_heads", None, lambda v: not v, "pruned attention heads"),
    ("tie_encoder_decoder", False, lambda v: not v, "encoder weights tied to the decoder's"),
    ("quantization_config", None, lambda v: v is None, "quantized weights"),
    ("pad_token_id", 1, lambda v: isinstance(v, int), "a pad id (source mask, positions)"),
    ("eos_token_id", 2, lambda v: isinstance(v, int) or (isinstance(v, list) and len(v) == 1),
     "exactly one EOS id"),
    ("decoder_start_token_id", None, lambda v: v is None or isinstance(v, int), "one decoder start id"),
)

# Legacy keys of transformers 3.x/4.x (BartConfig era; mBART-50's config.json still has them) that
# today's classes ignore: a value that contradicts the family says the weights were trained for
# another architecture. key -> the family's value.
LEGACY_ARCHITECTURE_KEYS: dict[str, Callable[[Family], Any]] = {
    "normalize_before": lambda f: True,  # pre-norm layers
    "add_final_layer_norm": lambda f: True,  # a LayerNorm after each stack
    "normalize_embedding": lambda f: f.embedding_norm,  # layernorm_embedding
    "layernorm_embedding": lambda f: f.embedding_norm,
    "static_position_embeddings": lambda f: not f.learned_positions,
    "extra_pos_embeddings": lambda f: 2,  # the position tables' extra rows
}


def _family_problems(family: Family, raw: Mapping[str, Any]) -> list[str]:
    out = []
    architectures = raw.get("architectures")
    if architectures is not None and family.architecture not in architectures:
        out.append(f"architectures={architectures!r}: the weights must be a {family.architecture}")
    for key, value_of in LEGACY_ARCHITECTURE_KEYS.items():
        if key in raw and raw[key] != value_of(family):
            out.append(f"{key}={raw[key]!r} describes another architecture ({family.architecture}: "
                       f"{key}={value_of(family)!r})")
    cfg = {**family.defaults, **{k: v for k, v in raw.items() if v is not None}}
    out += _cross_field_problems(cfg)
    start = _decoder_start(cfg, {})
    if not family.learned_positions and start == cfg["pad_token_id"]:
        # transformers would give the start token pad's (zeroed) position and number the rest from 0.
        out.append(f"decoder_start_token_id={start} is the pad id: M2M100 positions skip pad tokens")
    return out


def unsupported_options(raw: Mapping[str, Any]) -> list[str]:
    """Every option of an M2M100 / mBART ``config.json`` that nmtserve cannot reproduce (empty: importable)."""
    out = broken_rules(OPTION_RULES, raw)
    family = FAMILIES.get(raw.get("model_type"))
    if family is not None:
        out += _family_problems(family, raw)
    return out


# ---- the weight map ---------------------------------------------------------------------------
# Inside a layer: Marian's table (the same module names). The LayerNorm that Marian applies after a
# sublayer these models apply before it; both are the norm of nmtserve's Sublayer around it.
# Outside the layers, per stack: transformers module -> nmtserve module (rest of the name equal).
# Which of them a checkpoint must have follows from the config (embedding_norm, learned_positions).
STACK_MODULES: dict[str, dict[str, str]] = {
    "encoder": {"layer_norm": "encoder_norm", "layernorm_embedding": "src_embed.norm",
                "embed_positions": "src_embed.pos_lut"},
    "decoder": {"layer_norm": "decoder_norm", "layernorm_embedding": "tgt_embed.norm",
                "embed_positions": "tgt_embed.pos_lut"},
}
_STACK_KEY = re.compile(r"model\.(encoder|decoder)\.([a-z_]+)\.(weight|bias)")
EMBEDDING_TARGETS = {"encoder": "src_embed.lut.weight", "decoder": "tgt_embed.lut.weight",
                     "output": "generator.weight"}
BIAS_KEY = "final_logits_bias"  # mBART: a (1, V) buffer; zeros when absent
# M2M100's sinusoid buffers (non-persistent today; early 4.x .bin files may hold them): checked, not loaded.
SINUSOID_KEYS = ("model.encoder.embed_positions.weights", "model.decoder.embed_positions.weights")

# Generation settings a caller of nmtserve's search has to apply itself (the target language is
# forced_bos_token_id) or may want to follow.
GENERATION_SETTINGS = ("decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id", "max_length",
                       "num_beams", "early_stopping", "length_penalty")
# Where config.json held them before transformers moved them to generation_config.json.
_LEGACY_GENERATION_KEYS = (*GENERATION_SETTINGS, "bad_words_ids", "no_repeat_ngram_size")


@dataclass
class MultilingualFiles:
    """What an M2M100 / NLLB / mBART directory holds, read but not yet interpreted."""

    path: Path
    family: Family
    config: dict[str, Any]
    generation: dict[str, Any]  # generation_config.json, or config.json's legacy generation keys
    weights: dict[str, torch.Tensor]
    weights_file: Path
    tokenizer_unk_id: int | None  # <unk>'s id as the tokenizer files give it, if they do

    @property
    def generation_settings(self) -> dict[str, Any]:
        """The ``GENERATION_SETTINGS`` that the directory sets (forced_bos_token_id, num_beams...)."""
        return {k: self.generation[k] for k in GENERATION_SETTINGS if self.generation.get(k) is not None}


def _tokenizer_unk_id(path: Path) -> int | None:
    """<unk>'s id as the tokenizer files list it: tokenizer_config.json's ``added_tokens_decoder``
    (transformers 4.34-4.x), tokenizer.json's ``added_tokens`` (NLLB, mBART-50) or vocab.json
    (M2M100). None for a sentencepiece-only directory (its tokenizer uses fairseq's ids)."""
    ignored: list[str] = []  # an unreadable tokenizer file is the tokenizer loader's error to report
    tok_config = _read_json(path / "tokenizer_config.json", ignored)
    unk = tok_config.get("unk_token", "<unk>")
    unk = unk.get("content") if isinstance(unk, dict) else unk
    added = tok_config.get("added_tokens_decoder")
    for token_id, token in (added.items() if isinstance(added, dict) else ()):
        if isinstance(token, dict) and token.get("content") == unk and str(token_id).isdigit():
            return int(token_id)
    added = _read_json(path / "tokenizer.json", ignored).get("added_tokens")
    for token in added if isinstance(added, list) else ():
        if isinstance(token, dict) and token.get("content") == unk and isinstance(token.get("id"), int):
            return token["id"]
    vocab_id = _read_json(path / "vocab.json", ignored).get(unk)
    return vocab_id if isinstance(vocab_id, int) else None


def read_multilingual_directory(path: str | Path) -> MultilingualFiles:
    """Read config, generation config and weights; fail once naming all that are missing or unsupported."""
    path = Path(path)
    if not path.is_dir():
        raise MultilingualImportError(f"{path}: not a directory")
    problems: list[str] = []
    config = _read_json(path / "config.json", problems, required=True)
    if config:
        problems += unsupported_options(config)
    family = FAMILIES.get(config.get("model_type"))
    weights_file, weights = find_weights(path, problems, read=family is not None)
    generation = _generation_config(path, config, problems, legacy=_LEGACY_GENERATION_KEYS)
    if problems:
        raise MultilingualImportError(_message(path, problems))
    return MultilingualFiles(path, family, config, generation, weights, weights_file, _tokenizer_unk_id(path))


def _message(path: Path, problems: list[str]) -> str:
    return f"{path}: cannot import as an M2M100/NLLB/mBART checkpoint:\n  - " + "\n  - ".join(problems)


# ---- mapping ----------------------------------------------------------------------------------
def _decoder_start(cfg: Mapping[str, Any], generation: Mapping[str, Any]) -> Any:
    """The decoder's first token as generate picks it: generation config, config, then bos."""
    for source in (generation, cfg):
        if source.get("decoder_start_token_id") is not None:
            return source["decoder_start_token_id"]
    return cfg.get("bos_token_id")


def _map_weights(weights: Mapping[str, torch.Tensor], family: Family,
                 problems: list[str]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Layer and stack tensors -> (nmtserve state, nmtserve name -> transformers name)."""
    state, origin, unknown = {}, {}, []
    known = {*EMBEDDING_KEYS.values(), SHARED_KEY}
    if family.logits_bias:
        known.add(BIAS_KEY)
    if not family.learned_positions:
        known.update(SINUSOID_KEYS)
    for key, tensor in weights.items():
        target = None
        if match := _LAYER_KEY.fullmatch(key):
            module = LAYER_MODULES[match[1]].get(match[3])
            target = f"{match[1]}_layers.{match[2]}.{module}.{match[4]}" if module else None
        elif match := _STACK_KEY.fullmatch(key):
            module = STACK_MODULES[match[1]].get(match[2])
            target = f"{module}.{match[3]}" if module else None
        if target is not None:
            state[target], origin[target] = tensor, key
        elif key not in known:
            unknown.append(key)
    if unknown:
        problems.append(f"tensors with no nmtserve counterpart: {', '.join(sorted(unknown))}")
    return state, origin


def _hf_name(key: str) -> str:
    """The transformers name of an nmtserve tensor (for messages)."""
    if match := re.fullmatch(r"(encoder|decoder)_layers\.(\d+)\.(.+)", key):
        for hf, ours in LAYER_MODULES[match[1]].items():
            if match[3].startswith(ours + "."):
                return f"model.{match[1]}.layers.{match[2]}.{hf}{match[3][len(ours):]}"
    for stack, modules in STACK_MODULES.items():
        for hf, ours in modules.items():
            if key.startswith(ours + "."):
                return f"model.{stack}.{hf}{key[len(ours):]}"
    return key


def _check_sinusoids(weights: Mapping[str, torch.Tensor], d_model: int, pad: int, problems: list[str]) -> None:
    for key in SINUSOID_KEYS:
        if key in weights:
            stored = weights[key].float()
            table = sinusoidal_positions(stored.shape[0], d_model, "m2m100")
            if 0 <= pad < table.shape[0]:
                table[pad] = 0.0  # transformers zeroes the padding row
            if stored.shape != table.shape or not torch.allclose(stored, table, atol=1e-3):
                problems.append(f"{key} is not M2M100's sinusoid table")


def multilingual_to_nmtserve(files: MultilingualFiles, *, unk_id: int | None = None
                             ) -> tuple[TransformerConfig, dict[str, torch.Tensor]]:
    """The nmtserve config and state dict (fp32) of the directory; one error lists all problems.

    ``unk_id``: <unk>'s id (the tokenizer's); else config.json's ``unk_token_id``, the tokenizer
    files', or fairseq's 3.
    """
    family = files.family
    raw = {**family.defaults, **{k: v for k, v in files.config.items() if v is not None}}
    problems: list[str] = []
    tie = bool(raw["tie_word_embeddings"])
    d_model, pad = int(raw["d_model"]), int(raw["pad_token_id"])
    eos = raw["eos_token_id"][0] if isinstance(raw["eos_token_id"], list) else raw["eos_token_id"]
    start = _decoder_start(raw, files.generation)
    if not isinstance(start, int):
        problems.append("no decoder start token (decoder_start_token_id and bos_token_id are unset)")
    unk = next((int(v) for v in (unk_id, raw.get("unk_token_id"), files.tokenizer_unk_id) if v is not None), None)
    if unk is None:
        unk = FAIRSEQ_UNK_ID
        log.info("%s: neither config.json nor the tokenizer files give <unk>'s id: %d, as in every fairseq "
                 "dictionary", files.path, unk)

    weights = {k: v.float() for k, v in files.weights.items()}
    state, origin = _map_weights(weights, family, problems)
    if not family.learned_positions:
        _check_sinusoids(weights, d_model, pad, problems)

    # Embeddings: M2M100 and mBART share one table between the stacks (tie_word_embeddings ties all
    # three roles to model.shared); Marian's tie table for shared embeddings says where to look.
    tie_sources = TIE_SOURCES[True] if tie else {role: () for role in EMBEDDING_KEYS}
    embeddings = {}
    for role, key in EMBEDDING_KEYS.items():
        found = next((k for k in (key, *tie_sources[role]) if k in weights), None)
        if found is None:
            tied = " or ".join(tie_sources[role])
            problems.append(f"missing tensor {key}" + (f" (nor {tied}, which it is tied to)" if tied
                                                         else " (tie_word_embeddings is false: not tied)"))
        else:
            embeddings[role] = weights[found]
            origin[EMBEDDING_TARGETS[role]] = found
    share_tables, share_output = place_embeddings(embeddings, state)
    vocab = int(raw["vocab_size"])
    use_bias = False
    if family.logits_bias and BIAS_KEY in weights:
        bias = weights[BIAS_KEY].reshape(-1)
        use_bias = bool(bias.ne(0).any())
        if use_bias:
            state[BIAS_KEY], origin[BIAS_KEY] = bias, BIAS_KEY

    config = None
    try:
        config = TransformerConfig(
            src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model,
            h=int(raw["encoder_attention_heads"]), d_ff=int(raw["encoder_ffn_dim"]),
            encoder_layers=int(raw["encoder_layers"]), decoder_layers=int(raw["decoder_layers"]),
            dropout=float(raw["dropout"]), activation=ACTIVATIONS.get(raw["activation_function"], "?"),
            pre_norm=True, layer_norm_eps=1e-5, scale_embedding=bool(raw["scale_embedding"]),
            position_layout="interleaved" if family.learned_positions else "m2m100",
            learned_positions=family.learned_positions, position_offset=family.position_offset(raw),
            max_positions=int(raw["max_position_embeddings"]), embedding_norm=family.embedding_norm,
            share_embeddings=share_tables, tie_output=share_output, final_logits_bias=use_bias,
            pad_id=pad, bos_id=start if isinstance(start, int) else 0, eos_id=eos, unk_id=unk,
        )
    except (ConfigError, TypeError, ValueError) as exc:
        problems.append(str(exc))
    if config is not None:
        # A missing token table is reported where the tie rules are applied, with what it could be tied to.
        check_against_model(config, state, origin, problems, family.architecture, their_name=_hf_name,
                            reported=EMBEDDING_TARGETS.values())
    if problems:
        raise MultilingualImportError(_message(files.path, problems))
    return config, state


def load_multilingual_model(path: str | Path, *, unk_id: int | None = None) -> Transformer:
    """An M2M100 / NLLB / mBART directory's model as an nmtserve ``Transformer`` (fp32, eval mode, CPU)."""
    files = read_multilingual_directory(path)
    config, state = multilingual_to_nmtserve(files, unk_id=unk_id)
    model = build_model(config, state, str(files.weights_file))
    _log_generation_differences(files, config.pad_id)
    if "forced_bos_token_id" in files.generation_settings:
        log.info("%s: forced_bos_token_id=%s (the target language) must be forced by the caller",
                 files.path, files.generation_settings["forced_bos_token_id"])
    log.info("imported %s %s (%d parameters; shared embeddings %s, tied output %s, logits bias %s)",
             files.family.architecture, files.path, sum(p.numel() for p in model.parameters()),
             config.share_embeddings, config.tie_output, config.final_logits_bias)
    return model


def load_multilingual(path: str | Path) -> Checkpoint:
    """An NLLB-200 / M2M100 / mBART-50 directory as an nmtserve ``Checkpoint``: the model, and the
    checkpoint's own tokenizer files (``MultilingualTokenizer``), checked against each other."""
    from ..hf_tokenizer import MultilingualTokenizer, TokenizerFilesError

    path = Path(path)
    try:
        tokenizer = MultilingualTokenizer.from_directory(path)
    except TokenizerFilesError as exc:
        raise MultilingualImportError(f"{path}: tokenizer: {exc}") from exc
    model = load_multilingual_model(path, unk_id=tokenizer.unk_id)
    cfg = model.config
    problems = [f"the tokenizer's {name} id is {getattr(tokenizer, name + '_id')} but the model's is "
                f"{getattr(cfg, name + '_id')}" for name in ("pad", "eos") if getattr(tokenizer, name + "_id") != getattr(cfg, name + "_id")]
    if tokenizer.vocab_size > min(cfg.src_vocab_size, cfg.tgt_vocab_size):
        problems.append(f"the tokenizer makes ids up to {tokenizer.vocab_size - 1}, past the model's "
                        f"{min(cfg.src_vocab_size, cfg.tgt_vocab_size)} embeddings")
    if problems:
        raise MultilingualImportError(_message(path, problems))
    log.info("imported %s %s: %d languages, %d parameters", tokenizer.family, path, len(tokenizer.languages),
             sum(p.numel() for p in model.parameters()))
    return Checkpoint(model=model, tokenizer=tokenizer, path=path)  # type: ignore[arg-type]


def load(path: Path, options) -> Checkpoint:
    """The registry's entry (``importers.FORMATS``)."""
    if options.tokenizer is not None:
        raise MultilingualImportError(f"{path}: the directory carries its tokenizer files; --tokenizer is not used")
    return load_multilingual(path)
