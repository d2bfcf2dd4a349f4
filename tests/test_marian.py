"""Hugging Face Marian (opus-mt) import, checked against ``transformers`` itself.

``transformers`` is a test dependency only (``nmtserve.model.importers.marian`` never imports it). The
checkpoints are made here: tiny sentencepiece models trained on generated text, a ``vocab.json``
built from their pieces (ids unrelated to sentencepiece's, a few pieces left out so that ``<unk>``
mapping is exercised, a ``>>fra<<`` language code), and random ``MarianMTModel``s written with
``save_pretrained``. A random model is nearly uniform and ignores its source; the cross-attention,
the last LayerNorm and the EOS row are scaled so that outputs depend on the source, beams differ
and EOS is reachable (the EOS bias is calibrated so that a fair share, 25-50% here, of the beam
decodes end with EOS and the rest hit the maximum length).

Beam search against ``generate`` uses the settings below; each one has a reason:

* ``bad_words_ids=[[pad]]``: nmtserve's decoder always gives pad -inf *after* the log-softmax,
  which is transformers' NoBadWords processor (opus-mt hub configs set it too).
* ``forced_eos_token_id=None``: MarianConfig's default 0 forces EOS (log p := 0) at the last step
  that ``max_length`` allows; nmtserve finishes that step's top-K candidates whatever their token.
  Only sentences that reach the maximum length can differ, so it is switched off.
* ``renormalize_logits``: False on both sides by default. With ``renormalize_logits: true`` in
  generation_config.json (opus-mt hub configs since transformers PR #25459) ``load_marian`` bans pad
  before the log-softmax (``final_logits_bias[pad] = -inf``), which equals NoBadWords followed by
  LogitNormalization; ``test_renormalize_logits_generation_config`` covers it.
* ``max_new_tokens=N`` with ``SearchOptions(max_length=N)``: both count generated tokens including
  EOS (transformers' ``max_length`` would also count the decoder start token).
* the tokenizer's ``attention_mask`` is passed: generate does not derive it for encoder-decoders.

Remaining known differences: transformers sums beam scores in float32, nmtserve in float64, and
``torch.topk`` orders ties arbitrarily, so a near-tie may pick another beam; hence ">= 99%" (all
200 agree in practice).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import copy_directory, edit_config

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses:UserWarning"),
              pytest.mark.usefixtures("one_torch_thread")]
spm = pytest.importorskip("sentencepiece")

from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

from nmtserve.decoding.search import SearchOptions  # noqa: E402
from nmtserve.demo.corpus import generate_pairs  # noqa: E402
from nmtserve.model.importers.marian import (  # noqa: E402
    MarianImportError,
    convert_marian,
    load_marian,
    unsupported_options,
)
from nmtserve.model.reference import reference_decode  # noqa: E402

MAX_NEW_TOKENS = 20
N_SENTENCES = 200

# name -> (MarianConfig overrides, sharpening/bias options of make_marian)
CONFIGS: dict[str, tuple[dict, dict]] = {
    "swish-shared-tied": (dict(activation_function="swish"), dict()),
    "relu-separate-untied-bias": (
        dict(activation_function="relu", share_encoder_decoder_embeddings=False, tie_word_embeddings=False,
             extra_target_rows=3),
        dict(bias_std=1.0)),
    "gelu-shared-untied-bias": (
        dict(activation_function="gelu", share_encoder_decoder_embeddings=True, tie_word_embeddings=False),
        dict(bias_std=1.0)),
    "silu-separate-tied-6heads-3x1-unscaled": (
        dict(activation_function="silu", share_encoder_decoder_embeddings=False, tie_word_embeddings=True,
             d_model=48, encoder_attention_heads=6, decoder_attention_heads=6, encoder_layers=3,
             decoder_layers=1, scale_embedding=False),
        dict()),
}

BEAM_CONFIGS = ("swish-shared-tied", "relu-separate-untied-bias")


# ---- fixtures -----------------------------------------------------------------------------------


def _train_spm(texts: list[str]) -> bytes:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buf, vocab_size=150, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )
    return buf.getvalue()


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str]]:
    return generate_pairs(800, 7)


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory, corpus) -> Path:
    """source.spm, target.spm and a Marian vocab.json: </s> 0, <unk> 1, >>fra<< 2, pieces, <pad> last."""
    d = tmp_path_factory.mktemp("marian-tokenizer")
    protos = [_train_spm([s for s, _ in corpus]), _train_spm([t for _, t in corpus])]
    (d / "source.spm").write_bytes(protos[0])
    (d / "target.spm").write_bytes(protos[1])
    pieces: list[str] = []
    for proto in protos:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)) and sp.id_to_piece(i) not in pieces:
                pieces.append(sp.id_to_piece(i))
    vocab = {"</s>": 0, "<unk>": 1, ">>fra<<": 2}
    for piece in pieces[:-3]:  # the rarest target pieces are left out: they must map to <unk>
        vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
    return d


def _calibrate_eos(model: MarianMTModel, tok: MarianTokenizer) -> None:
    """Shift the EOS bias until about half of the beam decodes of other sentences end with EOS.

    A fixed shift is fragile: whether beams end early, never, or at varied lengths depends on
    the seed and the shapes of a random model.
    """
    pad = model.config.pad_token_id
    batch = tok([s for s, _ in generate_pairs(16, 99)], padding=True, return_tensors="pt")
    base, low, high = model.final_logits_bias[0, 0].item(), -8.0, 8.0
    for _ in range(4):
        mid = (low + high) / 2
        model.final_logits_bias[0, 0] = base + mid
        out = model.generate(**batch, num_beams=4, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                             bad_words_ids=[[pad]], forced_eos_token_id=None)
        ended = (out[:, 1:] == 0).any(-1).float().mean().item()
        low, high = (low, mid) if ended > 0.5 else (mid, high)


def make_marian(directory: Path, tokenizer_files: Path, overrides: dict, *, bias_std: float = 0.0,
                pad_bias: float = 0.0, renormalize_logits: bool | None = None, calibrate: bool = False,
                seed: int = 0) -> tuple[MarianMTModel, MarianTokenizer]:
    """A random MarianMTModel + MarianTokenizer saved with save_pretrained into ``directory``."""
    vocab = json.loads((tokenizer_files / "vocab.json").read_text(encoding="utf-8"))
    n, pad = len(vocab), vocab["<pad>"]
    overrides = dict(overrides)
    extra = overrides.pop("extra_target_rows", 0)
    kw = dict(vocab_size=n, decoder_vocab_size=n + extra, d_model=32, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=2,
              decoder_layers=2, scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad,
              eos_token_id=0, forced_eos_token_id=0, max_position_embeddings=128, init_std=0.1,
              dropout=0.1)
    kw.update(overrides)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**kw)).eval()
    with torch.no_grad():
        for layer in [*model.model.encoder.layers, *model.model.decoder.layers]:
            for norm in (layer.self_attn_layer_norm, layer.final_layer_norm):
                norm.weight.normal_(1.0, 0.1)
                norm.bias.normal_(0.0, 0.1)
        for layer in model.model.decoder.layers:  # sharp, strong cross-attention: outputs follow the source
            layer.encoder_attn.q_proj.weight.mul_(4.0)
            layer.encoder_attn.v_proj.weight.mul_(4.0)
        model.model.decoder.layers[-1].final_layer_norm.weight.mul_(4.0)  # peaky output distributions
        model.lm_head.weight[0].mul_(3.0)  # the EOS logit varies a lot from step to step ...
        if bias_std:
            model.final_logits_bias.normal_(0.0, bias_std)
        model.final_logits_bias[0, pad] += pad_bias
    tok = MarianTokenizer(source_spm=str(tokenizer_files / "source.spm"),
                          target_spm=str(tokenizer_files / "target.spm"), vocab=str(tokenizer_files / "vocab.json"))
    if calibrate:  # ... around a level where decodes end at varied lengths
        _calibrate_eos(model, tok)
    if renormalize_logits is not None:
        model.generation_config.renormalize_logits = renormalize_logits
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return model, tok


@pytest.fixture(scope="module")
def marian(tmp_path_factory, tokenizer_files):
    """name -> (directory, MarianMTModel, MarianTokenizer), built once per module."""
    cache: dict[str, tuple[Path, MarianMTModel, MarianTokenizer]] = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            overrides, options = CONFIGS[name]
            cache[name] = (d, *make_marian(d, tokenizer_files, overrides, calibrate=name in BEAM_CONFIGS, **options))
        return cache[name]

    return get


def _teacher_forced_logits(model: MarianMTModel, tok: MarianTokenizer, pairs) -> tuple[torch.Tensor, ...]:
    batch = tok([s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
    labels = batch["labels"]
    start = torch.full((labels.shape[0], 1), model.config.decoder_start_token_id)
    tgt_in = torch.cat([start, labels[:, :-1]], dim=1)  # shift_tokens_right
    with torch.no_grad():
        ref = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    decoder_input_ids=tgt_in).logits
    return batch["input_ids"], tgt_in, ref


def _generated(sequences: torch.Tensor, eos: int, pad: int) -> list[list[int]]:
    """generate's rows -> generated tokens (start token dropped, EOS kept, filler pads dropped)."""
    out = []
    for row in sequences.tolist():
        tokens = []
        for t in row[1:]:
            tokens.append(t)
            if t == eos:
                break
        while tokens and tokens[-1] == pad:  # pad is banned, so trailing pads are filler
            tokens.pop()
        out.append(tokens)
    return out


