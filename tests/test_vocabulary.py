"""Restricted target vocabularies (nmtserve.runtime.vocabulary; issue 49's use_vmap opt-in): the
compiled step's restricted projection against the whole one renormalized, the engine's sentences
under mixed restrictions alone and in a batch, and the export's option."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from nmtserve import graphs
from nmtserve.decoding import native
from nmtserve.decoding.search import SearchOptions, TargetPrefix
from nmtserve.export.cpu_graph import build_cpu_decoder
from nmtserve.runtime import native_step, vocabulary
from nmtserve.runtime.vocabulary import Restriction
from tests.test_cpu_graph import _feeds, _model
from tests.test_native_step import ALL, _int8, _spec

pytestmark = pytest.mark.skipif(native.module is None and not os.environ.get("CI"),
                                reason="nmtserve_native is not installed (scripts/setup.sh builds it)")

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_restricted_step_is_the_whole_step_renormalized_over_its_ids(tmp_path, precision):
    """A restricted sentence's log-probs are the whole vocabulary's renormalized over its ids (-inf
    elsewhere), its candidates its best ids in TopK's order; its K/V and attention, and every other
    sentence's outputs, are the unrestricted step's bits."""
    model = _model(d_model=64, d_ff=128, tgt_vocab_size=3000, src_vocab_size=3000)
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    graph = _int8(model, path) if precision == "int8" else path
    rng = np.random.default_rng(7)
    sets = [tuple(sorted(rng.choice(3000, size, replace=False).tolist())) for size in (200, 1500)]
    vocabulary.save(graph.parent, [Restriction(f"x{i}", 10 + i, ids) for i, ids in enumerate(sets)])
    step = native_step.NativeDecoder(graph, _spec(model))
    assert step.vocabularies is not None and step.step.restrictions == [200, 1500]
    for seed, shape in enumerate([(4, 3, 6, 7), (3, 4, 1, 9), (5, 2, 11, 5)]):
        feeds = _feeds(model, *shape, seed=seed)
        chosen = np.array([[0, -1, 1, 0, 1][b] for b in range(shape[0])], np.int32)
        whole = step.run_step(feeds, ALL)
        got = step.run_step(feeds, ALL, vocabularies=chosen)
        for name in ("new_key", "new_value", graphs.ATTENTION):
            np.testing.assert_array_equal(got[name], whole[name], err_msg=name)
        m = got["top_ids"].shape[-1]
        for b, v in enumerate(chosen.tolist()):
            if v < 0:
                for name in ALL:
                    np.testing.assert_array_equal(got[name][b], whole[name][b], err_msg=f"{name}, sentence {b}")
                continue
            ids = np.array(sets[v])
            log_probs = got["log_probs"][b]
            assert np.isneginf(np.delete(log_probs, ids, axis=-1)).all()
            expected = _log_softmax(whole["log_probs"][b][:, ids].astype(np.float64))
            np.testing.assert_allclose(log_probs[:, ids], expected, atol=2e-5, rtol=0)
            assert np.isin(got["top_ids"][b], ids).all()
            np.testing.assert_array_equal(got["top_ids"][b], np.argsort(-log_probs, axis=-1, kind="stable")[:, :m])
            np.testing.assert_array_equal(got["top_log_probs"][b], np.take_along_axis(log_probs, got["top_ids"][b], -1))
        with pytest.raises(ValueError, match="vocabulary is out of range"):
            step.run_step(feeds, ALL, vocabularies=np.full(shape[0], 2, np.int32))


def test_a_restriction_smaller_than_the_candidates_or_unordered_is_refused(tmp_path):
    model = _model(d_model=64, d_ff=128, tgt_vocab_size=300, src_vocab_size=300)
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    vocabulary.save(tmp_path, [Restriction(None, None, (1, 2, 3))])
    with pytest.raises(ValueError, match="smaller than the step's"):
        native_step.NativeDecoder(path, _spec(model))
    vocabulary.save(tmp_path, [Restriction(None, None, tuple(range(100, 0, -1)))])
    with pytest.raises(ValueError, match="ascending"):
        native_step.NativeDecoder(path, _spec(model))
    os.environ[vocabulary.ENV] = "0"
    try:  # turned off: not read at all
        assert native_step.NativeDecoder(path, _spec(model)).vocabularies is None
    finally:
        del os.environ[vocabulary.ENV]


def _served_model(art: Path, spec, setting: str):
    """The export folder's OnnxModel loaded with NMTSERVE_VOCABULARY=setting."""
    from nmtserve.runtime.onnxruntime import OnnxModel

    os.environ[vocabulary.ENV] = setting
    try:
        return OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=1)
    finally:
        del os.environ[vocabulary.ENV]


