"""Multilingual checkpoints end to end: NLLB-200, M2M100 and mBART-50 directories exported and
served by a real tritonserver, every answer checked against ``transformers`` itself.

Tiny random models are built here in each family's layout (``save_pretrained``), with the
family's own tokenizer files (tests/multilingual_fixtures.py: a sentencepiece model trained in
the test, saved by transformers' tokenizer classes): an NLLB tokenizer with an M2M100 model (as
NLLB-200 is), an M2M100 tokenizer with its model, and mBART-50. What this proves:

* served translations equal ``generate(forced_bos_token_id=<target language>)`` token for token at
  beam 4 and beam 1, with two target languages mixed inside one request (TARGET_LANG [n]) and in
  concurrent requests;
* ``tokenize`` gives exactly the ids of the transformers tokenizer (``[src_lang] X </s>``);
* TARGET_PREFIX equals ``generate(decoder_input_ids=[start, lang, *prefix])``;
* ISO codes name the model's languages, the languages are listed, and a missing or unknown code is
  INVALID_ARG naming it (and the server keeps serving).

Oracle settings: transformers does not ban the pad token, nmtserve does (as Marian's
``bad_words_ids``), so generate gets ``bad_words_ids=[[pad]]``; mBART's default
``forced_eos_token_id`` is not applied by nmtserve's search (a hypothesis cut at the maximum
length ends without it), so generate runs without it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.server, pytest.mark.usefixtures("one_torch_thread")]

import tritonclient.grpc as grpcclient  # noqa: E402
from multilingual_fixtures import (  # noqa: E402
    load_transformers_tokenizer,
    write_m2m100,
    write_mbart50,
    write_nllb,
)
from transformers import (  # noqa: E402
    GenerationConfig,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MBartConfig,
    MBartForConditionalGeneration,
)

from nmtserve.client import AsyncTranslator, InvalidInputError, Translator  # noqa: E402
from nmtserve.export.pipeline import ExportOptions, export  # noqa: E402

MAX_NEW = 12  # generated tokens, the forced language token included (as max_new_tokens counts it)
TEXTS = ["the red car costs thirty euros", "le chien bleu", "I'm 12 on Thursday morning!", "das Haus über Öl",
         "el niño y la señora", "we were 7.45 and 3,50 €"]

# family -> (tokenizer writer, model class, config class, config overrides, (source, target, target) codes)
FAMILIES = {
    "nllb": (write_nllb, M2M100ForConditionalGeneration, M2M100Config, dict(scale_embedding=True),
             ("eng_Latn", "fra_Latn", "deu_Latn")),
    "m2m100": (write_m2m100, M2M100ForConditionalGeneration, M2M100Config, dict(scale_embedding=True),
               ("__en__", "__fr__", "__de__")),
    "mbart50": (write_mbart50, MBartForConditionalGeneration, MBartConfig,
                dict(scale_embedding=True, activation_function="relu"), ("en_XX", "fr_XX", "de_DE")),
}


def build_checkpoint(family: str, directory: Path):
    """A tiny random model of the family with the family's tokenizer files, as a hub directory."""
    writer, model_cls, config_cls, overrides, _ = FAMILIES[family]
    writer(directory)
    tok = load_transformers_tokenizer(directory)
    config = config_cls(vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                        decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.1,
                        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=None,
                        tie_word_embeddings=False, **overrides)
    torch.manual_seed(0)
    model = model_cls(config).eval()
    with torch.no_grad():  # logits spread over several units: no near-ties between PyTorch and ONNX
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.3)
                module.bias.normal_(0.0, 0.3)
        model.model.decoder.layer_norm.weight.mul_(3.0)
        # A random model's favourite is EOS right after the language token: give it logit 0, a
        # middle rank, so that translations have words and some still end before the limit.
        model.lm_head.weight[tok.eos_token_id] = 0.0
    model.save_pretrained(directory)
    return model, tok