def _agreement(model: MarianMTModel, tok: MarianTokenizer, ckpts: list, texts: list[str], *,
               renormalize: bool) -> list[tuple[float, str]]:
    """Beam-decode ``texts`` with generate and with each nmtserve checkpoint: (agreement, summary) each."""
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **batch, num_beams=4, max_new_tokens=MAX_NEW_TOKENS, length_penalty=1.0, early_stopping=False,
            do_sample=False, bad_words_ids=[[pad]], forced_eos_token_id=None, renormalize_logits=renormalize,
        )
    hf = _generated(out, eos, pad)
    ended = sum(bool(h) and h[-1] == eos for h in hf)
    # A degenerate random model (every decode alike, or never/always EOS) would prove little.
    assert 0.1 * len(texts) < ended < 0.95 * len(texts), f"{ended} of {len(texts)} decodes end with EOS"
    assert len({tuple(h) for h in hf}) >= 10, "outputs barely depend on the source"
    results = []
    for ckpt in ckpts:
        ours = reference_decode(ckpt.model, [ckpt.tokenizer.encode(t) for t in texts],
                                SearchOptions(beam_size=4, max_length=MAX_NEW_TOKENS, length_penalty=1.0))
        same = sum(h == o[0].tokens for h, o in zip(hf, ours, strict=True))
        results.append((same / len(texts), f"{same} of {len(texts)} beam decodes equal generate ({ended} end "
                                           f"with EOS, {len({tuple(h) for h in hf})} distinct outputs)"))
    return results


