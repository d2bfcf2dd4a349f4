"""fairseq ``transformer``-family checkpoints (``transformer``, ``transformer_wmt_en_de``,
``transformer_vaswani_wmt_en_de_big``, ``transformer_iwslt_de_en``, ``transformer_align``...),
read without fairseq.

What a checkpoint is: a ``.pt`` whose ``cfg["model"]`` (fairseq >= 0.10; ``args`` before) is an
``argparse.Namespace`` of the architecture, and whose ``model`` is the state dict; the
vocabularies are ``dict.<src>.txt`` / ``dict.<tgt>.txt`` beside it (``<s> <pad> </s> <unk>`` first,
ids 0..3, then one piece and its count a line). What follows from fairseq's code (0.12):

* the source is the pieces and EOS; the decoder starts with EOS; positions are sinusoids in
  [sin | cos] halves with frequencies 10000^(-i / (d/2 - 1)), numbered from ``padding_idx + 1``
  (nmtserve's "m2m100" layout, ``position_offset = pad + 1``), never stored; or learned tables
  (``encoder_learned_pos``) of ``max_positions + pad + 1`` rows;
* post-norm layers by default, pre-norm with ``encoder/decoder_normalize_before`` and then a final
  LayerNorm per stack; ``layernorm_embedding``; embeddings scaled by sqrt(d) unless
  ``no_scale_embedding``; LayerNorm eps 1e-5;
* the output projection is the decoder's table with ``share_decoder_input_output_embed`` (or
  ``share_all_embeddings``), else ``decoder.output_projection.weight``; no bias;
* its beam search is ``SequenceGenerator``: nmtserve's "fairseq" rule, lenpen 1, max_len_a 0,
  max_len_b 200 (generated tokens before the forced EOS: 201 with it), min_len 1.

fairseq-generate prints scores as base-2 logs: nmtserve's score (natural log) is fairseq's
printed H score times ln 2.
"""

from __future__ import annotations

import argparse
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
    find_file,
    finish,
    load_pickled,
    make_config,
    map_names,
    place_embeddings,
)

TOOLKIT = "fairseq"
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: ids 0..3
TRANSFORMER_ARCHS = ("transformer", "transformer_wmt_en_de", "transformer_vaswani_wmt_en_de_big",
                     "transformer_vaswani_wmt_en_fr_big", "transformer_wmt_en_de_big", "transformer_wmt_en_de_big_t2t",
                     "transformer_iwslt_de_en", "transformer_align", "transformer_wmt_en_de_big_align",
                     "transformer_tiny")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}

# (option, value when absent, supported, what a different value needs)
OPTION_RULES: tuple[OptionRule, ...] = (
    ("arch", None, lambda v: v in TRANSFORMER_ARCHS,
     "only fairseq's transformer encoder-decoder family is supported (" + ", ".join(TRANSFORMER_ARCHS) + ")"),
    ("activation_fn", "relu", lambda v: v in ACTIVATIONS, f"supported activations: {', '.join(ACTIVATIONS)} "
     "(gelu_fast / gelu_accurate are tanh approximations nmtserve does not have)"),
    ("adaptive_softmax_cutoff", None, lambda v: not v, "an adaptive softmax output layer"),
    ("tie_adaptive_weights", False, lambda v: not v, "adaptive input/softmax weights"),
    ("adaptive_input", False, lambda v: not v, "adaptive input embeddings"),
    ("cross_self_attention", False, lambda v: not v, "cross+self-attention (decoder attends to the source in self-attention)"),
    ("layer_wise_attention", False, lambda v: not v, "layer-wise attention"),
    ("no_token_positional_embeddings", False, lambda v: not v, "a model without positions"),
    ("encoder_layers_to_keep", None, lambda v: not v, "pruned encoder layers (layers_to_keep)"),
    ("decoder_layers_to_keep", None, lambda v: not v, "pruned decoder layers (layers_to_keep)"),
    ("no_decoder_final_norm", False, lambda v: not v, "a pre-norm decoder without its final LayerNorm"),
    ("quant_noise_pq", 0, lambda v: not v, "quantization noise (product quantized weights)"),
    ("char_inputs", False, lambda v: not v, "character inputs"),
)


