"""nmtserve checkpoint -> Hugging Face Marian directory (``nmtserve.model.marian_export``).

Checked against ``transformers`` itself and against nmtserve's own importer (``load_marian``):

* the demo model (interleaved positions, exported in the permuted residual basis): teacher-forced
  log-probs of ``MarianMTModel`` equal nmtserve's, ``MarianTokenizer`` ids equal nmtserve's, and
  ``generate`` with the exported generation config equals nmtserve's beam search token for token;
* ``load_marian`` reads the export back as the same function: identical in float64 (the
  permutation is exact), within float32 rounding otherwise (the permuted sums are added in
  another order);
* small random models cover the other embedding layouts (separate / untied tables, a logits
  bias, "concat" positions) and each activation;
* what Marian cannot express is refused, naming every option, and nothing is written.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses:UserWarning"),
              pytest.mark.usefixtures("one_torch_thread")]

from transformers import MarianMTModel, MarianTokenizer  # noqa: E402

from nmtserve.decoding.search import SearchOptions  # noqa: E402
from nmtserve.graphs import pad_batch  # noqa: E402
from nmtserve.model.checkpoint import Checkpoint  # noqa: E402
from nmtserve.model.config import TransformerConfig  # noqa: E402
from nmtserve.model.importers.marian import load_marian  # noqa: E402
from nmtserve.model.marian_export import (  # noqa: E402
    MarianExportError,
    position_permutation,
    save_as_marian,
)
from nmtserve.model.reference import reference_decode  # noqa: E402
from nmtserve.model.transformer import Transformer, sinusoidal_positions  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
N_SENTENCES = 8
MAX_NEW_TOKENS = 64
EDGE_TEXTS = [
    "",
    "  spaced   out  ",
    "snow \u2603 man",
    "\u00dcn\u00efc\u00f6d\u00e9 \u2026",
    "12:05",
]




@pytest.fixture(scope="module")
def exported(tmp_path_factory, demo_checkpoint):
    return save_as_marian(demo_checkpoint, tmp_path_factory.mktemp("export") / "en-fr-marian")


@pytest.fixture(scope="module")
def hf(exported):
    """(MarianMTModel, MarianTokenizer) loaded from the export; no weight may be missing."""
    model, info = MarianMTModel.from_pretrained(exported, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if "embed_positions" not in k]
    assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval(), MarianTokenizer.from_pretrained(exported)


@pytest.fixture(scope="module")
def pairs(demo_sentences):
    targets = (DEMO / "test.fr").read_text(encoding="utf-8").splitlines()
    return list(zip(demo_sentences[:N_SENTENCES], targets[:N_SENTENCES], strict=True))


def _teacher_forced(ckpt: Checkpoint, pairs) -> tuple[torch.Tensor, torch.Tensor]:
    """nmtserve's own (source ids, decoder input) batch: bos + target ids without the last EOS."""
    src = pad_batch([ckpt.tokenizer.encode(s) for s, _ in pairs], ckpt.config.pad_id)
    tgt = pad_batch(
        [[ckpt.config.bos_id, *ckpt.tokenizer.encode_target(t)[:-1]] for _, t in pairs],
        ckpt.config.pad_id,
    )
    return torch.from_numpy(src), torch.from_numpy(tgt)


def _hf_log_probs(
    model: MarianMTModel, src: torch.Tensor, tgt_in: torch.Tensor, pad: int
) -> torch.Tensor:
    with torch.no_grad():
        logits = model(
            input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt_in
        ).logits
    return torch.log_softmax(logits, dim=-1)


def _log_probs(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(src, tgt_in), dim=-1)


# ---- the demo model -------------------------------------------------------------------------------
def test_interleaved_table_is_a_column_permutation_of_marians(hf):
    """Same frequencies, only the column order differs: P maps nmtserve's table onto Marian's own."""
    model, _ = hf
    cfg = model.config
    perm = position_permutation(cfg.d_model, "interleaved")
    ours = sinusoidal_positions(cfg.max_position_embeddings, cfg.d_model, "interleaved")[:, perm]
    assert torch.equal(
        ours, sinusoidal_positions(cfg.max_position_embeddings, cfg.d_model, "concat")
    )
    for table in (
        model.model.encoder.embed_positions.weight,
        model.model.decoder.embed_positions.weight,
    ):
        assert (table.detach() - ours).abs().max().item() <= 1e-6