def _restricted_demo(folder: Path, repository: Path) -> tuple[list[Restriction], Path]:
    """The demo's int8 artifacts with three restrictions: its French text's tokens (no language:
    every sentence without a language token), and two made-up "languages" keyed by tokens that a
    sentence's forced prefix starts with."""
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.spec import ModelSpec

    art = folder / "generate"
    shutil.copytree(repository / "generate" / "1", art)
    spec = ModelSpec.load(art / "model.json")
    tok = load_tokenizer(art, spec)
    french = (DEMO / "valid.fr").read_text(encoding="utf-8").splitlines()
    base = vocabulary.build(french, tok.encode_target, (spec.eos_id, spec.unk_id), spec.vocab)
    rng = np.random.default_rng(3)
    a, b = (int(t) for t in rng.choice(base.ids[10:], 2, replace=False))
    some = [tuple(sorted({*rng.choice(base.ids, 120, replace=False).tolist(), spec.eos_id, token}))
            for token in (a, b)]
    restrictions = [base, Restriction("xa", a, some[0]), Restriction("xb", b, some[1])]
    vocabulary.save(art, restrictions)
    return restrictions, art


def test_sentences_under_different_restrictions_decode_alone_as_in_one_batch(tmp_path, demo_int8_repository):
    """The engine gives each sentence its restriction (its forced first token's, else the model's
    one): its tokens stay inside it, and its hypotheses are the same alone and in a batch of
    sentences under other restrictions and none (the compiled loop, every row its own)."""
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    restrictions, art = _restricted_demo(tmp_path, demo_int8_repository)
    spec = ModelSpec.load(art / "model.json")
    tok = load_tokenizer(art, spec)
    model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=1)
    assert model.vocabularies is not None and len(model.vocabularies.restrictions) == 3
    texts = (DEMO / "test.en").read_text(encoding="utf-8").splitlines()[:12]
    sources = [tok.encode(t) for t in texts]
    a, b = restrictions[1].token, restrictions[2].token
    prefixes = [TargetPrefix(()), TargetPrefix((a,)), TargetPrefix((b,))] * 4
    options = SearchOptions(beam_size=4, num_hypotheses=2)
    engine = InflightBatcher(model, max_sentences=16, max_beam=4).start()
    try:
        together = engine.translate(sources, options, prefixes=prefixes, timeout=120)
        alone = [engine.translate([s], options, prefixes=[p], timeout=60)[0]
                 for s, p in zip(sources, prefixes, strict=True)]
    finally:
        engine.stop()
    for i, (mine, single) in enumerate(zip(together, alone, strict=True)):
        assert [(h.tokens, h.score) for h in mine] == [(h.tokens, h.score) for h in single], f"sentence {i}"
        allowed = set(restrictions[[0, 1, 2][i % 3]].ids)
        for h in mine:
            generated = h.tokens[len(prefixes[i].tokens):]
            assert set(generated) <= allowed, f"sentence {i}: {set(generated) - allowed}"


def test_the_export_writes_a_restriction_and_refuses_a_wrong_one(tmp_path):
    from nmtserve.export.pipeline import ExportError, ExportOptions, export

    corpus = tmp_path / "corpus.fr"
    corpus.write_text((DEMO / "valid.fr").read_text(encoding="utf-8"), encoding="utf-8")
    small = tmp_path / "small.fr"
    small.write_text("un\n", encoding="utf-8")
    repo = tmp_path / "repo"
    base = dict(repository=repo, skip_parity=True)
    with pytest.raises(ExportError, match="one target language"):
        export(DEMO, ExportOptions(**base, restrict_vocabulary=(("fr", corpus),)))
    with pytest.raises(ExportError, match="fewer than the decoder step's"):
        export(DEMO, ExportOptions(**base, restrict_vocabulary=((None, small),)))
    with pytest.raises(ExportError, match="compiled CPU decoder step"):
        export(DEMO, ExportOptions(**base, target="gpu", restrict_vocabulary=((None, corpus),)))
    with pytest.raises(ExportError, match="cannot read"):
        export(DEMO, ExportOptions(**base, restrict_vocabulary=((None, tmp_path / "missing.fr"),)))
    assert not repo.exists()  # refused before anything was written
    report = export(DEMO, ExportOptions(**base, restrict_vocabulary=((None, corpus),)))
    written = vocabulary.load(repo / "generate" / "1")
    assert len(written) == 1 and written[0].language is None and written[0].lines > 100
    assert any("vocabulary restricted" in note for note in report.notes)
    export(DEMO, ExportOptions(**base))  # exported again without it: no restriction left behind
    assert not (repo / "generate" / "1" / vocabulary.FILE).exists()