def _options(held: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """The architecture's options as a dict: ``cfg["model"]`` (a Namespace or a dict), or ``args``."""
    cfg = held.get("cfg")
    model = cfg.get("model") if isinstance(cfg, Mapping) else None
    if model is None:
        model = held.get("args")
    if isinstance(model, argparse.Namespace):
        return vars(model)
    if isinstance(model, Mapping):
        return dict(model)
    problems.append("the checkpoint has no model configuration (cfg['model'] or args)")
    return {}


def _task(held: Mapping[str, Any]) -> dict[str, Any]:
    cfg = held.get("cfg")
    task = cfg.get("task") if isinstance(cfg, Mapping) else None
    if isinstance(task, argparse.Namespace):
        return vars(task)
    return dict(task) if isinstance(task, Mapping) else {}


def _bpe(held: Mapping[str, Any]) -> dict[str, Any]:
    cfg = held.get("cfg")
    bpe = cfg.get("bpe") if isinstance(cfg, Mapping) else None
    if isinstance(bpe, argparse.Namespace):
        return vars(bpe)
    return dict(bpe) if isinstance(bpe, Mapping) else {}


def read_dictionary(path: Path, problems: list[str]) -> Vocabulary | None:
    """A fairseq ``dict.txt``: the four specials, then a piece (and its count) a line."""
    if not path.is_file():
        problems.append(f"{path.name} is missing (fairseq keeps the vocabulary beside the checkpoint)")
        return None
    pieces = list(SPECIALS)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.rstrip().rsplit(" ", 1)
        if len(fields) == 2 and fields[1] == "#fairseq:overwrite":
            fields = fields[0].rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            problems.append(f"{path.name} line {number}: expected '<piece> <count>', got {line!r}")
            return None
        pieces.append(fields[0])
    return Vocabulary(pieces, pad="<pad>", bos="<s>", eos="</s>", unk="<unk>")


def _dictionaries(directory: Path, task: Mapping[str, Any], problems: list[str]) -> tuple[Path | None, Path | None]:
    src, tgt = task.get("source_lang"), task.get("target_lang")
    if src and tgt:
        return directory / f"dict.{src}.txt", directory / f"dict.{tgt}.txt"
    found = sorted(directory.glob("dict.*.txt"))
    if len(found) == 2:
        return found[0], found[1]  # no languages recorded: alphabetical, as a guess is not made
    problems.append(f"cannot tell the source and target dictionaries apart (task has no source_lang/target_lang; "
                    f"found {', '.join(p.name for p in found) or 'none'})")
    return None, None


def _name_rules() -> list[NameRule]:
    layer = {
        "encoder": {"self_attn": "self_attn", "self_attn_layer_norm": "sub_attn.norm", "fc1": "ffn.fc1",
                    "fc2": "ffn.fc2", "final_layer_norm": "sub_ffn.norm"},
        "decoder": {"self_attn": "self_attn", "self_attn_layer_norm": "sub_self.norm", "encoder_attn": "cross_attn",
                    "encoder_attn_layer_norm": "sub_cross.norm", "fc1": "ffn.fc1", "fc2": "ffn.fc2",
                    "final_layer_norm": "sub_ffn.norm"},
    }
    rules = [NameRule(rf"{stack}\.layers\.(\d+)\.{theirs}\.(.+)", rf"{stack}_layers.\1.{mine}.\2")
             for stack, table in layer.items() for theirs, mine in table.items()]
    for stack, side in (("encoder", "src"), ("decoder", "tgt")):
        rules += [NameRule(rf"{stack}\.layer_norm\.(weight|bias)", rf"{stack}_norm.\1"),
                  NameRule(rf"{stack}\.layernorm_embedding\.(weight|bias)", rf"{side}_embed.norm.\1"),
                  NameRule(rf"{stack}\.embed_positions\.weight", rf"{side}_embed.pos_lut.weight")]
    return rules


# fairseq's bookkeeping buffers: version counters and the sinusoid module's dtype holder.
IGNORED = (r"(encoder|decoder)\.version", r"(encoder|decoder)\.embed_positions\._float_tensor",
           r"(encoder|decoder)\.embed_tokens\.weight", r"decoder\.output_projection\.weight")


def load(path: Path, options: ImportOptions, held: Mapping[str, Any] | None = None) -> Checkpoint:
    path = Path(path)
    held = held if held is not None else load_pickled(path)
    problems = Problems(path, "a fairseq transformer checkpoint")
    opt = _options(held, problems)
    problems += broken_rules(OPTION_RULES, opt)
    weights = held.get("model")
    if not isinstance(weights, Mapping):
        problems.append("no model state dict")
        weights = {}
    problems.check()  # not a transformer: nothing below applies

    d_model = int(opt.get("encoder_embed_dim", 512))
    for key in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if opt.get(key) not in (None, d_model):
            problems.append(f"{key}={opt[key]} != encoder_embed_dim={d_model} (one model width)")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim")):
        if opt.get(enc) != opt.get(dec):
            problems.append(f"{enc}={opt.get(enc)} != {dec}={opt.get(dec)} (one value for both stacks)")
    pre = bool(opt.get("encoder_normalize_before", False))
    if bool(opt.get("decoder_normalize_before", False)) != pre:
        problems.append("encoder_normalize_before and decoder_normalize_before differ (one norm placement)")
    learned = bool(opt.get("encoder_learned_pos", False))
    if bool(opt.get("decoder_learned_pos", False)) != learned:
        problems.append("encoder_learned_pos and decoder_learned_pos differ")
    max_src, max_tgt = int(opt.get("max_source_positions", 1024)), int(opt.get("max_target_positions", 1024))

    task = _task(held)
    src_dict_file, tgt_dict_file = _dictionaries(path.parent, task, problems)
    src_vocab = read_dictionary(src_dict_file, problems) if src_dict_file else None
    tgt_vocab = read_dictionary(tgt_dict_file, problems) if tgt_dict_file else None

    weights = {k: v.float() for k, v in weights.items() if isinstance(v, torch.Tensor)}
    state, origin = map_names(weights, _name_rules(), IGNORED, problems)
    enc_table = weights.get("encoder.embed_tokens.weight")
    dec_table = weights.get("decoder.embed_tokens.weight")
    out_table = weights.get("decoder.output_projection.weight", dec_table if opt.get("share_decoder_input_output_embed")
                            or opt.get("share_all_embeddings") else None)
    embeddings = {}
    for role, table, name in (("encoder", enc_table, "encoder.embed_tokens.weight"),
                              ("decoder", dec_table, "decoder.embed_tokens.weight"),
                              ("output", out_table, "decoder.output_projection.weight")):
        if table is None:
            problems.append(f"missing tensor {name}")
        else:
            embeddings[role] = table
    share, tie = place_embeddings(embeddings, state)
    for table, vocab, side in ((enc_table, src_vocab, "source"), (dec_table, tgt_vocab, "target")):
        if table is not None and vocab is not None and table.shape[0] != len(vocab.pieces):
            problems.append(f"the {side} dictionary has {len(vocab.pieces)} entries but the model's table "
                            f"{table.shape[0]} rows")
    pad = 1
    if learned and "src_embed.pos_lut.weight" in state:
        rows = state["src_embed.pos_lut.weight"].shape[0]
        if rows != state.get("tgt_embed.pos_lut.weight", torch.empty(rows)).shape[0]:
            problems.append("the encoder's and decoder's learned position tables differ in size")
        max_positions = rows - (pad + 1)
    else:
        max_positions = min(max_src, max_tgt)
    if src_vocab is not None and tgt_vocab is not None:
        for role in ("pad", "bos", "eos", "unk"):
            if src_vocab.special(role) != tgt_vocab.special(role):
                problems.append(f"the dictionaries disagree on the {role} id")

    config = make_config(
        problems,
        src_vocab_size=enc_table.shape[0] if enc_table is not None else 1,
        tgt_vocab_size=dec_table.shape[0] if dec_table is not None else 1,
        d_model=d_model, h=int(opt.get("encoder_attention_heads", 8)), d_ff=int(opt.get("encoder_ffn_embed_dim", 2048)),
        encoder_layers=int(opt.get("encoder_layers", 6)), decoder_layers=int(opt.get("decoder_layers", 6)),
        dropout=0.0, activation=ACTIVATIONS.get(opt.get("activation_fn", "relu"), "relu"), pre_norm=pre,
        layer_norm_eps=1e-5, scale_embedding=not opt.get("no_scale_embedding", False),
        position_layout="m2m100", learned_positions=learned, position_offset=pad + 1, max_positions=max_positions,
        embedding_norm=bool(opt.get("layernorm_embedding", False)), share_embeddings=share, tie_output=tie,
        pad_id=pad, bos_id=2, eos_id=2, unk_id=3,  # the decoder starts with EOS
    )
    if config is not None:
        check_against_model(config, state, origin, problems, f"a {TOOLKIT} Transformer of this config")
    spm_name = _bpe(held).get("sentencepiece_model")
    bpe = _bpe(held).get("_name") or (_bpe(held) and "?")
    if bpe and bpe != "sentencepiece" and options.tokenizer is None:
        problems.append(f"bpe={bpe!r}: only sentencepiece is served; give a sentencepiece model with --tokenizer")
    spm_file = find_file(spm_name, path.parent, options.tokenizer, problems, "the sentencepiece model")
    problems.check()
    source_ids, target_ids = src_vocab.ids(problems, "source"), tgt_vocab.ids(problems, "target")
    parts = Parts(
        config=config, state=state, source_spm=spm_file, target_spm=None,
        source_vocab=source_ids, target_vocab=None if target_ids == source_ids else target_ids,
        decoding=Decoding(rule="fairseq", length_penalty=1.0, max_length_a=0.0, max_length_b=201, min_length=1),
    )
    problems.check()
    return finish(path, parts, path, f"fairseq {opt.get('arch')}")

