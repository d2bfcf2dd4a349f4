"""Models people build on ``torch.nn.Transformer`` (as PyTorch's tutorial "Language Translation
with nn.Transformer" does): a bare ``state_dict`` plus a short declaration, ``declaration.json``,
that says what the state dict cannot: which modules are the embeddings, the positions and the
output projection, the heads, the special ids, what a source sentence gets around its pieces,
the vocabulary and the tokenizer. docs/importers.md has the tutorial's model as the worked
example. A declaration::

    {
      "format": "torch.nn.Transformer",
      "state_dict": "model.pt",
      "transformer": "transformer",
      "source_embedding": "src_tok_emb.embedding",
      "target_embedding": "tgt_tok_emb.embedding",
      "positions": "positional_encoding.pos_embedding",
      "generator": "generator",
      "heads": 4,
      "special_ids": {"unk": 0, "pad": 1, "bos": 2, "eos": 3},
      "source": ["bos", "pieces", "eos"],
      "vocabulary": "vocab.json",
      "tokenizer": "spm.model"
    }

Optional keys: ``scale_embedding`` (true: token embeddings times sqrt(d_model), as the tutorial's
``TokenEmbedding``), ``activation`` ("relu", "gelu"), ``norm_first`` (false), ``layer_norm_eps``
(1e-5), ``target_vocabulary`` (a second list when the target side has its own),
``max_positions`` (the positions table's rows), ``decoding`` ({"length_penalty", "max_length_a",
"max_length_b", "min_length"}). ``positions`` is either a state-dict buffer (the table as the model
adds it: row p to position p) or {"sinusoid": "interleaved" | "concat", "max_positions": N}.

``nn.Transformer``'s layers are post-norm by default and each stack still ends with a LayerNorm
(``encoder.norm``, ``decoder.norm``): nmtserve's ``final_norm``. Attention packs Q, K, V in one
``in_proj_weight`` (3d, d), in that order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint, Decoding
from .base import (
    ImportFailure,
    ImportOptions,
    Parts,
    Problems,
    check_against_model,
    find_file,
    finish,
    load_pickled,
    make_config,
    place_embeddings,
)

FORMAT = "torch.nn.Transformer"
REQUIRED = ("state_dict", "transformer", "source_embedding", "target_embedding", "positions", "generator", "heads",
            "special_ids", "source", "vocabulary")
KNOWN = {*REQUIRED, "format", "tokenizer", "scale_embedding", "activation", "norm_first", "layer_norm_eps",
         "target_vocabulary", "max_positions", "decoding", "comment"}
SOURCE_PARTS = ("bos", "eos", "pieces")
ACTIVATIONS = ("relu", "gelu")


def _read_vocabulary(path: Path, problems: list[str], what: str) -> dict[str, int] | None:
    try:
        pieces = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{what} {path}: cannot be read as a JSON list of pieces ({exc})")
        return None
    if isinstance(pieces, dict):  # piece -> id
        return {str(k): int(v) for k, v in pieces.items()}
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        problems.append(f"{what} {path}: expected a JSON list of pieces in id order, or an object piece -> id")
        return None
    return {p: i for i, p in reversed(list(enumerate(pieces)))}  # a duplicated piece: the first id


def _attention(prefix: str, theirs: str, ours: str, weights: Mapping[str, torch.Tensor], d: int,
               state: dict[str, torch.Tensor], used: set[str], problems: list[str]) -> None:
    """nn.MultiheadAttention (packed in_proj) -> nmtserve's q/k/v/out projections."""
    w, b = f"{prefix}.{theirs}.in_proj_weight", f"{prefix}.{theirs}.in_proj_bias"
    if w not in weights:
        separate = f"{prefix}.{theirs}.q_proj_weight"
        problems.append(f"{w} is missing" + (" (separate q/k/v projections, kdim/vdim != d_model, are not supported)"
                                             if separate in weights else ""))
        return
    used.update((w, b))
    weight = weights[w]
    bias = weights.get(b, torch.zeros(3 * d))
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        state[f"{ours}.{name}.weight"] = weight[i * d:(i + 1) * d]
        state[f"{ours}.{name}.bias"] = bias[i * d:(i + 1) * d]
    for leaf in ("weight", "bias"):
        key = f"{prefix}.{theirs}.out_proj.{leaf}"
        if key in weights:
            state[f"{ours}.out_proj.{leaf}"] = weights[key]
            used.add(key)


