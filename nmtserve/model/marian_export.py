"""Write an nmtserve checkpoint as a Hugging Face Marian directory (the inverse of ``marian.py``).

The result loads with ``MarianMTModel.from_pretrained`` / ``MarianTokenizer.from_pretrained``
and computes the same function, and ``load_marian`` imports it back. ``transformers`` is not
imported (it is only a test dependency): the files are written as ``save_pretrained`` writes them
(transformers 5.24, see docs/notes/marian.md §6).

How each nmtserve option maps, and why:

* **Positions.** Marian's static sinusoid table is the "concat" layout ``[sin | cos]``; nmtserve's
  default is the paper's "interleaved" ``[sin0, cos0, sin1, cos1, ...]``. Both use the frequencies
  ``10000^(-2i/d_model)``, so ``concat = interleaved[:, P]`` with
  ``P = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]``, exactly (checked at export time). Every layer is
  equivariant to a permutation of the residual-stream coordinates when the weights are permuted
  consistently, so the exported model uses the residual basis permuted by ``P``: embedding
  columns, the input dimension of q/k/v/fc1 (and of an untied output projection), the output
  dimension and bias of out_proj/fc2, and LayerNorm weight/bias. Attention heads, the FFN's inner
  dimension and the logits are unchanged. "concat" checkpoints are written unpermuted.
* **Embeddings.** ``share_embeddings`` -> ``share_encoder_decoder_embeddings``, ``tie_output`` ->
  ``tie_word_embeddings``; the tensors written are the ones ``save_pretrained`` writes for that
  combination (tied aliases once; with ``tie_word_embeddings`` false transformers ties nothing,
  so every role gets its own tensor).
* **Special ids.** ``decoder_start_token_id = bos_id`` (opus-mt starts with pad; nmtserve with
  bos), ``pad_token_id = pad_id``, ``eos_token_id = eos_id``.
* **Tokenizer.** ``vocab.json`` maps every sentencepiece piece to its nmtserve id, so
  ``MarianTokenizer`` ids are nmtserve's; ``<unk>``, ``</s>``, ``<pad>`` (which MarianTokenizer and
  ``load_marian`` look up by name) must be the unk/eos/pad pieces. A vocabulary-mapped checkpoint
  (an imported Marian model) writes its own ``vocab.json``. One ``vocab.json`` serves both sides,
  so a separate target sentencepiece model must have the same piece table.
  Only text containing the literal strings ``</s>``, ``<unk>``, ``<pad>`` or starting with a
  ``>>xx<<`` language code tokenizes differently: MarianTokenizer (and nmtserve's vocabulary-mapped
  ``Tokenizer``, as ``load_marian`` builds it) keep those whole, where sentencepiece splits them.
* **Generation.** ``generation_config.json`` holds what nmtserve's search does:
  ``bad_words_ids=[[pad]]`` (pad gets -inf after the log-softmax), no forced EOS (MarianConfig's
  default ``forced_eos_token_id=0`` would force token 0 at the maximum length), no
  ``renormalize_logits`` (``load_marian`` would then ban pad before the softmax), beam 4, and a
  ``max_length`` that allows as many generated tokens as the model has positions.

What Marian cannot express is refused with one ``MarianExportError`` naming every option:
pre-norm stacks (Marian is post-norm, with no final stack LayerNorm) and a LayerNorm epsilon other
than 1e-5 (``nn.LayerNorm``'s default, which Marian uses). nmtserve has no learned positions, no
embedding LayerNorm and one head count / FFN size for both stacks, so nothing else needs refusing
on the model side.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from safetensors.torch import save_file

from .checkpoint import Checkpoint, CheckpointError
from .config import TransformerConfig
from .importers.marian import load_marian
from .tokenizer import Tokenizer
from .transformer import Transformer, sinusoidal_positions

SOURCE_SPM, TARGET_SPM, VOCAB = "source.spm", "target.spm", "vocab.json"
MARIAN_LAYER_NORM_EPS = 1e-5
# nmtserve activation -> transformers ACT2FN name (both "gelu"s are the exact erf GELU).
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}

# nmtserve module inside a layer -> Marian module (inverse of marian.LAYER_MODULES).
LAYER_MODULES: dict[str, dict[str, str]] = {
    "encoder": {
        "self_attn": "self_attn",
        "sub_attn.norm": "self_attn_layer_norm",
        "ffn.fc1": "fc1",
        "ffn.fc2": "fc2",
        "sub_ffn.norm": "final_layer_norm",
    },
    "decoder": {
        "self_attn": "self_attn",
        "sub_self.norm": "self_attn_layer_norm",
        "cross_attn": "encoder_attn",
        "sub_cross.norm": "encoder_attn_layer_norm",
        "ffn.fc1": "fc1",
        "ffn.fc2": "fc2",
        "sub_ffn.norm": "final_layer_norm",
    },
}


class MarianExportError(ValueError):
    """A checkpoint cannot be written as a Marian directory; the message lists every reason."""


# ---- what Marian cannot express --------------------------------------------------------------
def unsupported_for_marian(config: TransformerConfig) -> list[str]:
    """Every option of ``config`` that MarianMTModel cannot reproduce (empty: exportable)."""
    out = []
    if config.pre_norm or config.encoder_pre or config.final_norms:
        out.append(
            f"pre_norm={config.pre_norm}, final_norm={config.final_norm}: Marian layers are post-norm, "
            "with no final LayerNorm after each stack"
        )
    if config.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        out.append(
            f"layer_norm_eps={config.layer_norm_eps}: Marian's LayerNorms use eps {MARIAN_LAYER_NORM_EPS}"
        )
    if config.activation not in ACTIVATIONS:
        out.append(f"activation={config.activation!r}: no Marian activation_function for it")
    if config.position_layout not in ("interleaved", "concat") or config.learned_positions:
        out.append(
            f"position_layout={config.position_layout!r} (learned={config.learned_positions}): only the paper's "
            "sinusoidal positions can be exported"
        )
    if config.position_offset:
        out.append(f"position_offset={config.position_offset}: Marian positions start at 0")
    if config.embedding_norm:
        out.append("embedding_norm=True: Marian has no LayerNorm on the embeddings")
    return out


# ---- the residual-stream permutation ----------------------------------------------------------
def position_permutation(d_model: int, layout: str) -> torch.Tensor | None:
    """P with ``concat table == layout table[:, P]``; None when the layout is already Marian's."""
    if layout == "concat":
        return None
    if layout != "interleaved":
        raise MarianExportError(
            f"position_layout={layout!r}: only sinusoidal positions can be exported"
        )
    # Interleaved column 2i is sin(pos * f_i), 2i+1 is cos(pos * f_i); concat column i is
    # sin(pos * f_i), d/2 + i is cos(pos * f_i), with the same f_i = 10000^(-2i/d).
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _check_permutation(config: TransformerConfig, perm: torch.Tensor) -> None:
    interleaved = sinusoidal_positions(config.max_positions, config.d_model, "interleaved")
    concat = sinusoidal_positions(config.max_positions, config.d_model, "concat")
    if not torch.equal(interleaved[:, perm], concat):  # a change to sinusoidal_positions
        raise MarianExportError(
            "the interleaved position table is not a column permutation of Marian's"
        )