def test_exported_files_and_config(exported, demo_checkpoint, hf):
    names = {p.name for p in exported.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "vocab.json",
        "tokenizer_config.json",
    } <= names
    cfg, c = hf[0].config, demo_checkpoint.config
    assert (cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id) == (
        c.bos_id,
        c.pad_id,
        c.eos_id,
    )
    assert (cfg.d_model, cfg.encoder_layers, cfg.decoder_layers, cfg.activation_function) == (
        192,
        3,
        3,
        "relu",
    )
    gen = hf[0].generation_config
    assert (
        gen.bad_words_ids == [[c.pad_id]]
        and gen.forced_eos_token_id is None
        and not gen.renormalize_logits
    )
    vocab = json.loads((exported / "vocab.json").read_text(encoding="utf-8"))
    assert (vocab["<pad>"], vocab["</s>"], vocab["<unk>"]) == (c.pad_id, c.eos_id, c.unk_id)


def test_marian_tokenizer_gives_nmtserve_ids(hf, demo_checkpoint, demo_sentences, pairs):
    _, tok = hf
    ours = demo_checkpoint.tokenizer
    unk_seen = False
    for text in demo_sentences[:100] + EDGE_TEXTS:
        ids = tok(text)["input_ids"]
        assert ids == ours.encode(text), text
        unk_seen |= ours.unk_id in ids
    assert unk_seen, "no text exercised the <unk> mapping"
    for _, target in pairs:
        ids = tok(text_target=target)["input_ids"]
        assert ids == ours.encode_target(target), target
        assert tok.decode(ids, skip_special_tokens=True) == ours.decode(ids), target


def test_logits_match_transformers(hf, demo_checkpoint, pairs):
    model, tok = hf
    # MarianTokenizer's batch is nmtserve's batch.
    batch = tok(
        [s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt"
    )
    src, tgt_in = _teacher_forced(demo_checkpoint, pairs)
    assert torch.equal(batch["input_ids"], src)
    ref = _log_probs(demo_checkpoint.model, src, tgt_in)
    diff = (
        (_hf_log_probs(model, src, tgt_in, demo_checkpoint.config.pad_id) - ref).abs().max().item()
    )
    print(f"demo: max |log-prob diff| MarianMTModel vs nmtserve = {diff:.2e}")
    assert diff <= 1e-4


def test_load_marian_reads_the_export_back(exported, demo_checkpoint, pairs):
    back = load_marian(exported)
    c = demo_checkpoint.config
    assert back.config.position_layout == "concat"
    assert back.config == TransformerConfig(**{**c.to_dict(), "position_layout": "concat"})
    for text, _ in pairs:
        assert back.tokenizer.encode(text) == demo_checkpoint.tokenizer.encode(text)
    src, tgt_in = _teacher_forced(demo_checkpoint, pairs)
    with torch.no_grad():
        logits32 = (back.model(src, tgt_in) - demo_checkpoint.model(src, tgt_in)).abs().max().item()
        lp32 = (
            (_log_probs(back.model, src, tgt_in) - _log_probs(demo_checkpoint.model, src, tgt_in))
            .abs()
            .max()
        )
        ours64, back64 = (
            copy.deepcopy(demo_checkpoint.model).double(),
            copy.deepcopy(back.model).double(),
        )
        logits64 = (back64(src, tgt_in) - ours64(src, tgt_in)).abs().max().item()
    print(
        f"demo: load_marian(export) vs original: max |logits diff| {logits32:.2e} (float32), "
        f"{logits64:.2e} (float64); log-probs {lp32.item():.2e}"
    )
    assert logits64 <= 1e-10  # the same function: the permutation is exact
    assert logits32 <= 5e-5  # float32: sums over d_model added in the permuted order (~1e-5 seen)


def test_beam_search_matches_generate(hf, demo_checkpoint, pairs):
    """generate with the exported generation_config (pad banned, no forced EOS) = nmtserve's search."""
    model, tok = hf
    texts = [s for s, _ in pairs]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **batch,
            num_beams=4,
            early_stopping=False,
            length_penalty=1.0,
            do_sample=False,
            max_length=MAX_NEW_TOKENS + 1,  # counts the decoder start token
        )
    eos, pad = demo_checkpoint.config.eos_id, demo_checkpoint.config.pad_id
    theirs = []
    for row in out[:, 1:].tolist():
        tokens = row[: row.index(eos) + 1] if eos in row else row
        while tokens and tokens[-1] == pad:  # pad is banned: trailing pads are generate's filler
            tokens.pop()
        theirs.append(tokens)
    ours = reference_decode(
        demo_checkpoint.model,
        [demo_checkpoint.tokenizer.encode(t) for t in texts],
        SearchOptions(beam_size=4, max_length=MAX_NEW_TOKENS, length_penalty=1.0),
    )
    assert [h[0].tokens for h in ours] == theirs
    assert all(t and t[-1] == eos for t in theirs), "a decode hit the maximum length"
    print("demo:", [tok.decode(t, skip_special_tokens=True) for t in theirs[:2]])