def _layers(t: str, weights: Mapping[str, torch.Tensor], d: int, problems: list[str]
            ) -> tuple[dict[str, torch.Tensor], set[str], int, int]:
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    counts = {}
    for stack, ours, norms in (("encoder", "encoder_layers", ("sub_attn", "sub_ffn")),
                               ("decoder", "decoder_layers", ("sub_self", "sub_cross", "sub_ffn"))):
        n = 0
        while any(k.startswith(f"{t}.{stack}.layers.{n}.") for k in weights):
            p, o = f"{t}.{stack}.layers.{n}", f"{ours}.{n}"
            _attention(p, "self_attn", f"{o}.self_attn", weights, d, state, used, problems)
            if stack == "decoder":
                _attention(p, "multihead_attn", f"{o}.cross_attn", weights, d, state, used, problems)
            for theirs, mine in (("linear1", "ffn.fc1"), ("linear2", "ffn.fc2"),
                                 *((f"norm{i + 1}", f"{norm}.norm") for i, norm in enumerate(norms))):
                for leaf in ("weight", "bias"):
                    key = f"{p}.{theirs}.{leaf}"
                    if key in weights:
                        state[f"{o}.{mine}.{leaf}"] = weights[key]
                        used.add(key)
            n += 1
        counts[stack] = n
        for leaf in ("weight", "bias"):
            key = f"{t}.{stack}.norm.{leaf}"
            if key in weights:
                state[f"{stack}_norm.{leaf}"] = weights[key]
                used.add(key)
    return state, used, counts["encoder"], counts["decoder"]