def test_the_importer_does_not_import_transformers():
    code = "import sys, nmtserve.model.importers.marian; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- tokenization -------------------------------------------------------------------------------
EDGE_TEXTS = ["", "  spaced   out  ", "snow \u2603 man", "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade\u2026", "xL",
              "Thursday, July 21, 1938", "12:05 p.m."]


def test_tokenization_matches_marian_tokenizer(marian, corpus):
    d, _, tok = marian("swish-shared-tied")
    ck = load_marian(d)
    texts = [s for s, _ in corpus[:100]] + EDGE_TEXTS
    targets = [t for _, t in corpus[:100]] + EDGE_TEXTS
    for text in texts:
        assert ck.tokenizer.source.encode(text, out_type=str) == tok.tokenize(text), text
        assert ck.tokenizer.encode(text) == tok(text)["input_ids"], text
    unk_seen = False
    for text in targets:
        ids = tok(text_target=text)["input_ids"]
        assert ck.tokenizer.encode_target(text) == ids, text
        unk_seen |= ck.config.unk_id in ids
        assert ck.tokenizer.decode(ids) == tok.decode(ids, skip_special_tokens=True), text
    assert unk_seen, "no text exercised the <unk> mapping"


def test_tokenization_special_tokens_language_codes_and_unk(marian):
    d, _, tok = marian("swish-shared-tied")
    ck = load_marian(d)
    for text in [">>fra<< the dog", ">>xxx<< the dog", "the cat </s> dog", "a <unk> b", "<pad>"]:
        assert ck.tokenizer.encode(text) == tok(text)["input_ids"], text
    for text in ["snow \u2603 man", "xL"]:
        ids = tok(text_target=text)["input_ids"]
        assert ck.tokenizer.decode(ids) == tok.decode(ids, skip_special_tokens=True), text