def _permute(name: str, tensor: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Re-express one nmtserve tensor in the permuted residual basis (name: nmtserve's)."""
    if name.endswith("lut.weight") or name == "generator.weight":  # (V, d): columns are residual
        return tensor[:, perm]
    leaf = name.rsplit(".", 2)
    module, kind = leaf[-2], leaf[-1]
    if module in ("q_proj", "k_proj", "v_proj", "fc1"):  # read the residual stream
        return tensor[:, perm] if kind == "weight" else tensor
    if module in ("out_proj", "fc2"):  # write the residual stream
        return tensor[perm] if kind == "bias" else tensor[perm, :]
    if module == "norm":  # LayerNorm over the residual stream
        return tensor[perm]
    raise MarianExportError(f"{name}: no rule to permute it")


# ---- weights ----------------------------------------------------------------------------------
def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """The Marian safetensors dict of ``model`` (fp32, contiguous, no aliases)."""
    config = model.config
    problems = unsupported_for_marian(config)
    if problems:
        raise MarianExportError("cannot be written as Marian:\n  - " + "\n  - ".join(problems))
    perm = position_permutation(config.d_model, config.position_layout)
    if perm is not None:
        _check_permutation(config, perm)

    def get(name: str, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach().float()
        if perm is not None:
            tensor = _permute(name, tensor, perm)
        return tensor.contiguous().clone()

    out: dict[str, torch.Tensor] = {}
    params = dict(model.named_parameters(remove_duplicate=False))
    for stack, modules in LAYER_MODULES.items():
        for name, tensor in params.items():
            if not name.startswith(f"{stack}_layers."):
                continue
            _, index, rest = name.split(".", 2)
            module = next((m for m in modules if rest.startswith(m + ".")), None)
            if module is None:
                raise MarianExportError(f"{name}: no Marian counterpart")
            out[f"model.{stack}.layers.{index}.{modules[module]}{rest[len(module) :]}"] = get(
                name, tensor
            )

    src = get("src_embed.lut.weight", model.src_embed.lut.weight)
    tgt = get("tgt_embed.lut.weight", model.tgt_embed.lut.weight)
    head = get("generator.weight", model.generator.weight)
    share, tie = config.share_embeddings, config.tie_output
    # What save_pretrained writes per (share_encoder_decoder_embeddings, tie_word_embeddings);
    # without tie_word_embeddings transformers ties nothing, so each role has its own tensor.
    if share and tie:
        out["model.shared.weight"] = src
    elif share:
        out.update(
            {
                "model.shared.weight": src,
                "model.encoder.embed_tokens.weight": src.clone(),
                "model.decoder.embed_tokens.weight": src.clone(),
                "lm_head.weight": head,
            }
        )
    else:
        out.update(
            {"model.encoder.embed_tokens.weight": src, "model.decoder.embed_tokens.weight": tgt}
        )
        if not tie:
            out["lm_head.weight"] = head
    out["final_logits_bias"] = (
        model.get_buffer("final_logits_bias").detach().float().reshape(1, -1).contiguous().clone()
    )
    return out


# ---- configuration ----------------------------------------------------------------------------
def marian_config(config: TransformerConfig) -> dict[str, Any]:
    """config.json of the exported model (the keys MarianConfig.save_pretrained writes)."""
    return {
        "activation_dropout": config.dropout,  # nmtserve drops out the FFN's inner activations
        "activation_function": ACTIVATIONS[config.activation],
        "architectures": ["MarianMTModel"],
        "attention_dropout": config.dropout,  # ... and the attention probabilities, at the same rate
        "bos_token_id": config.bos_id,
        "d_model": config.d_model,
        "decoder_attention_heads": config.h,
        "decoder_ffn_dim": config.d_ff,
        "decoder_layerdrop": 0.0,
        "decoder_layers": config.decoder_layers,
        "decoder_start_token_id": config.bos_id,
        "decoder_vocab_size": config.tgt_vocab_size,
        "dropout": config.dropout,
        "dtype": "float32",
        "encoder_attention_heads": config.h,
        "encoder_ffn_dim": config.d_ff,
        "encoder_layerdrop": 0.0,
        "encoder_layers": config.encoder_layers,
        "eos_token_id": config.eos_id,
        "forced_eos_token_id": None,
        "init_std": 0.02,
        "is_decoder": False,
        "is_encoder_decoder": True,
        "max_position_embeddings": config.max_positions,
        "model_type": "marian",
        "pad_token_id": config.pad_id,
        "scale_embedding": config.scale_embedding,
        "share_encoder_decoder_embeddings": config.share_embeddings,
        "tie_word_embeddings": config.tie_output,
        "use_cache": True,
        "vocab_size": config.src_vocab_size,
    }


def generation_config(config: TransformerConfig) -> dict[str, Any]:
    """generation_config.json: generate's defaults set to what nmtserve's search does."""
    return {
        "bad_words_ids": [[config.pad_id]],
        "bos_token_id": config.bos_id,
        "decoder_start_token_id": config.bos_id,
        "eos_token_id": config.eos_id,
        "forced_eos_token_id": None,
        # generate's max_length counts the decoder start token: max_positions generated tokens.
        "max_length": config.max_positions + 1,
        "num_beams": 4,
        "pad_token_id": config.pad_id,
        "renormalize_logits": False,
    }


# ---- tokenizer --------------------------------------------------------------------------------
def _piece_table(sp: spm.SentencePieceProcessor) -> dict[str, int]:
    return {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}


def marian_vocab(
    tokenizer: Tokenizer, config: TransformerConfig, problems: list[str]
) -> dict[str, int]:
    """vocab.json: each piece -> its nmtserve id, with ``<unk>``/``</s>``/``<pad>`` at the special ids."""
    if tokenizer.vocab is not None:  # a vocabulary-mapped (imported Marian) checkpoint
        vocab = dict(tokenizer.vocab)
        unk_id = tokenizer.unk_id
    else:
        vocab = _piece_table(tokenizer.source)
        if tokenizer.target is not tokenizer.source and _piece_table(tokenizer.target) != vocab:
            problems.append(
                "the source and target sentencepiece models have different piece tables: "
                "MarianTokenizer (without separate_vocabs, which load_marian refuses) "
                "maps both sides through one vocab.json"
            )
        # sentencepiece gives unknown pieces its own unk id; MarianTokenizer gives them vocab["<unk>"].
        unk_id = tokenizer.source.unk_id()
    wanted = {"<unk>": unk_id, "</s>": config.eos_id, "<pad>": config.pad_id}
    for piece, special_id in wanted.items():
        if piece not in vocab:
            vocab[piece] = special_id  # an alias: the piece has another name in this model
        elif vocab[piece] != special_id:
            problems.append(
                f"the piece {piece} has id {vocab[piece]}, but MarianTokenizer and "
                f"load_marian need it to be the special id {special_id}"
            )
    top = max(vocab.values())
    if min(vocab.values()) < 0 or top >= min(config.src_vocab_size, config.tgt_vocab_size):
        problems.append(
            f"vocabulary ids up to {top} do not fit the embeddings "
            f"({config.src_vocab_size} source, {config.tgt_vocab_size} target rows)"
        )
    return dict(sorted(vocab.items(), key=lambda item: (item[1], item[0])))


def tokenizer_files(config: TransformerConfig, vocab: dict[str, int]) -> dict[str, dict[str, Any]]:
    """tokenizer_config.json (as MarianTokenizer.save_pretrained writes it) and special_tokens_map.json."""
    added = {
        str(vocab[piece]): {
            "content": piece,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for piece in sorted({"<pad>", "</s>", "<unk>"}, key=lambda p: vocab[p])
    }
    specials = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    return {
        "tokenizer_config.json": {
            "added_tokens_decoder": added,
            "backend": "custom",
            **specials,
            "model_max_length": config.max_positions,
            "separate_vocabs": False,
            "source_lang": None,
            "sp_model_kwargs": {},
            "target_lang": None,
            "tokenizer_class": "MarianTokenizer",
        },
        "special_tokens_map.json": specials,  # read by transformers 4.x
    }


# ---- the whole directory ----------------------------------------------------------------------
def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _probe_ids(config: TransformerConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """A small deterministic batch (source, decoder input) of ordinary tokens for the self-check."""
    specials = {config.pad_id, config.bos_id, config.eos_id}
    ordinary = [
        i for i in range(min(config.src_vocab_size, config.tgt_vocab_size)) if i not in specials
    ]
    n = max(1, min(12, config.max_positions - 1))
    pick = [ordinary[(7 * i) % len(ordinary)] for i in range(n)]
    short = n // 2
    src = torch.tensor(
        [pick + [config.eos_id], pick[:short] + [config.eos_id] + [config.pad_id] * (n - short)]
    )
    tgt = torch.tensor([[config.bos_id] + pick[::-1][: n - 1]] * 2)
    return src, tgt


def _verify(ckpt: Checkpoint, directory: Path, atol: float) -> float:
    """Import ``directory`` with load_marian and compare teacher-forced logits on a probe batch."""
    back = load_marian(directory)
    src, tgt = _probe_ids(ckpt.config)
    with torch.no_grad():
        want = torch.log_softmax(ckpt.model(src, tgt), dim=-1)
        got = torch.log_softmax(back.model(src, tgt), dim=-1)
    finite = torch.isfinite(want)
    diff = (want[finite] - got[finite]).abs().max().item() if finite.any() else 0.0
    if not torch.equal(finite, torch.isfinite(got)) or not math.isfinite(diff) or diff > atol:
        raise MarianExportError(
            f"{directory}: load_marian reads the export back with log-prob differences "
            f"up to {diff:.3g} (> {atol})"
        )
    return diff


def save_as_marian(
    ckpt: Checkpoint, directory: str | Path, *, verify: bool = True, verify_atol: float = 1e-3
) -> Path:
    """Write ``ckpt`` as a Hugging Face Marian directory and return its path.

    ``directory`` must not exist or be empty; files are written to a temporary sibling and moved
    into place when complete. ``verify``: import the result back with ``load_marian`` and check
    its log-probs against ``ckpt.model`` on a small probe batch (catches an export that
    ``load_marian`` or a Marian model would read differently).
    """
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise MarianExportError(f"{directory}: exists and is not an empty directory")
    config = ckpt.config
    problems = unsupported_for_marian(config)
    vocab = marian_vocab(ckpt.tokenizer, config, problems)
    if problems:
        raise MarianExportError(
            f"{ckpt.path}: cannot be written as a Marian directory:\n  - " + "\n  - ".join(problems)
        )
    weights = marian_state_dict(ckpt.model)

    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".marian-export-", dir=directory.parent) as tmp_name:
        tmp = Path(tmp_name) / "marian"
        tmp.mkdir()
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _write_json(tmp / "config.json", marian_config(config))
        _write_json(tmp / "generation_config.json", generation_config(config))
        _write_json(tmp / VOCAB, vocab)
        for name, data in tokenizer_files(config, vocab).items():
            _write_json(tmp / name, data)
        (tmp / SOURCE_SPM).write_bytes(ckpt.tokenizer.source.serialized_model_proto())
        (tmp / TARGET_SPM).write_bytes(ckpt.tokenizer.target.serialized_model_proto())
        if verify:
            try:
                _verify(ckpt, tmp, verify_atol)
            except CheckpointError as exc:  # MarianImportError: the importer refuses the export
                raise MarianExportError(f"load_marian refuses the export: {exc}") from exc
        if directory.exists():
            directory.rmdir()
        shutil.move(str(tmp), str(directory))
    return directory
