"""OpenNMT-py (3.x) checkpoints and eole model directories: transformer encoder-decoders, read
without either toolkit. The two share their decoder and most of their format, so one module
holds both tables; docs/notes/toolkit-eole.md and toolkit-opennmt-py.md have the facts, with
the source lines they come from.

* OpenNMT-py: one ``.pt`` holding ``model`` and ``generator`` state dicts, ``vocab`` (``src`` /
  ``tgt`` piece lists, ``decoder_start_token``) and ``opt`` (an ``argparse.Namespace`` of every
  option). Pre-norm layers (the feed-forward block carries its own LayerNorm) and a final
  LayerNorm per stack, LayerNorm eps ``norm_eps`` (1e-6), sinusoid tables stored (``pe.pe``).
* eole: ``config.json`` (only the options that were set: eole's defaults apply to the rest),
  ``model.*.safetensors`` (tied tensors written once) and ``vocab.json``. Pre-norm decoder; the
  encoder pre-norm or post-norm (``encoder_layer_style: postnorm``), both with a final LayerNorm;
  eps ``norm_eps`` (1e-5).

Both: the source is the pieces alone (no BOS, no EOS); the decoder starts with
``decoder_start_token`` (``<s>``); ``<unk> <blank> <s> </s>`` are ids 0..3; token embeddings
times sqrt(d) plus sinusoids from position 0; no biases on attention and feed-forward unless
``add_qkvbias`` / ``add_ffnbias``, a bias on the output projection (``generator``). Their beam
search is nmtserve's "opennmt" rule with the "avg" length penalty (alpha 1) and a maximum length
of ``min(250, ratio * source pieces + 5)`` (ratio 1.25 in OpenNMT-py, 2 in eole). Their printed
score is nmtserve's score.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint, Decoding
from .base import (
    ImportOptions,
    NameRule,
    OptionRule,
    Parts,
    Problems,
    Vocabulary,
    broken_rules,
    check_against_model,
    fill_missing_biases,
    find_file,
    finish,
    load_pickled,
    make_config,
    map_names,
    place_embeddings,
    sinusoid_layout,
)

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "swish"}
POSITIONS = {"SinusoidalInterleaved": "interleaved", "SinusoidalConcat": "m2m100"}
# Rows of the position table an export keeps (the toolkits' tables hold 5000).
MAX_POSITIONS = 1024
# Transforms that leave a sentence's text as the served tokenizer sees it at translation time.
NEUTRAL_TRANSFORMS = {"sentencepiece", "filtertoolong", "onmt_tokenize"}
ATTENTION = {"linear_query": "q_proj", "linear_keys": "k_proj", "linear_values": "v_proj", "final_linear": "out_proj"}


def _attention_rules(theirs: str, ours: str) -> list[NameRule]:
    return [NameRule(rf"{theirs}\.{t}\.(weight|bias)", rf"{ours}.{o}.\1") for t, o in ATTENTION.items()]


def _is_transformer(v: Any) -> bool:
    return v == "transformer"


def _no(v: Any) -> bool:
    return not v


# Options both toolkits name alike, refused alike.
SHARED_RULES: tuple[OptionRule, ...] = (
    ("parallel_residual", False, _no, "sequential residual blocks"),
    ("shared_layer_norm", False, _no, "a LayerNorm per sublayer"),
    ("relative_positions_buckets", 0, lambda v: not v, "no relative position buckets"),
    ("sliding_window", 0, lambda v: not v, "full self-attention (a sliding window is not)"),
    ("num_experts", 0, lambda v: not v, "dense feed-forward layers (mixture of experts is not)"),
)


# ---- OpenNMT-py -------------------------------------------------------------------------------
ONMT_RULES: tuple[OptionRule, ...] = (
    ("model_task", "seq2seq", lambda v: v == "seq2seq", "a sequence-to-sequence model (not a language model)"),
    ("encoder_type", "rnn", _is_transformer, "a transformer encoder (rnn, brnn, cnn, mean, ggnn encoders are not)"),
    ("decoder_type", "rnn", _is_transformer, "a transformer decoder"),
    ("self_attn_type", "scaled-dot", lambda v: v in ("scaled-dot", "scaled-dot-flash"),
     "scaled dot-product self-attention (average attention networks are not)"),
    ("max_relative_positions", 0, lambda v: v == 0,
     "absolute sinusoidal positions (relative positions > 0, rotary -1 and ALiBi -2 are not supported)"),
    ("position_encoding", True, lambda v: v is True, "position encodings"),
    ("position_encoding_type", "SinusoidalInterleaved", lambda v: v in POSITIONS,
     f"sinusoidal positions ({', '.join(POSITIONS)})"),
    ("pos_ffn_activation_fn", "relu", lambda v: v in ACTIVATIONS,
     f"supported activations: {', '.join(ACTIVATIONS)} (gated ones need a third projection)"),
    ("layer_norm", "standard", lambda v: v == "standard", "standard LayerNorm (RMSNorm is not)"),
    ("num_kv", 0, lambda v: not v, "as many key/value heads as query heads (grouped-query attention is not)"),
    ("multiquery", False, _no, "one key/value head per query head (multi-query attention is not)"),
    *SHARED_RULES,
    ("copy_attn", False, _no, "no copy attention"),
    ("n_src_feats", 0, lambda v: not v, "no source features"),
    ("lora_layers", [], lambda v: not v, "no LoRA adapters (merge them into the weights first)"),
    ("quant_layers", [], lambda v: not v, "unquantized weights"),
)


def _onmt_name_rules() -> list[NameRule]:
    rules = []
    for stack, ours in (("encoder.transformer", "encoder_layers"), ("decoder.transformer_layers", "decoder_layers")):
        layer = rf"{stack}\.(\d+)"
        rules += [NameRule(rf"{layer}\.self_attn\.{t}\.(weight|bias)", rf"{ours}.\1.self_attn.{o}.\2")
                  for t, o in ATTENTION.items()]
        rules += [NameRule(rf"{layer}\.feed_forward\.w_1\.(weight|bias)", rf"{ours}.\1.ffn.fc1.\2"),
                  NameRule(rf"{layer}\.feed_forward\.w_2\.(weight|bias)", rf"{ours}.\1.ffn.fc2.\2"),
                  NameRule(rf"{layer}\.feed_forward\.layer_norm\.(weight|bias)", rf"{ours}.\1.sub_ffn.norm.\2")]
    rules += [NameRule(r"encoder\.transformer\.(\d+)\.layer_norm\.(weight|bias)", r"encoder_layers.\1.sub_attn.norm.\2"),
              NameRule(r"decoder\.transformer_layers\.(\d+)\.layer_norm_1\.(weight|bias)", r"decoder_layers.\1.sub_self.norm.\2"),
              NameRule(r"decoder\.transformer_layers\.(\d+)\.layer_norm_2\.(weight|bias)", r"decoder_layers.\1.sub_cross.norm.\2"),
              NameRule(r"encoder\.layer_norm\.(weight|bias)", r"encoder_norm.\1"),
              NameRule(r"decoder\.layer_norm\.(weight|bias)", r"decoder_norm.\1")]
    rules += [NameRule(rf"decoder\.transformer_layers\.(\d+)\.context_attn\.{t}\.(weight|bias)",
                       rf"decoder_layers.\1.cross_attn.{o}.\2") for t, o in ATTENTION.items()]
    return rules


ONMT_EMBEDDINGS = {"encoder": "encoder.embeddings.make_embedding.emb_luts.0.weight",
                   "decoder": "decoder.embeddings.make_embedding.emb_luts.0.weight"}
ONMT_POSITIONS = ("encoder.embeddings.make_embedding.pe.pe", "decoder.embeddings.make_embedding.pe.pe")


def _transform_problems(transforms: Any, problems: list[str]) -> None:
    changing = sorted(set(transforms or ()) - NEUTRAL_TRANSFORMS)
    if changing:
        problems.append(f"transforms {', '.join(changing)} change the text at translation time; nmtserve's tokenizer "
                        "applies sentencepiece only (retrain without them, or translate text they already applied)")


def _vocabulary(pieces: Any, specials: Mapping[str, str], side: str, problems: list[str]) -> Vocabulary | None:
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        problems.append(f"the {side} vocabulary is not a list of pieces (an OpenNMT-py 2.x checkpoint keeps "
                        "torchtext fields there: convert it with OpenNMT-py 3.x's `onmt_release_model` first)")
        return None
    return Vocabulary(pieces, pad=specials.get("pad_token", "<blank>"), bos=specials.get("bos_token", "<s>"),
                      eos=specials.get("eos_token", "</s>"), unk=specials.get("unk_token", "<unk>"))


def _positions(weights: Mapping[str, torch.Tensor], keys: tuple[str, ...], declared: str, d_model: int,
               problems: list[str]) -> str:
    """The sinusoid layout: the declared one, checked against a stored table where there is one."""
    layout = POSITIONS.get(declared, "interleaved")
    for key in keys:
        if key in weights:
            found = sinusoid_layout(weights[key][:MAX_POSITIONS], d_model)
            if found != layout:
                problems.append(f"{key} is not the {declared} sinusoid table the options declare")
    return layout


def _assemble(path: Path, toolkit: str, problems: Problems, *, weights: dict[str, torch.Tensor],
              rules: list[NameRule], ignored: tuple[str, ...], tables: dict[str, torch.Tensor | None],
              generator_bias: torch.Tensor | None, src: Vocabulary | None, tgt: Vocabulary | None,
              decoder_start: str, layout: str, heads: int, d_ff: int, layers: tuple[int, int], activation: str,
              eps: float, encoder_pre: bool, spm: tuple[str | None, str | None], options: ImportOptions,
              ratio: float) -> Checkpoint:
    state, origin = map_names(weights, rules, ignored, problems)
    embeddings = {role: t for role, t in tables.items() if t is not None}
    for role in tables.keys() - embeddings.keys():
        problems.append(f"no {role} embedding table")
    share, tie = place_embeddings(embeddings, state)
    if generator_bias is not None and generator_bias.ne(0).any():
        state["final_logits_bias"] = generator_bias
    src_ids = src.ids(problems, "source") if src else None
    tgt_ids = tgt.ids(problems, "target") if tgt else None
    if src and tgt:
        for role in ("pad", "eos", "unk"):
            if src.special(role) != tgt.special(role):
                problems.append(f"the source and target vocabularies disagree on the {role} id")
        if decoder_start not in (tgt_ids or {}):
            problems.append(f"the decoder start token {decoder_start!r} is not in the target vocabulary")
        for table, vocab, side in ((tables["encoder"], src, "source"), (tables["decoder"], tgt, "target")):
            if table is not None and table.shape[0] != len(vocab.pieces):
                problems.append(f"the {side} vocabulary has {len(vocab.pieces)} pieces but its embedding table "
                                f"{table.shape[0]} rows")
    problems.check()
    d_model = tables["encoder"].shape[1]
    config = make_config(
        problems, src_vocab_size=tables["encoder"].shape[0], tgt_vocab_size=tables["decoder"].shape[0],
        d_model=d_model, h=heads, d_ff=d_ff, encoder_layers=layers[0], decoder_layers=layers[1], dropout=0.0,
        activation=activation, pre_norm=True, encoder_pre_norm=encoder_pre, final_norm=True, layer_norm_eps=eps,
        scale_embedding=True, position_layout=layout, max_positions=MAX_POSITIONS,
        share_embeddings=share, tie_output=tie, final_logits_bias="final_logits_bias" in state,
        pad_id=src.special("pad"), bos_id=tgt_ids[decoder_start], eos_id=tgt.special("eos"), unk_id=tgt.special("unk"),
    )
    problems.check()
    added = fill_missing_biases(config, state)
    check_against_model(config, state, origin, problems, f"a {toolkit} Transformer of this config")
    source_spm = find_file(spm[0], path if path.is_dir() else path.parent, options.tokenizer, problems,
                           "the source sentencepiece model")
    target_spm = None
    if options.tokenizer is None and spm[1] and spm[1] != spm[0]:
        target_spm = find_file(spm[1], path if path.is_dir() else path.parent, None, problems,
                               "the target sentencepiece model")
    problems.check()
    parts = Parts(
        config=config, state=state, source_spm=source_spm, target_spm=target_spm, source_vocab=src_ids,
        target_vocab=None if tgt_ids == src_ids else tgt_ids,
        decoding=Decoding(rule="opennmt", length_penalty=1.0, max_length_a=ratio, max_length_b=5, min_length=0,
                          max_length=250),
        source_suffix=(),
        notes=[f"zero biases for the layers built without them: {len(added)} tensors"] if added else [],
    )
    return finish(path, parts, path, toolkit)


def load_opennmt_py(path: Path, options: ImportOptions, held: Mapping[str, Any] | None = None) -> Checkpoint:
    path = Path(path)
    held = held if held is not None else load_pickled(path)
    problems = Problems(path, "an OpenNMT-py transformer checkpoint")
    opt_ns = held.get("opt")
    opt = vars(opt_ns) if isinstance(opt_ns, argparse.Namespace) else dict(opt_ns or {})
    problems += broken_rules(ONMT_RULES, opt)
    problems.check()  # not a transformer: nothing below applies
    _transform_problems(opt.get("transforms"), problems)
    weights = {k: v.float() for k, v in held["model"].items() if isinstance(v, torch.Tensor)}
    generator = {re.sub(r"^0\.", "", k): v.float() for k, v in (held.get("generator") or {}).items()}
    vocab = held.get("vocab") or {}
    specials = {"unk_token": "<unk>", "pad_token": "<blank>", "bos_token": "<s>", "eos_token": "</s>"}
    src = _vocabulary(vocab.get("src"), specials, "source", problems)
    tgt = _vocabulary(vocab.get("tgt"), specials, "target", problems)
    d_model = int(opt.get("hidden_size") or opt.get("rnn_size") or weights[ONMT_EMBEDDINGS["encoder"]].shape[1])
    layout = _positions(weights, ONMT_POSITIONS, opt.get("position_encoding_type", "SinusoidalInterleaved"), d_model,
                        problems)
    subword = (opt.get("src_subword_model"), opt.get("tgt_subword_model"))
    if opt.get("src_subword_type") not in (None, "none", "sentencepiece") and "onmt_tokenize" in (opt.get("transforms") or ()):
        problems.append(f"src_subword_type={opt['src_subword_type']!r}: only sentencepiece is served")
    enc_layers = int(opt.get("enc_layers") if opt.get("enc_layers", -1) > 0 else opt.get("layers"))
    dec_layers = int(opt.get("dec_layers") if opt.get("dec_layers", -1) > 0 else opt.get("layers"))
    return _assemble(
        path, "OpenNMT-py", problems, weights=weights, rules=_onmt_name_rules(),
        ignored=(*ONMT_EMBEDDINGS.values(), *(re.escape(k) for k in ONMT_POSITIONS)),
        tables={"encoder": weights.get(ONMT_EMBEDDINGS["encoder"]), "decoder": weights.get(ONMT_EMBEDDINGS["decoder"]),
                "output": generator.get("weight")},
        generator_bias=generator.get("bias"), src=src, tgt=tgt,
        decoder_start=vocab.get("decoder_start_token", opt.get("decoder_start_token", "<s>")), layout=layout,
        heads=int(opt["heads"]), d_ff=int(opt["transformer_ff"]), layers=(enc_layers, dec_layers),
        activation=ACTIVATIONS.get(opt.get("pos_ffn_activation_fn", "relu"), "relu"),
        eps=float(opt.get("norm_eps", 1e-6)), encoder_pre=True, spm=subword, options=options,
        ratio=1.25,
    )


# ---- eole ------------------------------------------------------------------------------------
# eole's defaults (config/models.py, 0.6.4): config.json holds only what was set.
EOLE_DEFAULTS: dict[str, Any] = {
    "hidden_size": 512, "heads": 8, "layers": 2, "transformer_ff": 2048, "layer_norm": "standard", "norm_eps": 1e-5,
    "mlp_activation_fn": "relu", "generator_bias": True, "position_encoding_type": "SinusoidalInterleaved",
    "encoder_layer_style": "standard", "final_encoder_layer_norm": True,
}
EOLE_RULES: tuple[OptionRule, ...] = (
    ("architecture", "transformer", lambda v: v in (None, "transformer"), "an encoder-decoder transformer"),
    ("encoder_type", "transformer", lambda v: v in (None, "transformer"), "a transformer encoder"),
    ("decoder_type", "transformer", lambda v: v in (None, "transformer"), "a transformer decoder"),
    ("layer_norm", "standard", lambda v: v in ("standard", "standardFP32"), "standard LayerNorm (RMSNorm is not)"),
    ("mlp_activation_fn", "relu", lambda v: v in ACTIVATIONS,
     f"supported activations: {', '.join(ACTIVATIONS)} (gated ones need a third projection)"),
    ("position_encoding_type", "SinusoidalInterleaved", lambda v: v in POSITIONS,
     f"sinusoidal positions ({', '.join(POSITIONS)}; Relative, Rotary, Alibi and Learned are not supported)"),
    ("heads_kv", None, lambda v: v is None, "as many key/value heads as query heads"),
    ("head_dim", None, lambda v: v is None, "head size hidden_size / heads"),
    ("attn_scaling", None, lambda v: v is None, "attention scaled by 1/sqrt(head size)"),
    *SHARED_RULES,
    ("ffn_layernorm", False, _no, "no LayerNorm inside the feed-forward block"),
    ("query_norm", False, _no, "no query norm"),
    ("key_norm", False, _no, "no key norm"),
    ("embedding_layer_norm", False, _no, "no LayerNorm on the embeddings"),
    ("normalize", False, _no, "embeddings scaled once (eole's `normalize` scales them again)"),
    ("position_shift", 0, lambda v: not v, "positions from 0"),
    ("encoder_layer_style", "standard", lambda v: v in ("standard", "postnorm"), "a pre-norm or post-norm encoder"),
    ("final_encoder_layer_norm", True, lambda v: v is True, "a final LayerNorm after the encoder"),
)


def _eole_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """The model's options, sub-configs over the model level over eole's defaults."""
    model = dict(config.get("model") or {})
    merged = {**EOLE_DEFAULTS, **{k: v for k, v in model.items() if not isinstance(v, dict)}}
    for part in ("embeddings", "encoder", "decoder"):
        merged.update({k: v for k, v in (model.get(part) or {}).items() if v is not None})
    return merged


def _eole_name_rules(encoder_pre: bool) -> list[NameRule]:
    enc, dec = r"encoder\.transformer_layers\.(\d+)", r"decoder\.transformer_layers\.(\d+)"
    attn_norm, ffn_norm = ("input_layernorm", "post_attention_layernorm") if encoder_pre else \
        ("attention_layer_norm", "output_layer_norm")
    rules = [NameRule(rf"{enc}\.{attn_norm}\.(weight|bias)", r"encoder_layers.\1.sub_attn.norm.\2"),
             NameRule(rf"{enc}\.{ffn_norm}\.(weight|bias)", r"encoder_layers.\1.sub_ffn.norm.\2"),
             NameRule(rf"{dec}\.input_layernorm\.(weight|bias)", r"decoder_layers.\1.sub_self.norm.\2"),
             NameRule(rf"{dec}\.precontext_layernorm\.(weight|bias)", r"decoder_layers.\1.sub_cross.norm.\2"),
             NameRule(rf"{dec}\.post_attention_layernorm\.(weight|bias)", r"decoder_layers.\1.sub_ffn.norm.\2"),
             NameRule(r"encoder\.layer_norm\.(weight|bias)", r"encoder_norm.\1"),
             NameRule(r"decoder\.layer_norm\.(weight|bias)", r"decoder_norm.\1")]
    for layer, ours in ((enc, "encoder_layers"), (dec, "decoder_layers")):
        rules += [NameRule(rf"{layer}\.self_attn\.{t}\.(weight|bias)", rf"{ours}.\1.self_attn.{o}.\2")
                  for t, o in ATTENTION.items()]
        rules += [NameRule(rf"{layer}\.mlp\.gate_up_proj\.(weight|bias)", rf"{ours}.\1.ffn.fc1.\2"),
                  NameRule(rf"{layer}\.mlp\.down_proj\.(weight|bias)", rf"{ours}.\1.ffn.fc2.\2")]
    rules += [NameRule(rf"{dec}\.context_attn\.{t}\.(weight|bias)", rf"decoder_layers.\1.cross_attn.{o}.\2")
              for t, o in ATTENTION.items()]
    return rules


def load_eole(path: Path, options: ImportOptions) -> Checkpoint:
    from safetensors.torch import load_file

    path = Path(path)
    problems = Problems(path, "an eole transformer model")
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    opt = _eole_options(config)
    problems += broken_rules(EOLE_RULES, opt)
    problems.check()
    _transform_problems(config.get("transforms"), problems)
    weights: dict[str, torch.Tensor] = {}
    shards = sorted(path.glob("model.*.safetensors"))
    for shard in shards:
        weights.update({k: v.float() for k, v in load_file(str(shard)).items()})
    for key, tensor in weights.items():
        if key.endswith(".layer_scalar") and not torch.all(tensor == 1):
            problems.append(f"{key} is not 1 (a scaled decoder layer)")
    try:
        vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"vocab.json: cannot be read ({exc})")
        vocab = {}
    specials = vocab.get("specials") or {}
    src = _vocabulary(vocab.get("src"), specials, "source", problems)
    tgt = _vocabulary(vocab.get("tgt"), specials, "target", problems)
    d_model = int(opt["hidden_size"])
    layout = _positions(weights, ("src_emb.pe.pe", "tgt_emb.pe.pe"), opt["position_encoding_type"], d_model, problems)
    encoder_pre = opt["encoder_layer_style"] == "standard"
    src_table = weights.get("src_emb.embeddings.weight")
    dec_table = weights.get("tgt_emb.embeddings.weight", src_table if opt.get("share_embeddings") else None)
    out_table = weights.get("generator.weight", dec_table if opt.get("share_decoder_embeddings") else None)
    subwords = ((config.get("transforms_configs") or {}).get("sentencepiece") or {})

    def model_path(name: str | None) -> str | None:
        return name.replace("${MODEL_PATH}", str(path)) if name else None

    model = config.get("model") or {}
    layers = (int((model.get("encoder") or {}).get("layers") or opt["layers"]),
              int((model.get("decoder") or {}).get("layers") or opt["layers"]))
    return _assemble(
        path, "eole", problems, weights=weights, rules=_eole_name_rules(encoder_pre),
        ignored=(r"(src|tgt)_emb\.embeddings\.weight", r"(src|tgt)_emb\.pe\.pe", r"generator\.(weight|bias)",
                 r"decoder\.transformer_layers\.\d+\.layer_scalar"),
        tables={"encoder": src_table, "decoder": dec_table, "output": out_table},
        generator_bias=weights.get("generator.bias"), src=src, tgt=tgt,
        decoder_start=vocab.get("decoder_start_token", "<s>"), layout=layout, heads=int(opt["heads"]),
        d_ff=int(opt["transformer_ff"]), layers=layers,
        activation=ACTIVATIONS.get(opt["mlp_activation_fn"], "relu"), eps=float(opt["norm_eps"]),
        encoder_pre=encoder_pre,
        spm=(model_path(subwords.get("src_subword_model")), model_path(subwords.get("tgt_subword_model"))),
        options=options, ratio=2.0,
    )


def load(path: Path, options: ImportOptions, held: Mapping[str, Any] | None = None) -> Checkpoint:
    """The registry's entry for OpenNMT-py."""
    return load_opennmt_py(path, options, held)