@pytest.fixture(scope="module", params=list(FAMILIES))
def served(request, tmp_path_factory):
    """(family, transformers model, transformers tokenizer, server) for each family."""
    from nmtserve.server.launcher import ServerConfig, TritonServer

    family = request.param
    directory = tmp_path_factory.mktemp(family)
    model, tok = build_checkpoint(family, directory / "checkpoint")
    repo = directory / "repository"
    export(directory / "checkpoint", ExportOptions(repository=repo, max_source_len=48, max_target_len=48,
                                                   max_batch=16, parity_sentences=12))
    with TritonServer(ServerConfig.on_free_ports(repo)) as server:
        yield family, model, tok, server


def generate(model, tok, texts, source, targets, beam, prefixes=None):
    """transformers' translations (token ids after the decoder start, and text), one sentence at a time."""
    out = []
    for i, text in enumerate(texts):
        tok.src_lang = source.strip("_")  # M2M100Tokenizer takes "en" for __en__
        inputs = tok(text, return_tensors="pt")
        lang = tok.convert_tokens_to_ids(targets[i])
        config = GenerationConfig(num_beams=beam, max_new_tokens=MAX_NEW, length_penalty=1.0, early_stopping=False,
                                  bad_words_ids=[[tok.pad_token_id]], decoder_start_token_id=tok.eos_token_id,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                  bos_token_id=tok.bos_token_id)
        if prefixes and prefixes[i]:
            prefix = tok(prefixes[i], add_special_tokens=False).input_ids
            start = torch.tensor([[tok.eos_token_id, lang, *prefix]])
            ids = model.generate(**inputs, decoder_input_ids=start, generation_config=config)[0].tolist()
        else:
            config.forced_bos_token_id = lang
            ids = model.generate(**inputs, generation_config=config)[0].tolist()
        ids = [i for i in ids[1:] if i != tok.pad_token_id]
        out.append((ids, tok.decode(ids, skip_special_tokens=True)))
    return out