# ---- logits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", CONFIGS)
def test_logits_match_transformers(marian, corpus, name):
    d, model, tok = marian(name)
    ck = load_marian(d)
    cfg = ck.config
    hf_cfg = model.config
    assert (cfg.share_embeddings, cfg.tie_output) == (
        hf_cfg.share_encoder_decoder_embeddings and hf_cfg.tie_word_embeddings, hf_cfg.tie_word_embeddings)
    assert cfg.final_logits_bias == bool(model.final_logits_bias.ne(0).any())
    assert (cfg.bos_id, cfg.pad_id, cfg.eos_id, cfg.unk_id) == (hf_cfg.pad_token_id, hf_cfg.pad_token_id, 0, 1)
    src, tgt_in, ref = _teacher_forced_logits(model, tok, corpus[:32])
    with torch.no_grad():
        ours = ck.model(src, tgt_in)
    diff = (ours - ref).abs().max().item()
    print(f"{name}: max |logits diff| = {diff:.2e} (logit std {ref.std().item():.2f})")
    assert diff <= 1e-4


def test_pytorch_model_bin_with_every_alias_loads_without_pickle_code(marian, corpus, tmp_path):
    """Older uploads: a torch.save'd state dict with tied aliases and the position tables."""
    d, model, tok = marian("swish-shared-tied")
    bin_dir = copy_directory(d, tmp_path / "bin", drop=("model.safetensors",))
    state = model.state_dict()
    assert "model.encoder.embed_positions.weight" in state and "lm_head.weight" in state
    torch.save(state, bin_dir / "pytorch_model.bin")
    src, tgt_in, ref = _teacher_forced_logits(model, tok, corpus[:8])
    with torch.no_grad():
        assert (load_marian(bin_dir).model(src, tgt_in) - ref).abs().max().item() <= 1e-4

    marker = tmp_path / "pickle-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save({"final_logits_bias": Payload()}, bin_dir / "pytorch_model.bin")
    with pytest.raises(MarianImportError, match="pytorch_model.bin: cannot be read"):
        load_marian(bin_dir)
    assert not marker.exists()


# ---- beam search --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BEAM_CONFIGS)
def test_beam_search_matches_generate(marian, corpus, name):
    d, model, tok = marian(name)
    ck = load_marian(d)
    started = time.monotonic()
    [(rate, summary)] = _agreement(model, tok, [ck], [s for s, _ in corpus[:N_SENTENCES]], renormalize=False)
    print(f"{name}: {summary}, {time.monotonic() - started:.1f} s")
    assert rate >= 0.99, summary


def test_renormalize_logits_generation_config(tmp_path, tokenizer_files, corpus):
    """renormalize_logits: true (opus-mt hub) -> pad banned before the log-softmax.

    Pad is given a large logit so that the renormalisation changes decisions: without it
    (``renormalize_pad=False``) about a third of these decodes differ from generate.
    """
    overrides, _ = CONFIGS["gelu-shared-untied-bias"]
    model, tok = make_marian(tmp_path, tokenizer_files, overrides, bias_std=1.0, pad_bias=7.0,
                             renormalize_logits=True, calibrate=True)
    ck = load_marian(tmp_path)
    assert ck.model.final_logits_bias[ck.config.pad_id].item() == float("-inf")
    without = load_marian(tmp_path, renormalize_pad=False)
    [(rate, summary), (rate_without, _)] = _agreement(model, tok, [ck, without], [s for s, _ in corpus[:100]],
                                                      renormalize=True)
    print(f"renormalize_logits: {summary}; {rate_without:.0%} without the -inf pad bias")
    assert rate >= 0.99, summary
    assert rate_without < 0.9, "the test no longer tells renormalised from plain log-probs"


# ---- export -------------------------------------------------------------------------------------
def test_export_of_a_marian_directory_passes_parity(marian, tmp_path):
    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.spec import SPEC_FILE, ModelSpec

    d, _, tok = marian("relu-separate-untied-bias")
    repo = tmp_path / "repository"
    report = export(d, ExportOptions(repository=repo, max_source_len=64, max_target_len=64, parity_sentences=8))
    print(report.summary())
    assert report.parity is not None and report.parity.passed
    # The served tokenizer (vocab.json travels with the graphs) tokenizes as MarianTokenizer.
    spec_file = next(repo.rglob(SPEC_FILE))
    served = load_tokenizer(spec_file.parent, ModelSpec.load(spec_file))
    for text in ["The red car costs thirty euros.", "snow \u2603 man"]:
        assert served.encode(text) == tok(text)["input_ids"]