# ---- other layouts (small random models with the demo's tokenizer) --------------------------------
VARIANTS = {
    "concat-separate-untied-bias-swish": dict(
        position_layout="concat",
        share_embeddings=False,
        tie_output=False,
        final_logits_bias=True,
        activation="swish",
    ),
    "interleaved-shared-untied-gelu": dict(
        share_embeddings=True, tie_output=False, activation="gelu"
    ),
    "interleaved-separate-tied-unscaled": dict(
        share_embeddings=False, tie_output=True, scale_embedding=False
    ),
}


def _tiny_config(**changes) -> TransformerConfig:
    """A small model over the demo's 800-piece vocabulary."""
    base = dict(src_vocab_size=800, tgt_vocab_size=800, d_model=32, h=4, d_ff=64, encoder_layers=1,
                decoder_layers=1)
    return TransformerConfig(**{**base, **changes})


@pytest.mark.parametrize("name", VARIANTS)
def test_other_layouts_round_trip(name, demo_checkpoint, pairs, tmp_path):
    config = _tiny_config(encoder_layers=2, max_positions=128, **VARIANTS[name])
    torch.manual_seed(0)
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # biases and LayerNorm parameters away from their zero/one init
                p.add_(torch.randn_like(p) * 0.1)
        if config.final_logits_bias:
            model.final_logits_bias.normal_(0.0, 1.0)
    ckpt = Checkpoint(model=model, tokenizer=demo_checkpoint.tokenizer, path=tmp_path / "random")
    out = save_as_marian(ckpt, tmp_path / "marian")
    hf_model, info = MarianMTModel.from_pretrained(out, output_loading_info=True)
    assert (
        not [k for k in info["missing_keys"] if "embed_positions" not in k]
        and not info["unexpected_keys"]
    )
    src, tgt_in = _teacher_forced(ckpt, pairs)
    ref = _log_probs(model, src, tgt_in)
    diff_hf = (_hf_log_probs(hf_model.eval(), src, tgt_in, config.pad_id) - ref).abs().max().item()
    back = load_marian(out)
    diff_back = (_log_probs(back.model, src, tgt_in) - ref).abs().max().item()
    print(f"{name}: max |log-prob diff| MarianMTModel {diff_hf:.2e}, load_marian {diff_back:.2e}")
    assert diff_hf <= 1e-4 and diff_back <= 1e-5
    assert (
        back.config.share_embeddings,
        back.config.tie_output,
        back.config.final_logits_bias,
    ) == (config.share_embeddings, config.tie_output, config.final_logits_bias)


# ---- what Marian cannot express -------------------------------------------------------------------
def test_unsupported_options_are_refused_naming_each(demo_checkpoint, tmp_path):
    config = _tiny_config(pre_norm=True, layer_norm_eps=1e-6)
    ckpt = Checkpoint(
        model=Transformer(config).eval(), tokenizer=demo_checkpoint.tokenizer, path=tmp_path / "x"
    )
    with pytest.raises(MarianExportError) as err:
        save_as_marian(ckpt, tmp_path / "marian")
    assert isinstance(err.value, ValueError)
    assert "pre_norm=True" in str(err.value) and "layer_norm_eps=1e-06" in str(err.value)
    assert not (tmp_path / "marian").exists()
    assert not list(tmp_path.iterdir())

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(MarianExportError, match="not an empty directory"):
        save_as_marian(demo_checkpoint, tmp_path / "busy")