@pytest.mark.parametrize("beam", [4, 1])
def test_served_translations_equal_transformers_with_two_targets_in_one_request(served, beam):
    family, model, tok, server = served
    source, first, second = FAMILIES[family][4]
    targets = [first, second] * (len(TEXTS) // 2)
    want = generate(model, tok, TEXTS, source, targets, beam)
    assert len({w[1] for w in want}) > 1  # the model is not degenerate
    with Translator(server.urls.grpc_address) as client:
        got = client.translate(TEXTS, source_lang=source, target_lang=targets, beam_size=beam, max_length=MAX_NEW)
    assert [t.text for t in got] == [w[1] for w in want]
    # The languages matter: the other target gives other translations.
    assert [t.text for t in got] != [w[1] for w in generate(model, tok, TEXTS, source, [first] * len(TEXTS), beam)]


def test_the_in_process_reference_decode_equals_transformers_token_for_token(served):
    from nmtserve.decoding.search import SearchOptions, TargetPrefix
    from nmtserve.model.importers.hf_multilingual import load_multilingual
    from nmtserve.model.reference import reference_decode

    family, model, tok, server = served
    source, first, second = FAMILIES[family][4]
    ckpt = load_multilingual(Path(server.config.model_repository).parent / "checkpoint")
    targets = [first, second] * (len(TEXTS) // 2)
    sources = [ckpt.tokenizer.encode(t, source) for t in TEXTS]
    prefixes = [TargetPrefix((ckpt.tokenizer.language_id(t),)) for t in targets]
    got = reference_decode(ckpt.model, sources, SearchOptions(beam_size=4, max_length=MAX_NEW), prefixes)
    assert [h[0].tokens for h in got] == [w[0] for w in generate(model, tok, TEXTS, source, targets, 4)]


def test_concurrent_requests_into_different_languages_get_their_own_answers(served):
    family, model, tok, server = served
    source, first, second = FAMILIES[family][4]
    want = {t: [w[1] for w in generate(model, tok, TEXTS, source, [t] * len(TEXTS), 4)] for t in (first, second)}

    async def run():
        async with AsyncTranslator(server.urls.grpc_address, concurrency=8, batch_size=2) as client:
            jobs = [client.translate(TEXTS, source_lang=source, target_lang=t, max_length=MAX_NEW)
                    for t in (first, second, first, second)]
            return await asyncio.gather(*jobs)

    results = asyncio.run(run())
    for target, got in zip((first, second, first, second), results, strict=True):
        assert [t.text for t in got] == want[target]


def test_tokenize_gives_the_transformers_tokenizer_ids(served):
    family, _, tok, server = served
    source = FAMILIES[family][4][0]
    client = grpcclient.InferenceServerClient(server.urls.grpc_address)
    text = grpcclient.InferInput("TEXT", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=np.object_))
    src = grpcclient.InferInput("SOURCE_LANG", [1], "BYTES")
    src.set_data_from_numpy(np.array([source.encode()], dtype=np.object_))
    tgt = grpcclient.InferInput("TARGET_LANG", [1], "BYTES")
    tgt.set_data_from_numpy(np.array([FAMILIES[family][4][1].encode()], dtype=np.object_))
    result = client.infer("tokenize", [text, src, tgt])
    ids, lengths = result.as_numpy("SRC_IDS"), result.as_numpy("SRC_LEN")
    tok.src_lang = source.strip("_")
    want = [tok(t).input_ids for t in TEXTS]
    assert [ids[i, : lengths[i]].tolist() for i in range(len(TEXTS))] == want
    assert all(w[0] == tok.convert_tokens_to_ids(source) for w in want)


def test_a_target_prefix_equals_generate_with_the_same_decoder_prompt(served):
    family, model, tok, server = served
    source, first, _ = FAMILIES[family][4]
    prefixes = ["le chien", "", "la maison rouge", "", "voiture", "el"]
    want = generate(model, tok, TEXTS, source, [first] * len(TEXTS), 4, prefixes)
    with Translator(server.urls.http_address, protocol="http") as client:
        got = client.translate(TEXTS, source_lang=source, target_lang=first, target_prefix=prefixes,
                               max_length=MAX_NEW)
    assert [t.text for t in got] == [w[1] for w in want]
    assert all(g.text.startswith(p) for g, p in zip(got, prefixes, strict=True))


def test_iso_codes_name_the_models_languages_and_the_languages_are_listed(served):
    family, model, tok, server = served
    source, first, _ = FAMILIES[family][4]
    iso = {"nllb": ("en", "fra"), "m2m100": ("en", "fr"), "mbart50": ("eng", "fr")}[family]
    with Translator(server.urls.grpc_address) as client:
        by_code = client.translate(TEXTS[:2], source_lang=source, target_lang=first, max_length=MAX_NEW)
        by_iso = client.translate(TEXTS[:2], source_lang=iso[0], target_lang=iso[1], max_length=MAX_NEW)
        assert [t.text for t in by_iso] == [t.text for t in by_code]
        languages = client.languages()
    codes = [lang.code for lang in languages]
    assert len(codes) == {"nllb": 202, "m2m100": 100, "mbart50": 52}[family] and {source, first} <= set(codes)
    french = next(lang for lang in languages if lang.code == first)
    assert (french.iso, french.name) == ("fr", "French") and source in french.targets
    listed = subprocess.run([sys.executable, "-m", "nmtserve.cli", "languages", "--url", server.urls.grpc_address],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert f"{first}\tfr\tFrench" in listed.stdout.splitlines()


def test_missing_and_unknown_language_codes_are_invalid_arguments_naming_them(served):
    family, _, _, server = served
    source, first, _ = FAMILIES[family][4]
    with Translator(server.urls.grpc_address, max_retries=0) as client:
        with pytest.raises(InvalidInputError, match=r"TARGET_LANG is required.*nmtserve languages"):
            client.translate(TEXTS[0], source_lang=source)
        with pytest.raises(InvalidInputError, match=r"SOURCE_LANG is required"):
            client.translate(TEXTS[0], target_lang=first)
        with pytest.raises(InvalidInputError, match=r"'xx_Nope'"):
            client.translate(TEXTS[0], source_lang=source, target_lang="xx_Nope")
        with pytest.raises(InvalidInputError, match=r"TARGET_LANG\[1\].*'tlh'"):
            client.translate(TEXTS[:2], source_lang=source, target_lang=[first, "tlh"])
        assert client.translate(TEXTS[0], source_lang=source, target_lang=first, max_length=MAX_NEW).text


def test_alignments_count_the_words_of_the_text_and_of_its_translation(served):
    """ALIGN on a multilingual model: pairs of words of the source and of the translation, none past
    either's end (the tiny random model's attention often peaks on the language token or EOS:
    such a word has no pair; every word with one is counted once)."""
    family, model, tok, server = served
    source, first, second = FAMILIES[family][4]
    with Translator(server.urls.grpc_address) as client:
        done = client.translate(TEXTS, source_lang=source, target_lang=first, max_length=MAX_NEW, alignment=True)
    assert any(t.alignment for t in done)
    for text, t in zip(TEXTS, done, strict=True):
        assert all(0 <= s < len(text.split()) and 0 <= w < len(t.text.split()) for s, w in t.alignment), (text, t)
        targets = [w for _, w in t.alignment]
        assert len(targets) == len(set(targets)), (t.text, t.alignment)  # no elision in these texts


def test_a_document_goes_into_the_language_asked_for(served):
    family, model, tok, server = served
    source, first, second = FAMILIES[family][4]
    want = [w[1] for w in generate(model, tok, TEXTS[:3], source, [second] * 3, 4)]
    with Translator(server.urls.grpc_address) as client:
        doc = client.translate_document("\n\n".join(TEXTS[:3]) + "\n", source_lang=source, target_lang=second,
                                        max_length=MAX_NEW)
    assert doc == "\n\n".join(want) + "\n"


def test_external_weights_and_the_int8_gate_of_a_multilingual_export(tmp_path):
    """Graphs written with external weights (as every graph over 2 GB must be: forced here with a
    threshold of 0), quantized to int8 behind the quality gate translating eng_Latn -> fra_Latn,
    served: the server's translations are the in-process engine's on the same int8 graphs."""
    from nmtserve.export import quality
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import SPEC_FILE, ModelSpec
    from nmtserve.server.launcher import ServerConfig, TritonServer
    from nmtserve.server.protocol import parse_search_options

    build_checkpoint("nllb", tmp_path / "checkpoint")
    (tmp_path / "gate.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    repo = tmp_path / "repository"
    report = export(tmp_path / "checkpoint", ExportOptions(
        repository=repo, max_source_len=48, max_target_len=48, max_batch=16, parity_sentences=6,
        precision="int8", gate_source=tmp_path / "gate.txt", gate_source_lang="en", gate_target_lang="fr",
        max_bleu_drop=100.0, external_data_bytes=0))
    assert report.quality["int8"]["passed"]
    artifacts = repo / "generate" / "1"
    import onnx

    for graph in ("encoder.onnx", "decoder.onnx"):
        proto = onnx.load(str(artifacts / graph), load_external_data=False)
        external = [t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert external and (artifacts / f"{graph}.data").is_file(), graph
    gate = quality.GateSet.load(artifacts / quality.GATE_FILE)
    assert (gate.source_lang, gate.target_lang) == ("eng_Latn", "fra_Latn")

    spec = ModelSpec.load(artifacts / SPEC_FILE)
    assert spec.precision == "int8"
    runtime = OnnxModel(artifacts / "encoder.onnx", artifacts / "decoder.onnx", spec, threads=1)
    tokenizer = load_tokenizer(artifacts, spec)
    options = parse_search_options({"MAX_LENGTH": np.array([MAX_NEW], np.int32)}, spec, spec.max_beam)
    # One sentence at a time on both sides: ONNX Runtime's dynamic int8 quantizes activations per
    # tensor, so an int8 result depends on the batch it was decoded in.
    want = []
    for i in range(len(TEXTS)):
        one = quality.GateSet(gate.sources[i : i + 1], None, "", source_lang="eng_Latn", target_lang="fra_Latn")
        want.append(tokenizer.decode(quality.translate(runtime, tokenizer, one, options, max_sentences=1)[0][0]))
    with TritonServer(ServerConfig.on_free_ports(repo)) as server, \
            Translator(server.urls.grpc_address, batch_size=1, concurrency=1) as client:
        got = client.translate(TEXTS, source_lang="eng_Latn", target_lang="fra_Latn", max_length=MAX_NEW)
    assert [t.text for t in got] == want