# ---- what cannot be imported ----------------------------------------------------------------------
# config.json of an early opus-mt upload (Helsinki-NLP/opus-mt-en-de, transformers 4.x era): legacy
# BartConfig keys with Marian's values, and generation keys that transformers moves at load time.
LEGACY_OPUS_MT_CONFIG = {
    "_num_labels": 3, "activation_dropout": 0.0, "activation_function": "swish", "add_bias_logits": False,
    "add_final_layer_norm": False, "architectures": ["MarianMTModel"], "attention_dropout": 0.0,
    "bad_words_ids": [[58100]], "bos_token_id": 0, "classif_dropout": 0.0, "classifier_dropout": 0.0,
    "d_model": 512, "decoder_attention_heads": 8, "decoder_ffn_dim": 2048, "decoder_layerdrop": 0.0,
    "decoder_layers": 6, "decoder_start_token_id": 58100, "decoder_vocab_size": 58101, "dropout": 0.1,
    "encoder_attention_heads": 8, "encoder_ffn_dim": 2048, "encoder_layerdrop": 0.0, "encoder_layers": 6,
    "eos_token_id": 0, "extra_pos_embeddings": 58101, "forced_eos_token_id": 0, "gradient_checkpointing": False,
    "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}, "init_std": 0.02, "is_encoder_decoder": True,
    "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}, "max_length": 512, "max_position_embeddings": 512,
    "model_type": "marian", "normalize_before": False, "normalize_embedding": False, "num_beams": 4,
    "num_hidden_layers": 6, "pad_token_id": 58100, "scale_embedding": True,
    "share_encoder_decoder_embeddings": True, "static_position_embeddings": True,
    "transformers_version": "4.22.0.dev0", "use_cache": True, "vocab_size": 58101,
}


def test_a_legacy_opus_mt_config_has_nothing_unsupported():
    assert unsupported_options(LEGACY_OPUS_MT_CONFIG) == []
    assert unsupported_options({**LEGACY_OPUS_MT_CONFIG, "normalize_before": True}) == [
        "normalize_before=True: pre-norm layers (Marian is post-norm)"]


def test_unsupported_checkpoints_fail_naming_every_problem(marian, tmp_path):
    from nmtserve.export.pipeline import ExportError, ExportOptions, export

    d, _, _ = marian("swish-shared-tied")

    bart = copy_directory(d, tmp_path / "bart")
    edit_config(bart, model_type="bart", architectures=["BartForConditionalGeneration"])
    with pytest.raises(MarianImportError, match="model_type='bart'") as err:
        load_marian(bart)
    assert "BartForConditionalGeneration" in str(err.value)
    with pytest.raises(ExportError, match="'bart' is not supported"):
        export(bart, ExportOptions(repository=tmp_path / "repo"))

    odd = copy_directory(d, tmp_path / "odd")
    edit_config(odd, normalize_before=True, normalize_embedding=True, static_position_embeddings=False,
                 activation_function="gelu_new", decoder_attention_heads=2, decoder_ffn_dim=48)
    with pytest.raises(MarianImportError) as err:
        load_marian(odd)
    message = str(err.value)
    for expected in ("normalize_before=True", "normalize_embedding=True", "static_position_embeddings=False",
                     "activation_function='gelu_new'", "decoder_attention_heads=2", "decoder_ffn_dim=48"):
        assert expected in message
    with pytest.raises(ExportError, match="normalize_before=True"):
        export(odd, ExportOptions(repository=tmp_path / "repo"))

    incomplete = copy_directory(d, tmp_path / "incomplete", drop=("source.spm", "model.safetensors"))
    (incomplete / "target_vocab.json").write_text("{}")
    with pytest.raises(MarianImportError) as err:
        load_marian(incomplete)
    for expected in ("source.spm is missing", "no PyTorch weights", "separate source/target vocabularies"):
        assert expected in str(err.value)


