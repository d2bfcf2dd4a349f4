"""The steps every importer shares, as CTranslate2's converters share theirs: read the files ->
check every option (all problems collected, one error naming them all) -> map the tensor names
(a table per toolkit) -> place the embeddings -> the vocabulary and the tokenizer -> the
toolkit's decoding defaults -> a strict load into nmtserve's ``Transformer``.

A toolkit's importer is a thin table over these: which option values it cannot express
(``OptionRule``), how its tensor names map to nmtserve's (``NameRule``), and the few facts of
its format (special ids, what its source sequence gets, its beam search).
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint, CheckpointError, Decoding, build_model
from ..config import ConfigError, TransformerConfig
from ..tokenizer import Tokenizer
from ..transformer import Transformer, sinusoidal_positions

log = logging.getLogger(__name__)


class ImportFailure(CheckpointError):
    """A checkpoint cannot be imported; the message names every reason at once."""


@dataclass(frozen=True)
class ImportOptions:
    """What a user may add to a checkpoint that does not record it (``nmtserve export`` flags)."""

    tokenizer: Path | None = None  # the sentencepiece model (source and target)


class Problems(list):
    """Every problem found while importing one checkpoint, raised together by ``check``."""

    def __init__(self, path: Path | str, what: str):
        super().__init__()
        self.path, self.what = path, what

    def check(self) -> None:
        if self:
            raise ImportFailure(f"{self.path}: cannot import as {self.what}:\n  - " + "\n  - ".join(self))


# ---- the checker: one rule per option nmtserve cannot express --------------------------------
# (key, value assumed when absent, supported(value), what a different value would need).
OptionRule = tuple[str, Any, Callable[[Any], bool], str]


def broken_rules(rules: Iterable[OptionRule], raw: Mapping[str, Any]) -> list[str]:
    """``key=value: what a different value would need`` for every rule ``raw`` breaks."""
    out = []
    for key, absent, supported, needs in rules:
        value = raw.get(key, absent)
        if not supported(value):
            out.append(f"{key}={value!r}: {needs}")
    return out


# ---- reading ----------------------------------------------------------------------------------
def load_pickled(path: Path) -> Any:
    """A toolkit's ``.pt`` file (OpenNMT-py, fairseq, a state dict) without the toolkit and without
    running code from the pickle: ``weights_only=True`` admits tensors, containers and the
    ``argparse.Namespace`` both toolkits keep their options in."""
    import pickle

    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's message: the offending global is on a line "WeightsUnpickler error: ..."
        detail = next((line.strip() for line in str(exc).splitlines() if "Unsupported global" in line
                       or "WeightsUnpickler error" in line), str(exc).splitlines()[-1].strip())
        raise ImportFailure(f"{path}: not a PyTorch file that loads without running code from it "
                            f"(torch.load weights_only=True: {detail})") from exc
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file fails in many ways inside the unpickler
        raise ImportFailure(f"{path}: cannot be read as a PyTorch file ({type(exc).__name__}: {exc})") from exc


# ---- the weight map ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NameRule:
    """A toolkit tensor name (a regex whose groups fill ``target``) -> an nmtserve state-dict name."""

    pattern: str
    target: str

    def apply(self, name: str) -> str | None:
        match = re.fullmatch(self.pattern, name)
        return match.expand(self.target) if match else None


def map_names(weights: Mapping[str, torch.Tensor], rules: Sequence[NameRule], ignored: Sequence[str],
              problems: list[str]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """-> (nmtserve state, nmtserve name -> toolkit name). Tensors matching ``ignored`` (regexes:
    buffers the toolkit recomputes, version counters) are dropped; any other unmatched tensor is
    a problem, named."""
    state, origin, unknown = {}, {}, []
    for name, tensor in weights.items():
        target = next((t for t in (r.apply(name) for r in rules) if t is not None), None)
        if target is not None:
            state[target], origin[target] = tensor, name
        elif not any(re.fullmatch(p, name) for p in ignored):
            unknown.append(name)
    if unknown:
        problems.append("tensors with no nmtserve counterpart: " + ", ".join(sorted(unknown)))
    return state, origin


def place_embeddings(embeddings: Mapping[str, torch.Tensor], state: dict[str, torch.Tensor]) -> tuple[bool, bool]:
    """Put the encoder, decoder and output tables (roles "encoder", "decoder", "output") into
    nmtserve's ``state``, tying what is equal: the same values give the same computation, and one
    table exports smaller. Returns (share_embeddings, tie_output) for the config; (False, False)
    when a table is missing (already reported)."""
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


def fill_missing_biases(config: TransformerConfig, state: dict[str, torch.Tensor]) -> list[str]:
    """Zero biases for the Linear layers a toolkit built without them (OpenNMT-py's
    ``add_qkvbias=false``, eole's ``add_ffnbias=false``): the same function. Returns their names."""
    with torch.device("meta"):
        model = Transformer(config)
    added = []
    for name, param in model.named_parameters():
        if name.endswith(".bias") and name not in state and name[: -len("bias")] + "weight" in state \
                and not name.startswith(("src_embed", "tgt_embed", "encoder_norm", "decoder_norm")) \
                and ".norm." not in name:
            state[name] = torch.zeros(param.shape)
            added.append(name)
    return added


def check_against_model(config: TransformerConfig, state: Mapping[str, torch.Tensor], origin: Mapping[str, str],
                        problems: list[str], toolkit: str, *, their_name: Callable[[str], str] | None = None,
                        reported: Iterable[str] = ()) -> None:
    """Missing, surplus and mis-shaped tensors, named as the toolkit names them (``their_name`` of
    a missing nmtserve name; else nmtserve's), before any allocation. ``reported``: names whose
    absence a caller has already explained (tied tables)."""
    with torch.device("meta"):
        model = Transformer(config)
    expected, seen = {}, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:  # a tied weight is stored once, under its first name
            seen.add(id(tensor))
            expected[name] = tensor.shape
    absent = expected.keys() - state.keys() - set(model.computed_buffers()) - set(reported)
    missing = sorted((their_name or (lambda k: k))(k) for k in absent)
    surplus = sorted(origin.get(k, k) for k in state.keys() - expected.keys())
    shapes = [f"{origin.get(k, k)}: checkpoint {tuple(state[k].shape)} != model {tuple(shape)}"
              for k, shape in expected.items() if k in state and state[k].shape != shape]
    if missing:
        problems.append(f"missing tensors{'' if their_name else ' (nmtserve names)'}: {', '.join(missing)}")
    if surplus:
        problems.append(f"tensors that {toolkit} does not have: {', '.join(surplus)}")
    if shapes:
        problems.append("shape mismatches: " + "; ".join(shapes))


def sinusoid_layout(table: torch.Tensor, d_model: int) -> str | None:
    """Which of nmtserve's sinusoid layouts a stored position table (P, d) or (P, 1, d) is, if any."""
    table = table.reshape(table.shape[0], -1).float()
    if table.shape[1] != d_model:
        return None
    for layout in ("interleaved", "concat", "m2m100"):
        if torch.allclose(table, sinusoidal_positions(table.shape[0], d_model, layout), atol=1e-4):
            return layout
    return None


# ---- the vocabulary and the tokenizer --------------------------------------------------------
@dataclass(frozen=True)
class Vocabulary:
    """A toolkit's pieces in id order and where its special tokens are."""

    pieces: Sequence[str]
    pad: str
    bos: str
    eos: str
    unk: str

    def ids(self, problems: list[str], side: str) -> dict[str, int]:
        index: dict[str, int] = {}
        for i, piece in enumerate(self.pieces):
            index.setdefault(piece, i)  # a duplicated piece: the toolkit's lookup finds the first
        for role in ("pad", "bos", "eos", "unk"):
            if getattr(self, role) not in index:
                problems.append(f"the {side} vocabulary has no {role} token {getattr(self, role)!r}")
        return index

    def special(self, role: str) -> int:
        return list(self.pieces).index(getattr(self, role))


@dataclass
class Parts:
    """What an importer hands to ``finish``: the model's config and state, the tokenizer's
    files and vocabularies, and the toolkit's decoding defaults."""

    config: TransformerConfig
    state: dict[str, torch.Tensor]
    source_spm: Path
    target_spm: Path | None
    source_vocab: dict[str, int] | None
    target_vocab: dict[str, int] | None
    decoding: Decoding
    source_prefix: tuple[int, ...] = ()
    source_suffix: tuple[int, ...] | None = None  # None: EOS
    notes: list[str] = field(default_factory=list)


def find_file(name: str | None, near: Path, given: Path | None, problems: list[str], what: str) -> Path | None:
    """A file the checkpoint names (``name``, often a path on the training machine): ``given``
    (a command-line flag) first, then ``name`` as it is, then its file name beside the checkpoint."""
    if given is not None:
        if not Path(given).is_file():
            problems.append(f"{what}: {given} does not exist")
            return None
        return Path(given)
    if name:
        for candidate in (Path(name), near / Path(name).name):
            if candidate.is_file():
                return candidate
        problems.append(f"{what}: the checkpoint names {name}, which is neither there nor beside the "
                        f"checkpoint; give it with --tokenizer FILE")
        return None
    problems.append(f"{what}: the checkpoint does not record one; give the sentencepiece model with --tokenizer FILE")
    return None


def finish(path: Path, parts: Parts, weights_file: Path, toolkit: str) -> Checkpoint:
    """Build the model strictly from ``parts`` and pair it with its tokenizer."""
    model = build_model(parts.config, parts.state, str(weights_file))
    tokenizer = Tokenizer.from_files(
        parts.source_spm, parts.target_spm, parts.config, parts.source_vocab,
        target_vocab=parts.target_vocab, source_prefix=parts.source_prefix, source_suffix=parts.source_suffix,
        keep_specials=False,
    )
    for note in parts.notes:
        log.info("%s: %s", path, note)
    cfg = parts.config
    log.info("imported %s %s (%d parameters; %d+%d layers, d_model %d, %s; shared embeddings %s, tied output %s; "
             "beam search as %s)", toolkit, path, sum(p.numel() for p in model.parameters()), cfg.encoder_layers,
             cfg.decoder_layers, cfg.d_model, "pre-norm" if cfg.pre_norm else "post-norm", cfg.share_embeddings,
             cfg.tie_output, parts.decoding.rule)
    return Checkpoint(model=model, tokenizer=tokenizer, path=path, decoding=parts.decoding)


def make_config(problems: list[str], **fields: Any) -> TransformerConfig | None:
    try:
        return TransformerConfig(**fields)
    except (ConfigError, TypeError, ValueError) as exc:
        problems.append(str(exc))
        return None