def test_a_multilingual_export_restricts_each_named_target_language(tmp_path):
    """NLLB-200's form: a restriction per target language, keyed by its token (an ISO code resolves to
    it); a sentence into that language decodes inside it, one into another language as unrestricted."""
    from multilingual_fixtures import corpus

    from nmtserve.engine import InflightBatcher
    from nmtserve.export.pipeline import ExportError, ExportOptions, export
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.spec import ModelSpec
    from tests.test_multilingual import build_checkpoint

    build_checkpoint("nllb", tmp_path / "checkpoint")
    text = tmp_path / "fr.txt"
    text.write_text("\n".join(corpus(80, seed=5)) + "\n", encoding="utf-8")
    repo = tmp_path / "repo"
    base = dict(repository=repo, skip_parity=True, max_source_len=48, max_target_len=48, max_batch=16)
    with pytest.raises(ExportError, match="name the target language"):
        export(tmp_path / "checkpoint", ExportOptions(**base, restrict_vocabulary=((None, text),)))
    with pytest.raises(ExportError, match="not a language|no language|xx_Yyyy"):
        export(tmp_path / "checkpoint", ExportOptions(**base, restrict_vocabulary=(("xx_Yyyy", text),)))
    export(tmp_path / "checkpoint", ExportOptions(**base, restrict_vocabulary=(("fr", text),)))
    art = repo / "generate" / "1"
    spec = ModelSpec.load(art / "model.json")
    tok = load_tokenizer(art, spec)
    (written,) = vocabulary.load(art)
    french, german = tok.language_id("fra_Latn"), tok.language_id("deu_Latn")
    assert written.language == "fra_Latn" and written.token == french and len(written.ids) < spec.vocab
    sources = [tok.encode(t, "eng_Latn") for t in corpus(6, seed=9)]
    options = SearchOptions(beam_size=4)
    outputs = {}
    for setting in ("1", "0"):
        model = _served_model(art, spec, setting)
        assert (model.vocabularies is not None) == (setting == "1")
        engine = InflightBatcher(model, max_sentences=16, max_beam=4).start()
        try:
            outputs[setting] = [engine.translate(sources, options, prefixes=[TargetPrefix((lang,))] * len(sources),
                                                 timeout=120) for lang in (french, german)]
        finally:
            engine.stop()
    allowed = set(written.ids)
    for hyps in outputs["1"][0]:
        assert set(hyps[0].tokens[1:]) <= allowed
    # (the whole vocabulary's French does leave the set: the restriction did something)
    assert any(set(hyps[0].tokens[1:]) - allowed for hyps in outputs["0"][0])
    assert [h[0].tokens for h in outputs["1"][1]] == [h[0].tokens for h in outputs["0"][1]]  # German: unrestricted


def test_the_cli_reads_a_language_and_a_file(tmp_path):
    from nmtserve.export.cli import _restriction

    assert _restriction("fra_Latn=corpus.fr") == ("fra_Latn", Path("corpus.fr"))
    assert _restriction("corpus.fr") == (None, Path("corpus.fr"))
    assert _restriction("./odd=name.txt") == (None, Path("./odd=name.txt"))  # a path: no language
    odd = tmp_path / "x=y.txt"
    odd.write_text("un\n", encoding="utf-8")
    assert _restriction(str(odd)) == (None, odd)


@pytest.mark.server
def test_a_served_repository_applies_its_restriction_and_the_switch_turns_it_off(tmp_path, demo_int8_repository):
    """The real tritonserver on a restricted copy of the demo's int8 repository: its translations are
    the in-process restricted engine's, and with NMTSERVE_VOCABULARY=0 the whole vocabulary's."""
    import tritonclient.grpc as grpcclient

    from nmtserve.engine import InflightBatcher
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.spec import ModelSpec
    from nmtserve.server.launcher import ServerConfig, TritonServer

    repo = tmp_path / "repo"
    shutil.copytree(demo_int8_repository, repo)
    art = repo / "generate" / "1"
    spec = ModelSpec.load(art / "model.json")
    tok = load_tokenizer(art, spec)
    french = (DEMO / "valid.fr").read_text(encoding="utf-8").splitlines()[:60]  # a small set: translations move
    vocabulary.save(art, [vocabulary.build(french, tok.encode_target, (spec.eos_id, spec.unk_id), spec.vocab)])
    texts = (DEMO / "test.en").read_text(encoding="utf-8").splitlines()[:48]
    expected = {}
    for setting in ("1", "0"):
        engine = InflightBatcher(_served_model(art, spec, setting), max_sentences=32, max_beam=8).start()
        try:
            results = engine.translate([tok.encode(t) for t in texts], spec.search_options(), timeout=120)
        finally:
            engine.stop()
        expected[setting] = [tok.decode(r[0].tokens) for r in results]
    assert expected["1"] != expected["0"]  # this set changes some translations
    for setting in ("1", "0"):
        os.environ[vocabulary.ENV] = setting
        try:
            server = TritonServer(ServerConfig.on_free_ports(repo))
            server.start()
        finally:
            del os.environ[vocabulary.ENV]
        try:
            server.wait_until_ready(120)
            client = grpcclient.InferenceServerClient(server.urls.grpc_address)
            text = grpcclient.InferInput("TEXT", [len(texts)], "BYTES")
            text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
            got = [t.decode() for t in client.infer("translate", [text]).as_numpy("TRANSLATION").tolist()]
        finally:
            server.stop()
        assert got == expected[setting], setting