def test_weights_that_do_not_fit_are_named(marian, tmp_path):
    from safetensors.torch import load_file, save_file

    d, _, _ = marian("relu-separate-untied-bias")
    broken = copy_directory(d, tmp_path / "broken")
    weights = load_file(str(broken / "model.safetensors"))
    del weights["lm_head.weight"]  # untied: nothing to fall back on
    weights["model.encoder.layers.0.extra_norm.weight"] = torch.ones(32)
    weights["model.encoder.embed_positions.weight"] = torch.zeros(128, 32)  # learned positions
    save_file(weights, str(broken / "model.safetensors"))
    with pytest.raises(MarianImportError) as err:
        load_marian(broken)
    for expected in ("missing tensor lm_head.weight", "model.encoder.layers.0.extra_norm.weight",
                     "model.encoder.embed_positions.weight is not Marian's sinusoid"):
        assert expected in str(err.value)


# ---- conversion to an nmtserve checkpoint -------------------------------------------------------
def test_convert_marian_writes_an_equivalent_nmtserve_checkpoint(marian, corpus, tmp_path):
    from nmtserve.model.checkpoint import load_checkpoint

    d, model, tok = marian("gelu-shared-untied-bias")
    out = convert_marian(d, tmp_path / "converted")
    ck = load_checkpoint(out)
    src, tgt_in, ref = _teacher_forced_logits(model, tok, corpus[:8])
    with torch.no_grad():
        assert (ck.model(src, tgt_in) - ref).abs().max().item() <= 1e-4
    assert ck.tokenizer.encode(corpus[0][0]) == tok(corpus[0][0])["input_ids"]


@pytest.mark.server
def test_a_marian_directory_goes_through_export_serve_and_client(marian, corpus, tmp_path):
    """No hand edits: the Marian directory as transformers saved it -> repository -> tritonserver."""
    from nmtserve.client import Translator
    from nmtserve.decoding.search import SearchOptions
    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.model.importers.marian import load_marian
    from nmtserve.model.reference import translate
    from nmtserve.server.launcher import ServerConfig, TritonServer

    d, _, _ = marian("swish-shared-tied")
    repo = tmp_path / "repository"
    export(d, ExportOptions(repository=repo, max_source_len=64, max_target_len=48, parity_sentences=8))
    texts = [src for src, _ in corpus[:24]]
    ckpt = load_marian(d)
    options = SearchOptions(beam_size=4, max_length=48, max_length_a=2.0, max_length_b=10)
    want = [n[0][0] for n in translate(ckpt.model, ckpt.tokenizer, texts, options)]
    with TritonServer(ServerConfig.on_free_ports(repo)) as server:
        server.wait_until_ready(120)
        with Translator(server.urls.grpc_address) as client:
            assert [t.text for t in client.translate(texts)] == want


def test_a_target_prefix_equals_generate_with_the_same_decoder_prompt(marian, corpus):
    """TARGET_PREFIX on a Marian model: the prefix's tokens are a decoder prompt after the start
    token, as ``generate(decoder_input_ids=[start, *prefix])``; the result starts with them."""
    from nmtserve.decoding.search import TargetPrefix

    name = BEAM_CONFIGS[0]
    d, model, tok = marian(name)
    ck = load_marian(d)
    pad, eos, start = model.config.pad_token_id, model.config.eos_token_id, model.config.decoder_start_token_id
    texts = [s for s, _ in corpus[:12]]
    prefixes = [t.split()[0] for _, t in corpus[:12]]  # each reference's first word
    hf = []
    for text, prefix in zip(texts, prefixes, strict=True):
        ids = ck.tokenizer.encode_target(prefix)[:-1]
        with torch.no_grad():
            out = model.generate(**tok([text], return_tensors="pt"), decoder_input_ids=torch.tensor([[start, *ids]]),
                                 num_beams=4, max_new_tokens=MAX_NEW_TOKENS, length_penalty=1.0,
                                 early_stopping=False, do_sample=False, bad_words_ids=[[pad]],
                                 forced_eos_token_id=None)
        hf.append(_generated(out, eos, pad)[0])
    ours = reference_decode(ck.model, [ck.tokenizer.encode(t) for t in texts],
                            SearchOptions(beam_size=4, max_length=MAX_NEW_TOKENS, length_penalty=1.0),
                            [TargetPrefix(tuple(p), prompt=len(p)) for p in
                             (ck.tokenizer.encode_target(x)[:-1] for x in prefixes)])
    assert [o[0].tokens for o in ours] == hf
    decode = ck.tokenizer.decode
    assert all(decode(o[0].tokens).startswith(decode(ck.tokenizer.encode_target(p))) for o, p in
               zip(ours, prefixes, strict=True))
