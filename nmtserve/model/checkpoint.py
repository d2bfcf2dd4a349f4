"""Checkpoint directories: ``config.json`` + ``model.safetensors`` + sentencepiece model(s).

No pickle: weights are read with safetensors, which cannot execute code. Loading is strict:
every expected tensor must be present with its exact shape, and nothing else may be there.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .config import ConfigError, TransformerConfig
from .tokenizer import Tokenizer
from .transformer import Transformer

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SOURCE_SPM = "source.spm"
TARGET_SPM = "target.spm"
VOCAB_FILE = "vocab.json"


class CheckpointError(ValueError):
    """A checkpoint directory is incomplete or does not match its config."""


@dataclass(frozen=True)
class Decoding:
    """How the checkpoint's toolkit decodes by default: its beam search (``SearchOptions.rule``),
    length penalty, maximum length ``min(max_target_len, a * source length + b)`` (generated
    tokens, EOS included) and minimum length. An export serves these as its defaults."""

    rule: str = "transformers"
    length_penalty: float = 1.0
    max_length_a: float = 2.0
    max_length_b: int = 10
    min_length: int = 0
    max_length: int | None = None  # the toolkit's own cap on a * source + b (None: the export's)

    def search_options(self, max_length: int = 256, **given):
        """These defaults as ``SearchOptions`` (``max_length``: the cap on top of a * source + b,
        the toolkit's own where it is lower)."""
        from ..decoding.search import SearchOptions

        cap = min(max_length, self.max_length or max_length)
        return SearchOptions(**{**dict(rule=self.rule, length_penalty=self.length_penalty, max_length=cap,
                                       max_length_a=self.max_length_a, max_length_b=self.max_length_b,
                                       min_length=self.min_length), **given})


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, fp32), its tokenizers and decoding defaults."""

    model: Transformer | None
    tokenizer: Tokenizer
    path: Path
    decoding: Decoding = field(default_factory=Decoding)

    def __post_init__(self) -> None:
        self._config = self.model.config

    @property
    def config(self) -> TransformerConfig:
        return self._config

    def release_model(self) -> None:
        """Drop the model (its weights) once nothing needs it; the config and tokenizer stay."""
        self.model = None


def _stored(model: Transformer) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint holds, by name: each tied tensor once, under its first name (by
    identity, so it also works on a model on the meta device)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            out[name] = tensor
    return out


def state_dict_for_saving(model: Transformer) -> dict[str, torch.Tensor]:
    """The state dict without aliases of tied weights (safetensors refuses shared storage)."""
    return {name: tensor.detach().contiguous() for name, tensor in _stored(model).items()}


def _check_names(expected: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], source: str) -> None:
    """Fail once with every missing, unexpected or mis-shaped tensor named."""
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    shapes = [
        f"{name}: checkpoint {tuple(weights[name].shape)} != model {tuple(t.shape)}"
        for name, t in expected.items()
        if name in weights and weights[name].shape != t.shape
    ]
    problems = []
    if missing:
        problems.append(f"missing tensors: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors: {', '.join(unexpected)}")
    if shapes:
        problems.append("shape mismatches: " + "; ".join(shapes))
    if problems:
        raise CheckpointError(f"{source}: " + " | ".join(problems))


def load_state_dict_strict(model: Transformer, weights: dict[str, torch.Tensor], source: str) -> None:
    """Copy weights into ``model``, failing once with every missing, unexpected or mis-shaped tensor named."""
    _check_names(_stored(model), weights, source)
    with torch.no_grad():
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        for name, value in weights.items():
            target = params.get(name, buffers.get(name))
            target.copy_(value.to(target.dtype))


def build_model(config: TransformerConfig, weights: dict[str, torch.Tensor], source: str) -> Transformer:
    """The model of ``config`` holding ``weights`` (checked strictly) as its own tensors: fp32, eval mode, CPU.

    The model is laid out on the meta device (no memory, no random initialisation) and takes the
    checkpoint's tensors as they are (float32 ones are not copied), so loading holds one copy of
    the weights, not two (an NLLB-200-600M import peaked at 2x the checkpoint before)."""
    with torch.device("meta"):
        model = Transformer(config)
    _check_names(_stored(model), weights, source)
    modules = dict(model.named_modules())
    for name, value in {**weights, **model.computed_buffers()}.items():
        owner, _, leaf = name.rpartition(".")
        module = modules[owner]
        value = value.detach().float()
        if leaf in module._parameters:
            setattr(module, leaf, torch.nn.Parameter(value))
        else:
            module._buffers[leaf] = value
    if config.tie_output:  # the generator's own reference to the table it shares
        model.generator.weight = model.tgt_embed.lut.weight
    left = [n for n, t in (*model.named_parameters(remove_duplicate=False), *model.named_buffers()) if t.is_meta]
    if left:
        raise AssertionError(f"build_model: {', '.join(left)} not loaded")
    return model.eval()


def save_checkpoint(model: Transformer, directory: str | Path, source_spm: Path, target_spm: Path | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save(directory / CONFIG_FILE)
    save_file(state_dict_for_saving(model), str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / SOURCE_SPM).write_bytes(Path(source_spm).read_bytes())
    if target_spm is not None and Path(target_spm).resolve() != Path(source_spm).resolve():
        (directory / TARGET_SPM).write_bytes(Path(target_spm).read_bytes())
    return directory


def is_nmtserve_checkpoint(directory: Path) -> bool:
    return (directory / CONFIG_FILE).is_file() and (directory / WEIGHTS_FILE).is_file()


def load_checkpoint(directory: str | Path) -> Checkpoint:
    """Load an nmtserve checkpoint directory (fp32, eval mode, CPU)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory")
    for required in (CONFIG_FILE, WEIGHTS_FILE, SOURCE_SPM):
        if not (directory / required).is_file():
            raise CheckpointError(f"{directory}: missing {required}")
    try:
        config = TransformerConfig.load(directory / CONFIG_FILE)
    except (ConfigError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{directory / CONFIG_FILE}: {exc}") from exc
    model = build_model(config, load_file(str(directory / WEIGHTS_FILE)), str(directory / WEIGHTS_FILE))
    target = directory / TARGET_SPM
    vocab_file = directory / VOCAB_FILE  # vocabulary-mapped checkpoints (converted Marian models)
    vocab = json.loads(vocab_file.read_text(encoding="utf-8")) if vocab_file.is_file() else None
    tokenizer = Tokenizer.from_files(directory / SOURCE_SPM, target if target.is_file() else None, config, vocab)
    log.info("loaded %s (%d parameters)", directory, sum(p.numel() for p in model.parameters()))
    return Checkpoint(model=model, tokenizer=tokenizer, path=directory)
