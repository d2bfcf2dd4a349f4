"""Hugging Face M2M100 / NLLB (``m2m_100``) and mBART (``mbart``) import, checked against ``transformers``.

What this proves, with tiny random models built here and written by ``save_pretrained`` (and as
``torch.save``'d ``pytorch_model.bin`` files, plain and sharded, as older uploads hold them):

* the imported encoder's output equals transformers' ``last_hidden_state`` at every real token
  of right-padded batches (pad positions differ by design: transformers gives pad tokens the
  zeroed position row, nmtserve masks them);
* the teacher-forced logits of ``Transformer.forward`` equal transformers', and so do the
  log-probs of ``decode_step`` driven one token at a time through the cache contract, up to the
  last position the tables hold (``max_position_embeddings``);
* the check is sharp enough to matter: the same weights with Marian's sinusoid formula or
  without the position offset give visibly different logits;
* the imported models export to ONNX and pass nmtserve's parity check;
* what cannot be imported fails once, listing every unsupported option, missing or surplus tensor.

LayerNorm weights and biases and mBART's ``final_logits_bias`` are drawn at random (transformers
initialises them to ones and zeros), so a LayerNorm mapped to the wrong place, or a dropped bias,
shows. ``init_std`` and the last LayerNorm are raised so that logits spread over several units.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from helpers import copy_directory, edit_config  # noqa: E402
from transformers import (  # noqa: E402
    M2M100Config,
    M2M100ForConditionalGeneration,
    MBartConfig,
    MBartForConditionalGeneration,
)
from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding  # noqa: E402

from nmtserve.decoding.search import SearchOptions  # noqa: E402
from nmtserve.model.checkpoint import load_state_dict_strict  # noqa: E402
from nmtserve.model.config import TransformerConfig  # noqa: E402
from nmtserve.model.importers.hf_multilingual import (  # noqa: E402
    MultilingualImportError,
    load_multilingual_model,
    multilingual_to_nmtserve,
    read_multilingual_directory,
    unsupported_options,
)
from nmtserve.model.transformer import Transformer, sinusoidal_positions  # noqa: E402

MAX_POSITIONS = 64
TINY = dict(vocab_size=120, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=MAX_POSITIONS, init_std=0.1)

# name -> (model class, config class, config overrides)
MODELS = {
    "m2m100": (M2M100ForConditionalGeneration, M2M100Config, dict(scale_embedding=True)),
    # pad 0 moves M2M100's position offset to 1; untied: four independent tables in the file
    "m2m100-pad0-untied": (M2M100ForConditionalGeneration, M2M100Config,
                           dict(pad_token_id=0, bos_token_id=1, tie_word_embeddings=False)),
    "mbart": (MBartForConditionalGeneration, MBartConfig, dict(scale_embedding=True, decoder_start_token_id=2)),
    # mBART-50's own config: relu; here also unscaled, 6 heads, 3 + 1 layers, and no decoder start
    # (generate falls back to bos)
    "mbart-relu-unscaled": (MBartForConditionalGeneration, MBartConfig,
                            dict(activation_function="relu", scale_embedding=False, d_model=48,
                                 encoder_attention_heads=6, decoder_attention_heads=6, encoder_layers=3,
                                 decoder_layers=1)),
}


def make_model(name: str, directory: Path, seed: int = 0):
    model_cls, config_cls, overrides = MODELS[name]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.3)
                module.bias.normal_(0.0, 0.3)
        model.model.decoder.layer_norm.weight.mul_(3.0)  # logits spread over several units
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(0.0, 1.0)
    model.save_pretrained(directory)
    return model


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """name -> (directory, transformers model), each built once per module."""
    cache: dict[str, tuple[Path, torch.nn.Module]] = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make_model(name, d))
        return cache[name]

    return get


def _batch(model, seed: int = 0, lengths=(9, 4, 1, 13), tgt_len: int = 7):
    """A right-padded source batch (EOS-terminated, as tokenizers make them) and a target prefix
    starting with the decoder start token (then a language token, as forced BOS would give)."""
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), cfg.pad_token_id)
    for i, n in enumerate(lengths):
        src[i, : n - 1] = torch.randint(4, cfg.vocab_size, (n - 1,), generator=g)
        src[i, n - 1] = cfg.eos_token_id
    start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else cfg.bos_token_id
    tgt = torch.randint(4, cfg.vocab_size, (len(lengths), tgt_len), generator=g)
    tgt[:, 0] = start
    return src, src.ne(cfg.pad_token_id), tgt


def _hf_logits(model, src, mask, tgt) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits


def step_by_step_log_probs(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """log-probs (B, T, V) from ``decode_step``, one token per call, K = 1 hypothesis per sentence.

    The cache contract of ``Transformer.decode_step``: time 0 is a masked dummy, the step at
    target position t passes ``position = t``, and its new K/V are appended at time t + 1.
    """
    cfg = model.config
    b, t_len = tgt.shape
    with torch.no_grad():
        kv = model.memory_kv(model.encode(src))
        mem_k, mem_v = [k for k, _ in kv], [v for _, v in kv]
        src_mask = src != cfg.pad_id
        past_k = torch.zeros(1, b, cfg.decoder_layers, cfg.h, cfg.d_k)  # (T, R, L, h, d_k), R = B rows
        past_v = torch.zeros_like(past_k)
        past_mask = torch.zeros(b, 1, dtype=torch.bool)
        out = []
        for t in range(t_len):
            cache_rows = torch.arange(b).view(b, 1, 1).expand(b, 1, t + 1)  # sentence b lives in row b
            log_probs, k_new, v_new = model.decode_step(
                tgt[:, t : t + 1], torch.full((b,), t), past_k, past_v, cache_rows, past_mask, mem_k, mem_v, src_mask)
            out.append(log_probs[:, 0])
            past_k = torch.cat([past_k, k_new.transpose(0, 1)])  # (B, 1, L, h, d_k) -> time t + 1
            past_v = torch.cat([past_v, v_new.transpose(0, 1)])
            past_mask = torch.cat([past_mask, torch.ones(b, 1, dtype=torch.bool)], dim=1)
    return torch.stack(out, dim=1)


def test_the_importer_does_not_import_transformers():
    code = "import sys, nmtserve.model.importers.hf_multilingual; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- positions ----------------------------------------------------------------------------------
def test_m2m100_sinusoids_are_bit_identical_to_transformers_at_full_size():
    """NLLB's size: 1024 + 2 rows of d_model 1024 (fairseq's float32 arithmetic, not float64)."""
    pad = 1
    theirs = M2M100SinusoidalPositionalEmbedding.get_embedding(1026, 1024, pad)
    ours = sinusoidal_positions(1026, 1024, "m2m100")
    assert torch.equal(ours[pad + 1 :], theirs[pad + 1 :])  # every row a real position reads
    assert not torch.allclose(ours, sinusoidal_positions(1026, 1024, "concat"), atol=1e-2)  # not Marian's


@pytest.mark.parametrize("name", MODELS)
def test_config_maps_the_architecture_and_special_ids(hf, name):
    d, model = hf(name)
    hf_cfg = model.config
    cfg = load_multilingual_model(d).config
    mbart = hf_cfg.model_type == "mbart"
    assert (cfg.pre_norm, cfg.layer_norm_eps, cfg.learned_positions, cfg.embedding_norm) == (True, 1e-5, mbart, mbart)
    assert cfg.position_offset == (2 if mbart else hf_cfg.pad_token_id + 1)
    assert cfg.max_positions == MAX_POSITIONS
    assert cfg.scale_embedding == hf_cfg.scale_embedding and cfg.activation == hf_cfg.activation_function
    assert cfg.final_logits_bias == mbart
    assert (cfg.share_embeddings, cfg.tie_output) == (hf_cfg.tie_word_embeddings, hf_cfg.tie_word_embeddings)
    start = hf_cfg.decoder_start_token_id if hf_cfg.decoder_start_token_id is not None else hf_cfg.bos_token_id
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id) == (hf_cfg.pad_token_id, start, hf_cfg.eos_token_id, 3)


# ---- numerics -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_encoder_output_matches_transformers_at_real_tokens(hf, name):
    d, model = hf(name)
    ours = load_multilingual_model(d)
    src, mask, _ = _batch(model)
    with torch.no_grad():
        ref = model.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state
        memory = ours.encode(src)
    diff = (memory - ref)[mask].abs().max().item()
    assert diff <= 1e-5, f"{name}: max |encoder diff| {diff:.2e}"


@pytest.mark.parametrize("name", MODELS)
def test_teacher_forced_logits_and_decode_steps_match_transformers(hf, name):
    d, model = hf(name)
    ours = load_multilingual_model(d)
    src, mask, tgt = _batch(model, seed=1)
    ref = _hf_logits(model, src, mask, tgt)
    with torch.no_grad():
        logits = ours(src, tgt)
    diff = (logits - ref).abs().max().item()
    print(f"{name}: max |logits diff| = {diff:.2e} (logit std {ref.std().item():.2f})")
    assert ref.std() > 1.0, "logits too flat to show a wrong mapping"
    assert diff <= 1e-4

    stepped = step_by_step_log_probs(ours, src, tgt)
    want = torch.log_softmax(ref, dim=-1)
    pad = ours.config.pad_id
    assert torch.all(stepped[..., pad] == float("-inf"))  # nmtserve never emits pad
    keep = torch.arange(want.shape[-1]) != pad
    assert (stepped[..., keep] - want[..., keep]).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", ["m2m100", "mbart"])
def test_every_position_the_tables_hold_matches(hf, name):
    """Targets of max_position_embeddings tokens: positions 0 .. max - 1, table rows up to max + 1."""
    d, model = hf(name)
    ours = load_multilingual_model(d)
    src, mask, tgt = _batch(model, seed=2, lengths=(MAX_POSITIONS, 5), tgt_len=MAX_POSITIONS)
    ref = _hf_logits(model, src, mask, tgt)
    with torch.no_grad():
        assert (ours(src, tgt) - ref).abs().max().item() <= 1e-4
    keep = torch.arange(ref.shape[-1]) != ours.config.pad_id
    want = torch.log_softmax(ref, dim=-1)[..., keep]
    assert (step_by_step_log_probs(ours, src, tgt)[..., keep] - want).abs().max().item() <= 1e-4
    with pytest.raises(IndexError):  # one more position is beyond the table
        ours.encode(torch.full((1, MAX_POSITIONS + 1), 5))


@pytest.mark.parametrize(("name", "change"), [
    ("m2m100", dict(position_layout="concat")),  # Marian's frequencies 10000^(-2i/d)
    ("m2m100", dict(position_offset=0)),
    ("mbart", dict(position_offset=0)),  # position p reads row p, not p + 2
    ("mbart", dict(embedding_norm=False)),
])
def test_a_wrong_architecture_is_caught_by_the_comparison(hf, name, change):
    d, model = hf(name)
    config, state = multilingual_to_nmtserve(read_multilingual_directory(d))
    config = TransformerConfig(**{**config.to_dict(), **change})
    if config.learned_positions and config.position_offset == 0:
        state = {k: v[:-2] if k.endswith("pos_lut.weight") else v for k, v in state.items()}
    if not config.embedding_norm:
        state = {k: v for k, v in state.items() if not k.startswith(("src_embed.norm", "tgt_embed.norm"))}
    wrong = Transformer(config).eval()
    load_state_dict_strict(wrong, state, "broken")
    src, mask, tgt = _batch(model, seed=1)
    with torch.no_grad():
        assert (wrong(src, tgt) - _hf_logits(model, src, mask, tgt)).abs().max().item() > 1e-2


# ---- weight files -------------------------------------------------------------------------------
def _write_bin(model, directory: Path, shards: int) -> None:
    """A torch.save'd state dict with every tied alias, as older uploads hold them (M2M100's with its
    sinusoid buffers, as transformers 4.x files before they became non-persistent); sharded with an index."""
    state = model.state_dict()
    state.update({k: v for k, v in model.named_buffers() if k.endswith("embed_positions.weights")})
    assert "lm_head.weight" in state and "model.encoder.embed_tokens.weight" in state
    if shards == 1:
        torch.save(state, directory / "pytorch_model.bin")
        return
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        shard = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = names[i::shards]
        torch.save({k: state[k] for k in part}, directory / shard)
        weight_map.update(dict.fromkeys(part, shard))
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))


@pytest.mark.parametrize("name", ["m2m100", "mbart"])
@pytest.mark.parametrize("form", ["sharded-safetensors", "bin", "sharded-bin"])
def test_every_weight_file_form_gives_the_same_model(hf, tmp_path, name, form):
    d, model = hf(name)
    if form == "sharded-safetensors":
        model.save_pretrained(tmp_path, max_shard_size="40KB")
        assert (tmp_path / "model.safetensors.index.json").is_file()
    else:
        copy_directory(d, tmp_path, drop=("model.safetensors",))
        _write_bin(model, tmp_path, shards=1 if form == "bin" else 3)
    src, mask, tgt = _batch(model, seed=3)
    with torch.no_grad():
        assert (load_multilingual_model(tmp_path)(src, tgt) - _hf_logits(model, src, mask, tgt)).abs().max() <= 1e-4


# ---- export -------------------------------------------------------------------------------------
def test_imported_models_export_to_onnx_and_pass_parity(hf, tmp_path):
    """Learned and offset positions and layernorm_embedding are inside the exported graphs too."""
    from helpers import sources

    from nmtserve.export.onnx_export import dims_of, export_decoder, export_encoder
    from nmtserve.export.parity import check_parity
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    for name in ("m2m100", "mbart"):
        model = load_multilingual_model(hf(name)[0])
        out = tmp_path / name
        export_encoder(model, out / "encoder.onnx")
        export_decoder(model, out / "decoder.onnx")
        c, dims = model.config, dims_of(model)
        spec = ModelSpec(layers=dims.layers, heads=dims.heads, d_k=dims.d_k, vocab=dims.vocab,
                         max_positions=c.max_positions, pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id,
                         unk_id=c.unk_id)
        onnx_model = OnnxModel(out / "encoder.onnx", out / "decoder.onnx", spec, threads=1)
        report = check_parity(model, onnx_model, sources(12, c.src_vocab_size), SearchOptions(beam_size=3, max_length=20))
        assert report.passed, f"{name}: {report.summary()}"


# ---- generation settings and special ids ---------------------------------------------------------
def test_generation_settings_are_recorded(hf, tmp_path):
    d, _ = hf("mbart")
    gen_dir = copy_directory(d, tmp_path / "generation")
    gen = json.loads((gen_dir / "generation_config.json").read_text())
    gen.update(num_beams=5, max_length=200, early_stopping=True, length_penalty=1.2, forced_bos_token_id=7)
    (gen_dir / "generation_config.json").write_text(json.dumps(gen))
    settings = read_multilingual_directory(gen_dir).generation_settings
    assert settings == dict(decoder_start_token_id=2, forced_bos_token_id=7, forced_eos_token_id=2, max_length=200,
                            num_beams=5, early_stopping=True, length_penalty=1.2)

    legacy = copy_directory(d, tmp_path / "legacy", drop=("generation_config.json",))  # transformers 4.x-era config.json
    edit_config(legacy, num_beams=4, max_length=128, early_stopping=True)
    assert read_multilingual_directory(legacy).generation_settings == dict(
        decoder_start_token_id=2, forced_eos_token_id=2, max_length=128, num_beams=4, early_stopping=True)


def test_unk_id_comes_from_the_argument_config_or_tokenizer_files(hf, tmp_path):
    d, _ = hf("m2m100")
    directory = copy_directory(d, tmp_path / "unk")
    assert load_multilingual_model(directory).config.unk_id == 3  # fairseq's <unk>
    (directory / "tokenizer.json").write_text(json.dumps(
        {"added_tokens": [{"id": 1, "content": "<pad>"}, {"id": 5, "content": "<unk>"}], "model": {}}))
    assert load_multilingual_model(directory).config.unk_id == 5
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"unk_token": "<unk>", "added_tokens_decoder": {"0": {"content": "<s>"}, "7": {"content": "<unk>"}}}))
    assert load_multilingual_model(directory).config.unk_id == 7
    edit_config(directory, unk_token_id=9)
    assert load_multilingual_model(directory).config.unk_id == 9
    assert load_multilingual_model(directory, unk_id=11).config.unk_id == 11


# ---- what cannot be imported ----------------------------------------------------------------------
# config.json of facebook/mbart-large-50-many-to-many-mmt (transformers 4.4 era), abridged: legacy
# BartConfig keys holding mBART's values must not be reported.
MBART50_CONFIG = {
    "activation_dropout": 0.0, "activation_function": "relu", "add_bias_logits": False, "add_final_layer_norm": True,
    "architectures": ["MBartForConditionalGeneration"], "d_model": 1024, "decoder_attention_heads": 16,
    "decoder_ffn_dim": 4096, "decoder_layers": 12, "decoder_start_token_id": 2, "early_stopping": True,
    "encoder_attention_heads": 16, "encoder_ffn_dim": 4096, "encoder_layers": 12, "eos_token_id": 2,
    "forced_eos_token_id": 2, "is_encoder_decoder": True, "max_length": 200, "max_position_embeddings": 1024,
    "model_type": "mbart", "normalize_before": True, "normalize_embedding": True, "num_beams": 5,
    "pad_token_id": 1, "scale_embedding": True, "static_position_embeddings": False, "vocab_size": 250054,
}
NLLB_CONFIG = {
    "activation_function": "relu", "architectures": ["M2M100ForConditionalGeneration"], "bos_token_id": 0,
    "d_model": 1024, "decoder_attention_heads": 16, "decoder_ffn_dim": 4096, "decoder_layers": 12,
    "decoder_start_token_id": 2, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096, "encoder_layers": 12,
    "eos_token_id": 2, "is_encoder_decoder": True, "max_length": 200, "max_position_embeddings": 1024,
    "model_type": "m2m_100", "pad_token_id": 1, "scale_embedding": True, "vocab_size": 256206,
}


def test_published_configs_have_nothing_unsupported():
    assert unsupported_options(MBART50_CONFIG) == []
    assert unsupported_options(NLLB_CONFIG) == []


def test_unsupported_options_are_all_listed(hf, tmp_path):
    d, _ = hf("mbart")
    odd = copy_directory(d, tmp_path / "odd")
    edit_config(odd, add_bias_logits=True, decoder_attention_heads=2, decoder_ffn_dim=48,
                 activation_function="gelu_new", normalize_before=False, static_position_embeddings=True,
                 architectures=["MBartForCausalLM"], eos_token_id=[2, 3])
    with pytest.raises(MultilingualImportError) as err:
        load_multilingual_model(odd)
    for expected in ("add_bias_logits=True", "decoder_attention_heads=2", "decoder_ffn_dim=48",
                     "activation_function='gelu_new'", "normalize_before=False",
                     "static_position_embeddings=True", "MBartForCausalLM", "eos_token_id=[2, 3]"):
        assert expected in str(err.value)

    bart = copy_directory(d, tmp_path / "bart")
    edit_config(bart, model_type="bart")
    with pytest.raises(MultilingualImportError, match="model_type='bart'"):
        load_multilingual_model(bart)

    m2m, _ = hf("m2m100")
    start_is_pad = copy_directory(m2m, tmp_path / "start-is-pad", drop=("generation_config.json",))
    edit_config(start_is_pad, decoder_start_token_id=1, layernorm_embedding=True)
    with pytest.raises(MultilingualImportError) as err:
        load_multilingual_model(start_is_pad)
    assert "decoder_start_token_id=1 is the pad id" in str(err.value)
    assert "layernorm_embedding=True" in str(err.value)


def test_missing_surplus_and_misshaped_weights_are_named(hf, tmp_path):
    from safetensors.torch import load_file, save_file

    d, _ = hf("mbart")
    broken = copy_directory(d, tmp_path / "mbart")
    weights = load_file(str(broken / "model.safetensors"))
    del weights["model.encoder.layers.1.fc2.bias"]
    del weights["model.decoder.layernorm_embedding.weight"]
    weights["model.encoder.layers.0.extra_norm.weight"] = torch.ones(32)
    weights["model.decoder.embed_positions.weight"] = torch.zeros(MAX_POSITIONS, 32)  # offset rows missing
    save_file(weights, str(broken / "model.safetensors"))
    with pytest.raises(MultilingualImportError) as err:
        load_multilingual_model(broken)
    message = str(err.value)
    for expected in ("missing tensors: model.decoder.layernorm_embedding.weight, model.encoder.layers.1.fc2.bias",
                     "no nmtserve counterpart: model.encoder.layers.0.extra_norm.weight",
                     f"model.decoder.embed_positions.weight: checkpoint ({MAX_POSITIONS}, 32) != model "
                     f"({MAX_POSITIONS + 2}, 32)"):
        assert expected in message

    m2m, _ = hf("m2m100-pad0-untied")
    surplus = copy_directory(m2m, tmp_path / "m2m100")
    weights = load_file(str(surplus / "model.safetensors"))
    del weights["lm_head.weight"]  # untied: nothing to fall back on
    weights["model.encoder.layernorm_embedding.weight"] = torch.ones(32)  # mBART's, not M2M100's
    weights["final_logits_bias"] = torch.zeros(1, 120)
    weights["model.encoder.embed_positions.weights"] = torch.zeros(MAX_POSITIONS + 2, 32)  # learned, not fairseq's
    save_file(weights, str(surplus / "model.safetensors"))
    with pytest.raises(MultilingualImportError) as err:
        load_multilingual_model(surplus)
    message = str(err.value)
    for expected in ("missing tensor lm_head.weight", "no nmtserve counterpart: final_logits_bias",
                     "M2M100ForConditionalGeneration does not have: model.encoder.layernorm_embedding.weight",
                     "model.encoder.embed_positions.weights is not M2M100's sinusoid table"):
        assert expected in message


def test_a_directory_without_weights_or_config_is_reported(tmp_path):
    with pytest.raises(MultilingualImportError) as err:
        load_multilingual_model(tmp_path)
    assert "config.json is missing" in str(err.value) and "no PyTorch weights" in str(err.value)