def load(path: Path, options: ImportOptions) -> Checkpoint:
    path = Path(path)
    folder = path.parent
    problems = Problems(path, f"a {FORMAT} declaration")
    try:
        spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImportFailure(f"{path}: cannot be read as JSON ({exc})") from exc
    problems += [f"missing key {key!r}" for key in REQUIRED if key not in spec]
    problems += [f"unknown key {key!r} (known: {', '.join(sorted(KNOWN))})" for key in spec if key not in KNOWN]
    specials = spec.get("special_ids", {})
    if not isinstance(specials, dict) or set(specials) != {"unk", "pad", "bos", "eos"}:
        problems.append("special_ids must give exactly unk, pad, bos and eos")
        specials = {}
    source = spec.get("source", [])
    if not isinstance(source, list) or source.count("pieces") != 1 or any(s not in SOURCE_PARTS for s in source):
        problems.append(f"source must list 'pieces' once with 'bos' / 'eos' around it, e.g. [\"bos\", \"pieces\", "
                        f"\"eos\"]; got {source!r}")
        source = ["pieces", "eos"]
    activation = spec.get("activation", "relu")
    if activation not in ACTIVATIONS:
        problems.append(f"activation={activation!r}: supported {', '.join(ACTIVATIONS)}")
    problems.check()

    weights_file = folder / spec["state_dict"]
    held = load_pickled(weights_file) if weights_file.is_file() else None
    if held is None:
        problems.append(f"state_dict {weights_file} does not exist")
    elif not isinstance(held, Mapping) or not all(isinstance(v, torch.Tensor) for v in held.values()):
        problems.append(f"{weights_file}: expected a state dict (names -> tensors), as torch.save(model.state_dict()) writes")
    problems.check()
    weights = {k: v.float() for k, v in held.items()}
    t = spec["transformer"]
    src_key, tgt_key = f"{spec['source_embedding']}.weight", f"{spec['target_embedding']}.weight"
    gen_w, gen_b = f"{spec['generator']}.weight", f"{spec['generator']}.bias"
    for key in (src_key, tgt_key, gen_w):
        if key not in weights:
            problems.append(f"{key} is not in the state dict")
    problems.check()
    d = weights[src_key].shape[1]
    state, used, n_enc, n_dec = _layers(t, weights, d, problems)
    used |= {src_key, tgt_key, gen_w, gen_b}
    share, tie = place_embeddings({"encoder": weights[src_key], "decoder": weights[tgt_key], "output": weights[gen_w]},
                                  state)
    bias = weights.get(gen_b)
    if bias is not None and bias.ne(0).any():
        state["final_logits_bias"] = bias

    positions = spec["positions"]
    learned, layout, max_positions = False, "interleaved", int(spec.get("max_positions", 0) or 0)
    if isinstance(positions, str):
        if positions not in weights:
            problems.append(f"positions {positions!r} is not in the state dict")
        else:
            # The stored table, sinusoids or learned, is used as it is: row p is position p, bit
            # for bit what the model added (a float32 sinusoid table computed here would differ
            # from it by up to 1e-4 at its last rows).
            table = weights[positions].reshape(weights[positions].shape[0], -1)
            used.add(positions)
            learned = True
            state["src_embed.pos_lut.weight"] = state["tgt_embed.pos_lut.weight"] = table
            max_positions = max_positions or table.shape[0]
    elif isinstance(positions, dict) and positions.get("sinusoid") in ("interleaved", "concat"):
        layout = positions["sinusoid"]
        max_positions = max_positions or int(positions.get("max_positions", 5000))
    else:
        problems.append("positions must name a state-dict buffer or be {\"sinusoid\": \"interleaved\"|\"concat\", "
                        "\"max_positions\": N}")
    surplus = sorted(set(weights) - used)
    if surplus:
        problems.append("state-dict entries the declaration does not account for: " + ", ".join(surplus))

    vocab = _read_vocabulary(folder / spec["vocabulary"], problems, "vocabulary")
    target_vocab = (_read_vocabulary(folder / spec["target_vocabulary"], problems, "target_vocabulary")
                    if spec.get("target_vocabulary") else None)
    spm_file = find_file(spec.get("tokenizer"), folder, options.tokenizer, problems, "the sentencepiece model")
    config = make_config(
        problems, src_vocab_size=weights[src_key].shape[0], tgt_vocab_size=weights[tgt_key].shape[0], d_model=d,
        h=int(spec["heads"]), d_ff=state.get("encoder_layers.0.ffn.fc1.weight", torch.empty(2048, 1)).shape[0],
        encoder_layers=n_enc, decoder_layers=n_dec, dropout=0.0, activation=activation,
        pre_norm=bool(spec.get("norm_first", False)), final_norm=True,
        layer_norm_eps=float(spec.get("layer_norm_eps", 1e-5)), scale_embedding=bool(spec.get("scale_embedding", True)),
        position_layout=layout, learned_positions=learned, max_positions=max_positions or 5000,
        share_embeddings=share, tie_output=tie, final_logits_bias="final_logits_bias" in state,
        pad_id=specials["pad"], bos_id=specials["bos"], eos_id=specials["eos"], unk_id=specials["unk"],
    )
    if config is not None:
        check_against_model(config, state, {}, problems, f"a {FORMAT} of this config")
    problems.check()
    decoding = spec.get("decoding", {})
    ids = {"bos": config.bos_id, "eos": config.eos_id}
    cut = source.index("pieces")
    parts = Parts(
        config=config, state=state, source_spm=spm_file, target_spm=None, source_vocab=vocab,
        target_vocab=target_vocab,
        decoding=Decoding(rule="transformers", length_penalty=float(decoding.get("length_penalty", 1.0)),
                          max_length_a=float(decoding.get("max_length_a", 2.0)),
                          max_length_b=int(decoding.get("max_length_b", 10)),
                          min_length=int(decoding.get("min_length", 0))),
        source_prefix=tuple(ids[s] for s in source[:cut]), source_suffix=tuple(ids[s] for s in source[cut + 1:]),
    )
    return finish(path, parts, weights_file, FORMAT)
