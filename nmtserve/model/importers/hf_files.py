"""What the Hugging Face importers (Marian, M2M100 / NLLB-200, mBART-50) share: reading a
model directory (config, generation config, weights in any of the layouts ``from_pretrained``
reads) and the names transformers gives the layers and embeddings of these BART-style models.

``transformers`` is not imported: it is only a test dependency. Pickled ``.bin`` weights are read
with ``torch.load(weights_only=True)``, which refuses to run code.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from .base import ImportFailure

log = logging.getLogger(__name__)

# Looked for in this order, as ``from_pretrained`` does.
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
)


# transformers' ACT2FN name -> nmtserve activation. "gelu" is the exact (erf) GELU in both.
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}


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
        raise ImportFailure(f"{path}: expected a flat state dict of tensors")
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


def _log_generation_differences(files: Any, pad_id: int) -> None:
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
