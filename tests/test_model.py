"""The PyTorch Transformer: incremental decoding equals the full pass; checkpoints are strict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nmtserve.decoding.search import SearchOptions
from nmtserve.graphs import pad_batch
from nmtserve.model.checkpoint import CheckpointError, load_state_dict_strict, state_dict_for_saving
from nmtserve.model.config import ConfigError, TransformerConfig
from nmtserve.model.reference import reference_decode
from nmtserve.model.transformer import Transformer, sinusoidal_positions

VARIANTS = {
    "paper": dict(),
    "pre_norm_gelu": dict(pre_norm=True, activation="gelu"),
    "marian_like": dict(activation="swish", position_layout="concat", final_logits_bias=True),
    "untied": dict(share_embeddings=False, tie_output=False, src_vocab_size=37),
}


def tiny(**kw) -> Transformer:
    base = dict(src_vocab_size=41, tgt_vocab_size=41, d_model=16, h=4, d_ff=24, encoder_layers=2,
                decoder_layers=2, dropout=0.0, max_positions=64)
    base.update(kw)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**base)).eval()
    if base.get("final_logits_bias"):
        model.final_logits_bias.normal_()
    return model


def random_batch(model: Transformer, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    v = model.config.src_vocab_size
    return [[*rng.integers(4, v, size=n - 1).tolist(), model.config.eos_id] for n in lengths]


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_steps_equal_the_teacher_forced_pass(variant):
    model = tiny(**VARIANTS[variant])
    batch = random_batch(model, [5, 9, 3])
    opts = SearchOptions(beam_size=3, max_length=7, num_hypotheses=3)
    results = reference_decode(model, batch, opts)
    src = torch.from_numpy(pad_batch(batch, 0))
    for i, hyps in enumerate(results):
        for hyp in hyps:
            tgt = torch.tensor([[model.config.bos_id, *hyp.tokens[:-1]]])
            with torch.no_grad():
                lp = torch.log_softmax(model(src[i : i + 1], tgt), dim=-1)[0]
            total = sum(lp[t, tok].item() for t, tok in enumerate(hyp.tokens))
            # padding in the batch must not change a sentence's scores
            assert total == pytest.approx(hyp.sum_logprobs, abs=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_batched_reference_decode_equals_each_sentence_alone(variant):
    model = tiny(**VARIANTS[variant])
    batch = random_batch(model, [4, 11, 2, 7], seed=1)
    opts = SearchOptions(beam_size=4, max_length=30, max_length_a=1.0, max_length_b=3, num_hypotheses=2)
    together = reference_decode(model, batch, opts)
    for ids, hyps in zip(batch, together, strict=True):
        alone = reference_decode(model, [ids], opts)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert np.allclose([h.score for h in hyps], [h.score for h in alone], atol=1e-5)


def test_pad_is_never_generated():
    model = tiny()
    with torch.no_grad():
        model.generator.weight[model.config.pad_id] = 50.0  # make pad overwhelmingly likely
    out = reference_decode(model, random_batch(model, [5, 6]), SearchOptions(beam_size=2, max_length=6))
    assert all(model.config.pad_id not in h.tokens for hyps in out for h in hyps)


def test_position_layouts():
    pe = sinusoidal_positions(8, 6, "interleaved")
    assert torch.allclose(pe[3, 0::2], torch.sin(3 * torch.tensor([1.0, 10000 ** (-2 / 6), 10000 ** (-4 / 6)])))
    concat = sinusoidal_positions(8, 6, "concat")
    assert torch.allclose(concat[:, :3], pe[:, 0::2]) and torch.allclose(concat[:, 3:], pe[:, 1::2])


def test_config_reports_every_problem_at_once():
    with pytest.raises(ConfigError) as err:
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, d_model=30, h=4, activation="tanh")
    msg = str(err.value)
    for fragment in ("divisible by h", "activation='tanh'", "share_embeddings"):
        assert fragment in msg


def test_config_round_trip(tmp_path):
    cfg = TransformerConfig(src_vocab_size=100, tgt_vocab_size=100, d_model=32, h=4)
    cfg.save(tmp_path / "config.json")
    assert TransformerConfig.load(tmp_path / "config.json") == cfg


def test_strict_loading_names_missing_unexpected_and_misshaped_tensors():
    model = tiny()
    weights = state_dict_for_saving(model)
    weights.pop("encoder_layers.0.ffn.fc1.bias")
    weights["bogus.weight"] = torch.zeros(1)
    weights["decoder_layers.1.ffn.fc2.weight"] = torch.zeros(3, 3)
    with pytest.raises(CheckpointError) as err:
        load_state_dict_strict(tiny(), weights, "test")
    msg = str(err.value)
    assert "encoder_layers.0.ffn.fc1.bias" in msg and "bogus.weight" in msg and "(3, 3)" in msg


def test_tied_weights_are_saved_once():
    weights = state_dict_for_saving(tiny())
    assert "tgt_embed.lut.weight" not in weights and "generator.weight" not in weights
    assert "src_embed.lut.weight" in weights


@pytest.mark.parametrize("variant", [*VARIANTS, "learned_positions"])
def test_a_built_model_holds_the_checkpoints_tensors_and_decodes_as_the_original(variant):
    """``build_model`` lays the model out on the meta device and takes the checkpoint's tensors as its
    own: no second copy of the weights (the storage is the checkpoint's), the same decode."""
    from nmtserve.model.checkpoint import build_model

    kw = dict(learned_positions=True, position_offset=2, embedding_norm=True) if variant == "learned_positions" else VARIANTS[variant]
    original = tiny(**kw)
    with torch.no_grad():
        for p in original.parameters():  # every tensor off its initial value
            p.add_(0.01 * torch.randn_like(p))
    weights = {k: v.clone() for k, v in state_dict_for_saving(original).items()}
    built = build_model(original.config, weights, "test")
    stored = state_dict_for_saving(built)
    assert set(stored) == set(weights)
    for name, tensor in stored.items():
        assert tensor.data_ptr() == weights[name].data_ptr(), name  # not copied
    assert built.generator.weight is built.tgt_embed.lut.weight or not original.config.tie_output
    for name, buffer in original.named_buffers():
        torch.testing.assert_close(dict(built.named_buffers())[name], buffer, rtol=0, atol=0, msg=name)
    batch = random_batch(original, [5, 9, 3])
    options = SearchOptions(beam_size=3, max_length=12)
    want = reference_decode(original, batch, options)
    got = reference_decode(built, batch, options)
    assert [[h.tokens for h in s] for s in got] == [[h.tokens for h in s] for s in want]
    assert [[h.score for h in s] for s in got] == [[h.score for h in s] for s in want]


def test_building_a_model_names_every_wrong_tensor():
    from nmtserve.model.checkpoint import build_model

    model = tiny()
    weights = state_dict_for_saving(model)
    weights.pop("encoder_layers.0.ffn.fc1.bias")
    weights["decoder_layers.1.ffn.fc2.weight"] = torch.zeros(3, 3)
    with pytest.raises(CheckpointError) as err:
        build_model(model.config, weights, "test")
    assert "encoder_layers.0.ffn.fc1.bias" in str(err.value) and "(3, 3)" in str(err.value)
