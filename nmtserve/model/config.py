"""The model's configuration: one typed dataclass, saved as ``config.json`` in a checkpoint."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

ACTIVATIONS = ("relu", "gelu", "swish")
POSITION_LAYOUTS = ("interleaved", "concat", "m2m100")


class ConfigError(ValueError):
    """A checkpoint's configuration is invalid or not understood."""


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the encoder-decoder Transformer ("Attention Is All You Need").

    Defaults are the paper's base model, except where a comment says why.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    h: int = 8  # attention heads; d_k = d_model // h
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    activation: str = "relu"
    # The paper normalises after each residual sum (post-norm). Pre-norm trains more stably
    # for deep stacks and adds a final LayerNorm after each stack.
    pre_norm: bool = False
    # A LayerNorm after each stack. None: where pre-norm puts one. torch.nn.Transformer adds one to
    # post-norm stacks too (its encoder.norm / decoder.norm).
    final_norm: bool | None = None
    # The encoder's own placement, where it differs from the decoder's (eole's post-norm encoder,
    # ``encoder_layer_style: postnorm``, before its pre-norm decoder). None: ``pre_norm``.
    encoder_pre_norm: bool | None = None
    layer_norm_eps: float = 1e-5
    # The paper multiplies embeddings by sqrt(d_model) so they are not drowned by positions.
    scale_embedding: bool = True
    # "interleaved": PE(pos, 2i) = sin, PE(pos, 2i+1) = cos (the paper). "concat": all sines
    # then all cosines (Marian), so imported checkpoints keep their layout. "m2m100": [sin | cos]
    # with fairseq's frequencies 10000^(-i / (d_model/2 - 1)) instead of the paper's
    # 10000^(-2i / d_model), in float32 as fairseq computed them (M2M100, NLLB).
    position_layout: str = "interleaved"
    # A trained position table per stack (mBART) instead of sinusoids; position_layout is unused.
    learned_positions: bool = False
    # Position p (0 = first token) reads row p + position_offset of a table of
    # max_positions + position_offset rows. fairseq-born models number positions from
    # padding_idx + 1 (2 in M2M100, NLLB and mBART), and their tables start with those rows.
    position_offset: int = 0
    max_positions: int = 1024  # usable positions: 0 .. max_positions - 1
    # A LayerNorm on token + position embeddings, one per stack (mBART's layernorm_embedding).
    embedding_norm: bool = False
    # One embedding matrix for source and target (needs a joint vocabulary).
    share_embeddings: bool = True
    # The output projection reuses the target embedding matrix (the paper, section 3.4).
    tie_output: bool = True
    # A learned bias on the logits (Marian's ``final_logits_bias``); zeros when absent.
    final_logits_bias: bool = False
    pad_id: int = 0
    bos_id: int = 1  # decoder start token
    eos_id: int = 2
    unk_id: int = 3

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError("invalid model config: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Every problem with this config at once, so a user fixes them in one go."""
        out = []
        if self.d_model % self.h:
            out.append(f"d_model={self.d_model} is not divisible by h={self.h}")
        if self.d_model % 2:
            out.append(f"d_model={self.d_model} must be even for sinusoidal positions")
        if self.activation not in ACTIVATIONS:
            out.append(f"activation={self.activation!r} is not one of {ACTIVATIONS}")
        if self.position_layout not in POSITION_LAYOUTS:
            out.append(f"position_layout={self.position_layout!r} is not one of {POSITION_LAYOUTS}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            out.append("share_embeddings needs src_vocab_size == tgt_vocab_size")
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            value = getattr(self, name)
            if not 0 <= value < self.tgt_vocab_size:
                out.append(f"{name}={value} is outside the target vocabulary")
        for name in ("encoder_layers", "decoder_layers", "h", "d_ff", "max_positions"):
            if getattr(self, name) <= 0:
                out.append(f"{name} must be positive")
        if (self.pre_norm or self.encoder_pre) and self.final_norm is False:
            out.append("pre_norm without a final LayerNorm per stack is not supported")
        if self.position_offset < 0:
            out.append(f"position_offset={self.position_offset} must not be negative")
        if self.position_layout == "m2m100" and not self.learned_positions and self.d_model < 4:
            out.append(f"position_layout='m2m100' needs d_model >= 4, not {self.d_model} "
                       "(its frequencies divide by d_model/2 - 1)")
        return out

    @property
    def encoder_pre(self) -> bool:
        """Whether the encoder's layers are pre-norm."""
        return self.pre_norm if self.encoder_pre_norm is None else self.encoder_pre_norm

    @property
    def final_norms(self) -> bool:
        """Whether each stack ends with a LayerNorm."""
        return self.pre_norm if self.final_norm is None else self.final_norm

    @property
    def d_k(self) -> int:
        return self.d_model // self.h

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TransformerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known - {"model_type", "nmtserve_version"})
        if unknown:
            raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, path: str | Path) -> None:
        data = {"model_type": "nmtserve-transformer", **self.to_dict()}
        Path(path).write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TransformerConfig:
        data = json.loads(Path(path).read_text())
        if data.get("model_type", "nmtserve-transformer") != "nmtserve-transformer":
            raise ConfigError(f"{path}: model_type {data.get('model_type')!r} is not nmtserve's")
        return cls.from_dict(data)
