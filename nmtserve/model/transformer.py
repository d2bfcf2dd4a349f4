"""The encoder-decoder Transformer of "Attention Is All You Need", written to be exported.

``encode()`` and ``decode_step()`` are exactly the two ONNX graphs (see ``nmtserve.export``);
``forward()`` is the teacher-forced pass used for training. Symbols follow the paper:
``d_model``, ``h`` heads of size ``d_k``, ``memory`` = encoder output, ``src_mask``.

The incremental decoder's cache contract (owned by the caller, see ``nmtserve.decoding.cache``):

* self-attention cache, one buffer for all layers per K/V: ``past_key`` of shape
  ``(T, R, L, h, d_k)`` — time-major so that a window of a preallocated
  ``(T_max, R, L, h, d_k)`` buffer is a contiguous slice, ``R`` cache rows;
* ``cache_rows (B, K, T)``: for hypothesis ``k`` of sentence ``b``, the cache row that holds its
  ancestor's entry at time ``t``. Beams are reordered by rewriting this small table, never by
  moving the cache (cache indirection);
* ``past_mask (B, T)``: which times are real for sentence ``b``. Time 0 of the first step is a
  masked dummy, so the first step runs the same graph with ``T = 1`` (TensorRT profiles need not
  accept zero-length dimensions);
* the step returns only the new step's K/V ``(B, K, L, h, d_k)``; the caller writes it at time
  ``T`` (into rows ``[0, B * K)`` it is one contiguous block).

Cross-attention K/V are computed once per sentence by the encoder graph, keys pre-transposed
``(B, h, d_k, S)`` and values ``(B, h, S, d_k)``, and shared by the sentence's ``K`` beams.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TransformerConfig

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


def sinusoidal_positions(max_positions: int, d_model: int, layout: str) -> Tensor:
    """The sinusoid table (max_positions, d_model); ``layout`` places sin/cos (see config)."""
    if layout == "m2m100":
        return _fairseq_positions(max_positions, d_model)
    position = torch.arange(max_positions, dtype=torch.float64).unsqueeze(1)
    # 10000^(-2i/d_model), computed in float64 so imported checkpoints match their toolkits.
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inv_freq  # (P, d_model / 2)
    pe = torch.zeros(max_positions, d_model, dtype=torch.float64)
    if layout == "interleaved":
        pe[:, 0::2] = torch.sin(angles)
        pe[:, 1::2] = torch.cos(angles)
    else:  # "concat": [sin | cos], the Marian / fairseq layout
        half = d_model // 2
        pe[:, :half] = torch.sin(angles)
        pe[:, half:] = torch.cos(angles)
    return pe.float()


def _fairseq_positions(max_positions: int, d_model: int) -> Tensor:
    """fairseq's ``SinusoidalPositionalEmbedding`` table as M2M100 / NLLB were trained with it:
    [sin | cos] with frequencies 10000^(-i / (d_model/2 - 1)), every step in float32 as fairseq
    and transformers compute it, so rows are bit-identical (at NLLB's 1026 x 1024 a float64 table
    would differ from theirs by up to 7e-5).

    fairseq also zeroes row ``padding_idx``, the position of pad tokens. nmtserve masks pad tokens
    instead and real positions start at row ``padding_idx + 1`` (``position_offset``), so that row
    is never read and is left as the formula gives it.
    """
    half = d_model // 2
    inv_freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(max_positions, dtype=torch.int64).float().unsqueeze(1) * inv_freq.unsqueeze(0)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (P, d_model)


def _neg_inf(dtype: torch.dtype) -> float:
    # finfo.min, not -1e9: -1e9 overflows fp16, and -inf turns fully masked rows into NaN.
    return torch.finfo(dtype).min


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus positions (section 3.4, 3.5).

    Positions are a table: sinusoids (a buffer, never stored) or learned (a parameter, mBART).
    Position p reads row p + ``position_offset``. With ``embedding_norm`` the sum is normalised
    (mBART's ``layernorm_embedding``). The config fixes every branch here, so the exported graph
    is a Gather of the token, a Gather of the position (an Add of the offset before it), a Mul
    and an Add, whatever the checkpoint.
    """

    def __init__(self, vocab_size: int, config: TransformerConfig, table: nn.Embedding | None = None):
        super().__init__()
        self.lut = table if table is not None else nn.Embedding(vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.position_offset = config.position_offset
        self.learned = config.learned_positions
        rows = config.max_positions + config.position_offset
        if config.learned_positions:
            self.pos_lut = nn.Embedding(rows, config.d_model)
        else:
            self.register_buffer(
                "pe", sinusoidal_positions(rows, config.d_model, config.position_layout), persistent=False,
            )
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)

    @property
    def position_table(self) -> Tensor:
        """(max_positions + position_offset, d_model): row p + offset is position p."""
        return self.pos_lut.weight if self.learned else self.pe

    def forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        rows = positions + self.position_offset if self.position_offset else positions
        return self.dropout(self.norm(self.lut(ids) * self.scale + self.position_table[rows]))


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (section 3.2) with separate Q/K/V projections."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.h, self.d_k = config.h, config.d_k
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        *lead, _ = x.shape
        return x.view(*lead, self.h, self.d_k)  # (..., h, d_k)

    def forward(self, query: Tensor, key_value: Tensor, mask: Tensor) -> Tensor:
        """Full-sequence attention. query (B, Tq, d), key_value (B, Tk, d), mask (B|1, Tq|1, Tk) bool."""
        q = self.split_heads(self.q_proj(query)).transpose(1, 2)  # (B, h, Tq, d_k)
        k = self.split_heads(self.k_proj(key_value)).transpose(1, 2)  # (B, h, Tk, d_k)
        v = self.split_heads(self.v_proj(key_value)).transpose(1, 2)  # (B, h, Tk, d_k)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_k)  # (B, h, Tq, Tk)
        scores = scores.masked_fill(~mask.unsqueeze(1), _neg_inf(scores.dtype))
        p = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(p, v).transpose(1, 2)  # (B, Tq, h, d_k)
        return self.out_proj(out.reshape(*out.shape[:2], -1))

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention K/V of the encoder output, once per sentence.

        Returns keys pre-transposed (B, h, d_k, S) and values (B, h, S, d_k).
        """
        k = self.split_heads(self.k_proj(memory)).permute(0, 2, 3, 1)  # (B, h, d_k, S)
        v = self.split_heads(self.v_proj(memory)).transpose(1, 2)  # (B, h, S, d_k)
        return k, v

    def cross_step(self, x: Tensor, mem_k: Tensor, mem_v: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention of K beams per sentence. x (B, K, d) -> (B, K, d), and the attention
        probabilities averaged over the heads (B, K, S)."""
        q = self.split_heads(self.q_proj(x)).transpose(1, 2) / math.sqrt(self.d_k)  # (B, h, K, d_k)
        scores = torch.matmul(q, mem_k)  # (B, h, K, S)
        scores = scores.masked_fill(~src_mask[:, None, None, :], _neg_inf(scores.dtype))
        p = torch.softmax(scores, dim=-1)
        out = torch.matmul(p, mem_v)  # (B, h, K, d_k)
        out = out.transpose(1, 2)  # (B, K, h, d_k)
        return self.out_proj(out.reshape(*out.shape[:2], -1)), p.mean(dim=1)

    def self_step(
        self, x: Tensor, past_k: Tensor, past_v: Tensor, row_index: Tensor, past_mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention of one new token per hypothesis over its cached past.

        x (B, K, d); past_k/past_v (T, R, L, h, d_k), every layer's cache; row_index (B, K, T) the
        flat row of this layer's entry for each hypothesis' ancestor at each time in the cache
        viewed as (T * R * L, h * d_k); past_mask (B, T) bool.
        Returns the output (B, K, d) and the new step's k, v (B, K, h, d_k).

        The past is gathered a whole row (all heads) at a time, h times fewer and larger copies
        than one per head, and every head is scored in one matmul against a block-diagonal query
        (row j holds head j's query in block j, zeros elsewhere): h times the (small) attention
        FLOPs, no transposes of the gathered cache.
        """
        h, d_k = self.h, self.d_k
        q = self.split_heads(self.q_proj(x)) / math.sqrt(d_k)  # (B, K, h, d_k)
        k_new = self.split_heads(self.k_proj(x))  # (B, K, h, d_k)
        v_new = self.split_heads(self.v_proj(x))  # (B, K, h, d_k)
        k_past = past_k.reshape(-1, h * d_k)[row_index]  # (B, K, T, h * d_k)
        v_past = past_v.reshape(-1, h * d_k)[row_index]  # (B, K, T, h * d_k)
        eye = torch.eye(h, dtype=q.dtype, device=q.device)[:, :, None]  # (h, h, 1)
        q_blocks = (eye * q.unsqueeze(-3)).flatten(-2)  # (B, K, h, h * d_k)
        s_past = torch.matmul(q_blocks, k_past.transpose(-1, -2))  # (B, K, h, T)
        s_past = s_past.masked_fill(~past_mask[:, None, None, :], _neg_inf(s_past.dtype))
        # Past and new token are scored separately: no Concat of the cache with the new entry.
        s_new = (q * k_new).sum(-1, keepdim=True)  # (B, K, h, 1)
        p = torch.softmax(torch.cat([s_past, s_new], dim=-1), dim=-1)  # (B, K, h, T + 1)
        p_past, p_new = p[..., :-1], p[..., -1:]  # (B, K, h, T), (B, K, h, 1)
        mixed = torch.matmul(p_past, v_past)  # (B, K, h, h * d_k): block j of row j is head j's
        out = (mixed.unflatten(-1, (h, d_k)) * eye).sum(-2) + p_new * v_new  # (B, K, h, d_k)
        return self.out_proj(out.flatten(-2)), k_new, v_new


class FeedForward(nn.Module):
    """Position-wise feed-forward network (section 3.3)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation = _ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


class Sublayer(nn.Module):
    """Residual connection around a sublayer with LayerNorm, post-norm (paper) or pre-norm."""

    def __init__(self, config: TransformerConfig, pre_norm: bool | None = None):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.pre_norm if pre_norm is None else pre_norm

    def before(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def after(self, x: Tensor, y: Tensor) -> Tensor:
        out = x + self.dropout(y)
        return out if self.pre_norm else self.norm(out)


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.ffn = FeedForward(config)
        self.sub_attn = Sublayer(config, config.encoder_pre)
        self.sub_ffn = Sublayer(config, config.encoder_pre)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        y = self.sub_attn.before(x)
        x = self.sub_attn.after(x, self.self_attn(y, y, src_mask[:, None, :]))
        return self.sub_ffn.after(x, self.ffn(self.sub_ffn.before(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.cross_attn = MultiHeadAttention(config)
        self.ffn = FeedForward(config)
        self.sub_self = Sublayer(config)
        self.sub_cross = Sublayer(config)
        self.sub_ffn = Sublayer(config)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
        y = self.sub_self.before(x)
        x = self.sub_self.after(x, self.self_attn(y, y, tgt_mask))
        x = self.sub_cross.after(x, self.cross_attn(self.sub_cross.before(x), memory, src_mask[:, None, :]))
        return self.sub_ffn.after(x, self.ffn(self.sub_ffn.before(x)))

    def step(
        self, x: Tensor, past_k: Tensor, past_v: Tensor, row_index: Tensor, past_mask: Tensor,
        mem_k: Tensor, mem_v: Tensor, src_mask: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """-> the output (B, K, d), the step's k, v, and the cross-attention averaged over heads (B, K, S)."""
        y, k_new, v_new = self.self_attn.self_step(self.sub_self.before(x), past_k, past_v, row_index, past_mask)
        x = self.sub_self.after(x, y)
        y, attention = self.cross_attn.cross_step(self.sub_cross.before(x), mem_k, mem_v, src_mask)
        x = self.sub_cross.after(x, y)
        return self.sub_ffn.after(x, self.ffn(self.sub_ffn.before(x))), k_new, v_new, attention


def alignment_layer(layers: int) -> int:
    """The decoder layer whose cross-attention (averaged over heads) is the step's ``attention``,
    the source of word alignments: the last. Measured on the demo model (3 layers, tagged
    sentences of ``nmtserve.demo.tagged``, teacher-forced, a target word aligned by its first
    token's argmax): units placed exactly 98.1% with the last layer, 80.2% the middle one, 11.2%
    the first; the head mean of all layers 98.0%."""
    return layers - 1


def _logits_mask(config: TransformerConfig) -> Tensor:
    """The decoder never emits pad: its log-probability is -inf (as `bad_words_ids=[[pad]]` in
    transformers' Marian generation config), added after the log-softmax."""
    mask = torch.zeros(config.tgt_vocab_size)
    mask[config.pad_id] = float("-inf")
    return mask


class Transformer(nn.Module):
    """Encoder-decoder Transformer. Build it from a ``TransformerConfig``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        src_table = nn.Embedding(config.src_vocab_size, config.d_model)
        tgt_table = src_table if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, config.d_model)
        self.src_embed = Embeddings(config.src_vocab_size, config, src_table)
        self.tgt_embed = Embeddings(config.tgt_vocab_size, config, tgt_table)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        # Pre-norm stacks end with a LayerNorm; post-norm ones are already normalised (torch's
        # nn.Transformer adds one anyway: config.final_norm).
        final = config.final_norms
        self.encoder_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if final else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if final else nn.Identity()
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size, bias=False)
        if config.tie_output:
            self.generator.weight = tgt_table.weight
        self.register_buffer(
            "final_logits_bias", torch.zeros(config.tgt_vocab_size), persistent=config.final_logits_bias
        )
        self.register_buffer("logits_mask", _logits_mask(config), persistent=False)
        if self.src_embed.lut.weight.is_meta:  # a layout to load weights into (checkpoint.build_model)
            return
        self._init_weights()

    def computed_buffers(self) -> dict[str, Tensor]:
        """The buffers the config alone determines (never stored in a checkpoint), by state-dict name."""
        c = self.config
        out = {}
        if not c.learned_positions:  # one table, read by both stacks
            out["src_embed.pe"] = out["tgt_embed.pe"] = sinusoidal_positions(
                c.max_positions + c.position_offset, c.d_model, c.position_layout)
        if not c.final_logits_bias:
            out["final_logits_bias"] = torch.zeros(c.tgt_vocab_size)
        out["logits_mask"] = _logits_mask(c)
        return out

    def _init_weights(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        # Embeddings scaled by sqrt(d_model) start near unit norm when drawn with std d^-1/2.
        nn.init.normal_(self.src_embed.lut.weight, std=self.config.d_model**-0.5)
        if not self.config.share_embeddings:
            nn.init.normal_(self.tgt_embed.lut.weight, std=self.config.d_model**-0.5)

    # ---- the encoder graph -------------------------------------------------------------
    def encode(self, src_ids: Tensor) -> Tensor:
        """src_ids (B, S) padded with pad_id -> memory (B, S, d_model)."""
        src_mask = src_ids != self.config.pad_id  # (B, S)
        positions = torch.arange(src_ids.shape[1], device=src_ids.device)
        x = self.src_embed(src_ids, positions)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x)

    def memory_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per decoder layer, cross-attention keys (B, h, d_k, S) and values (B, h, S, d_k)."""
        return [layer.cross_attn.memory_kv(memory) for layer in self.decoder_layers]

    # ---- the incremental decoder graph -------------------------------------------------
    def decode_step(
        self,
        tokens: Tensor,  # (B, K) last token of each hypothesis
        # (B,) position of that token in the target, 0 for the decoder start token (all beams of a
        # sentence share it); the position table's offset is added inside
        position: Tensor,
        past_key: Tensor,  # (T, R, L, h, d_k) every layer's self-attention keys
        past_value: Tensor,  # (T, R, L, h, d_k)
        cache_rows: Tensor,  # (B, K, T) cache row of each hypothesis' ancestor at each time
        past_mask: Tensor,  # (B, T) bool, real past times of each sentence
        memory_keys: list[Tensor],  # per layer (B, h, d_k, S)
        memory_values: list[Tensor],  # per layer (B, h, S, d_k)
        src_mask: Tensor,  # (B, S) bool
        return_attention: bool = False,
    ) -> tuple[Tensor, ...]:
        """One decoding step -> log-probs (B, K, V) and the new step's K/V of every layer (B, K, L, h, d_k);
        with ``return_attention`` also the alignment attention (B, K, S): the last decoder layer's
        cross-attention averaged over its heads (``ALIGNMENT_LAYER``)."""
        t_len, rows, n_layers = past_key.shape[0], past_key.shape[1], past_key.shape[2]
        # Flat row in (T * R * L, h * d_k) of (time t, cache row r, layer i): (t * R + r) * L + i.
        time_offset = torch.arange(t_len, device=tokens.device, dtype=cache_rows.dtype) * rows
        row_index = (cache_rows + time_offset) * n_layers  # (B, K, T), layer 0's rows
        x = self.tgt_embed(tokens, position.unsqueeze(1))  # (B, K, d)
        new_keys, new_values = [], []
        attention = None
        for i, layer in enumerate(self.decoder_layers):
            x, k_new, v_new, attn = layer.step(
                x, past_key, past_value, row_index + i, past_mask,
                memory_keys[i], memory_values[i], src_mask,
            )
            new_keys.append(k_new)
            new_values.append(v_new)
            if i == alignment_layer(len(self.decoder_layers)):
                attention = attn
        x = self.decoder_norm(x)
        logits = self.generator(x) + self.final_logits_bias
        log_probs = torch.log_softmax(logits, dim=-1) + self.logits_mask
        if return_attention:
            return log_probs, torch.stack(new_keys, dim=2), torch.stack(new_values, dim=2), attention
        return log_probs, torch.stack(new_keys, dim=2), torch.stack(new_values, dim=2)

    # ---- teacher-forced training pass --------------------------------------------------
    def forward(self, src_ids: Tensor, tgt_in: Tensor) -> Tensor:
        """src_ids (B, S), tgt_in (B, T) starting with bos -> logits (B, T, V)."""
        memory = self.encode(src_ids)
        src_mask = src_ids != self.config.pad_id
        t_len = tgt_in.shape[1]
        causal = torch.ones(t_len, t_len, dtype=torch.bool, device=tgt_in.device).tril()
        tgt_mask = causal.unsqueeze(0)  # (1, T, T); pad targets come after EOS and are never attended by real ones
        x = self.tgt_embed(tgt_in, torch.arange(t_len, device=tgt_in.device))
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.generator(self.decoder_norm(x)) + self.final_logits_bias
