"""Word alignments from the decoder, and inline markup put back by them.

Oracles: the PyTorch reference decode (the engine's alignments on both exported graphs equal the
reference's, token for token), hand-written alignments for the word rules and the placement,
and the demo generator's tagged sentences with known French tags (``nmtserve.demo.tagged``)
for the served documents.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from nmtserve import graphs
from nmtserve.alignment import fill_gaps, format_pharaoh, parse_pharaoh, piece_words, word_alignment
from nmtserve.decoding.search import SearchOptions
from nmtserve.documents import segment

SENTENCES = ["I have three red apples.", "The train leaves at 7:45.",
             "We bought twelve small cats and she sold two books.", "Hello"]


@pytest.fixture(scope="module")
def graphs_dir(demo_checkpoint, tmp_path_factory) -> dict[str, Path]:
    from nmtserve.export.cpu_graph import build_cpu_decoder, build_cpu_encoder
    from nmtserve.export.onnx_export import export_decoder, export_encoder

    out = {}
    for name, enc, dec in (("fused", build_cpu_encoder, build_cpu_decoder), ("portable", export_encoder, export_decoder)):
        folder = tmp_path_factory.mktemp(name)
        enc(demo_checkpoint.model, folder / "encoder.onnx")
        dec(demo_checkpoint.model, folder / "decoder.onnx")
        out[name] = folder
    return out


def _spec(checkpoint):
    from nmtserve.runtime.spec import ModelSpec

    c = checkpoint.config
    return ModelSpec(layers=c.decoder_layers, heads=c.h, d_k=c.d_k, vocab=c.tgt_vocab_size, max_positions=c.max_positions,
                     pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id, unk_id=c.unk_id, src_vocab=c.src_vocab_size)


class _Counting:
    """A runtime that remembers which outputs each step asked for."""

    def __init__(self, runtime):
        self.runtime, self.spec, self.asked = runtime, runtime.spec, []
        self.has_attention = runtime.has_attention

    def encode(self, src):
        return self.runtime.encode(src)

    def run_step(self, feeds, outputs=graphs.STEP_OUTPUTS):
        self.asked.append(tuple(outputs))
        return self.runtime.run_step(feeds, outputs)


@pytest.mark.parametrize("graph", ["fused", "portable"])
def test_the_engines_alignments_are_the_reference_decodes(graph, graphs_dir, demo_checkpoint):
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.reference import reference_decode
    from nmtserve.runtime.onnxruntime import OnnxModel

    tok = demo_checkpoint.tokenizer
    sources = [tok.encode(t) for t in SENTENCES]
    options = SearchOptions(beam_size=4, max_length=64, alignment=True, num_hypotheses=3)
    reference = reference_decode(demo_checkpoint.model, sources, options)
    folder = graphs_dir[graph]
    runtime = _Counting(OnnxModel(folder / "encoder.onnx", folder / "decoder.onnx", _spec(demo_checkpoint), threads=1))
    engine = InflightBatcher(runtime, max_sentences=8).start()
    try:
        got = engine.translate(sources, options, timeout=60)
        assert graphs.ATTENTION in runtime.asked[-1]
        runtime.asked.clear()
        plain = engine.translate(sources, SearchOptions(beam_size=4, max_length=64), timeout=60)
    finally:
        engine.stop()
    for hyps, want in zip(got, reference, strict=True):
        assert [h.tokens for h in hyps] == [h.tokens for h in want]
        assert [h.alignment for h in hyps] == [h.alignment for h in want]
        assert all(len(h.alignment) == len(h.tokens) for h in hyps)
    # Not asked: nothing carried, and the attention is never fetched.
    assert all(h.alignment is None for hyps in plain for h in hyps)
    assert runtime.asked and all(graphs.ATTENTION not in asked for asked in runtime.asked)
    # The alignment says what a person would: "I have three red apples." -> "J'ai trois pommes rouges."
    s_words = piece_words(tok.source_pieces(sources[0]))
    pairs = word_alignment(s_words, tok.target_pieces(got[0][0].tokens), got[0][0].alignment)
    assert format_pharaoh(pairs) == "0-0 1-0 2-1 4-2 3-3"  # "J'ai" is "I have": the piece after its apostrophe too


def test_a_graph_exported_before_alignments_refuses_them_by_name(graphs_dir, demo_checkpoint, tmp_path):
    from nmtserve.engine import InflightBatcher
    from nmtserve.runtime.onnxruntime import OnnxModel

    model = onnx.load(str(graphs_dir["fused"] / "decoder.onnx"))
    kept = [o for o in model.graph.output if o.name != graphs.ATTENTION]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    onnx.save(model, str(tmp_path / "decoder.onnx"))
    runtime = OnnxModel(graphs_dir["fused"] / "encoder.onnx", tmp_path / "decoder.onnx", _spec(demo_checkpoint), threads=1)
    assert not runtime.has_attention
    engine = InflightBatcher(runtime, max_sentences=4).start()
    try:
        source = [demo_checkpoint.tokenizer.encode(SENTENCES[0])]
        with pytest.raises(ValueError, match="no attention output.*re-export"):
            engine.translate(source, SearchOptions(alignment=True), timeout=60)
        assert engine.translate(source, SearchOptions(), timeout=60)[0][0].tokens  # the rest still serves
    finally:
        engine.stop()


def test_words_from_pieces_and_the_pharaoh_format():
    assert piece_words(["\u2581I", "\u2581have", "\u2581", "red", None]) == [0, 1, 2, 2, -1]
    assert piece_words(["7", ":", "\u2581h"]) == [0, 0, 1]  # no leading "▁": the first word still
    # A target word is aligned by its first piece with a letter or digit; EOS and specials are no word.
    assert word_alignment([0, 1, 2, -1], ["\u2581a", "b", "\u2581c", None], [2, 1, 0, 3]) == [(2, 0), (0, 1)]
    assert word_alignment([0, 1, 2, -1], ["\u2581", "ab", "\u2581c", None], [2, 1, 0, 3]) == [(1, 0), (0, 1)]
    assert parse_pharaoh(" 0-0  2-1 ") == [(0, 0), (2, 1)]
    assert format_pharaoh([(0, 0), (2, 1)]) == "0-0 2-1"
    with pytest.raises(ValueError, match="Pharaoh"):
        parse_pharaoh("0-0 1:2")


def test_a_function_word_written_while_attending_to_what_it_introduces_is_given_back():
    # "The train leaves at 7:45." -> "Le train part à 7 h 45.": "à" attended to "7:45".
    pairs = [(0, 0), (1, 1), (2, 2), (4, 3), (4, 4), (4, 5), (4, 6)]
    assert fill_gaps(pairs, 5) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (4, 5), (4, 6)]
    # "I see three hundred yellow birds." -> "Je vois trois cents oiseaux jaunes.": "cents" attended to "birds".
    assert fill_gaps([(0, 0), (1, 1), (2, 2), (5, 3), (5, 4), (4, 5)], 6) == \
        [(0, 0), (1, 1), (2, 2), (3, 3), (5, 4), (4, 5)]
    # Nothing moves where the next word's run is one word long: "I have three" -> "J'ai trois".
    assert fill_gaps([(0, 0), (2, 1)], 3) == [(0, 0), (2, 1)]


@pytest.mark.parametrize(("fmt", "source", "translation", "alignment", "want"), [
    ("html", "I have three <b>red</b> apples.", "J'ai trois pommes rouges.", "0-0 2-1 4-2 3-3",
     "J'ai trois pommes <b>rouges</b>."),
    # The closing marker before the period the source span did not hold; the text between kept.
    ("markdown", "I have **three red apples**.", "J'ai trois pommes rouges.", "0-0 2-1 4-2 3-3",
     "J'ai **trois pommes rouges**."),
    # Nested pairs stay nested, the link's attributes as written.
    ("html", 'I have <a href="x?a=1&amp;b=2"><i>three</i> red apples</a>.', "J'ai trois pommes rouges.",
     "0-0 2-1 4-2 3-3", "J'ai <a href=\"x?a=1&amp;b=2\"><i>trois</i> pommes rouges</a>."),
    # An atomic span (code) after the word aligned to the source word before it.
    ("markdown", "Run `make` now.", "Lancez maintenant.", "0-0 1-1", "Lancez `make` maintenant."),
    # An elided article stays outside: "L'" renders "The".
    ("html", "The <b>bird</b> sings.", "L'oiseau chante.", "0-0 1-0 2-1", "L'<b>oiseau</b> chante."),
    # Two pairs apart in the source whose targets would share a word: the second one is dropped.
    ("html", "<b>red</b> <i>apples</i>", "pommes-rouges", "0-0 1-0", "<b>pommes-rouges</b>"),
    # No target word for a pair: its formatting goes, its text stays.
    ("html", "I have <b>three</b> apples.", "J'ai des pommes.", "0-0 3-2", "J'ai des pommes."),
])
def test_inline_markup_goes_around_the_aligned_words(fmt, source, translation, alignment, want):
    document = segment(source, fmt)
    assert document.without_markup() == [" ".join(document.without_markup()[0].split())]
    assert document.render_aligned([translation], [parse_pharaoh(alignment)]) == want


def test_without_markup_is_what_a_reader_sees():
    document = segment("I have **three red apples**. Run `make` *now*.", "markdown")
    assert document.without_markup() == ["I have three red apples.", "Run now."]


def test_tagged_sentences_keep_their_tags_on_the_right_words_when_served(demo_server):
    """The demo does not carry placeholders (its export measured it): each sentence goes without
    markup, and the tags come back around the words the alignment gives. The issue's bar is 95 %
    of the spans exact on 500+ sentences (bench/tags.py: 100% of 1,501 on 1,000 unseen); here 80."""
    from nmtserve.client import Translator
    from nmtserve.demo.tagged import score, tagged_examples

    examples = tagged_examples(80, seed=23)
    with Translator(demo_server.urls.grpc_address) as client:
        plain = [t.text for t in client.translate([e.plain_source for e in examples])]
        outputs = [client.translate_document(e.source, e.format) for e in examples]
    placed = [score(e, o, p) for e, o, p in zip(examples, outputs, plain, strict=True)]
    assert all(p.text_kept for p in placed), "a tagged sentence's text is not its plain translation"
    assert all(p.valid for p in placed), "tags lost, repeated or crossed"
    spans = [exact for p in placed if p.reference for exact in p.exact]
    assert len(spans) >= 100
    assert sum(spans) / len(spans) >= 0.95


def test_alignment_is_served_in_the_pharaoh_format(demo_server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(demo_server.urls.grpc_address)
    texts = ["I have three red apples.", "The train leaves at 7:45. We bought twelve small cats."]

    def infer(align: bool | None):
        text = grpcclient.InferInput("TEXT", [len(texts)], "BYTES")
        text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
        inputs = [text]
        if align is not None:
            flag = grpcclient.InferInput("ALIGN", [1], "BOOL")
            flag.set_data_from_numpy(np.array([align]))
            inputs.append(flag)
        result = client.infer("translate", inputs, outputs=[grpcclient.InferRequestedOutput(n)
                                                            for n in ("TRANSLATION", "ALIGNMENT")])
        return ([t.decode() for t in result.as_numpy("TRANSLATION")], [a.decode() for a in result.as_numpy("ALIGNMENT")])

    translations, alignments = infer(True)
    assert translations[0] == "J'ai trois pommes rouges."
    assert alignments[0] == "0-0 1-0 2-1 4-2 3-3"  # "J'ai" is "I have": the piece after its apostrophe too
    # Two sentences of one element: the second's words counted after the first's.
    pairs = parse_pharaoh(alignments[1])
    source_words, target_words = texts[1].split(), translations[1].split()
    assert {t for _, t in pairs} == set(range(len(target_words)))
    assert (source_words.index("cats."), target_words.index("chats.")) in pairs
    assert (source_words.index("train"), target_words.index("train")) in pairs
    assert infer(None) == (translations, ["", ""])  # not asked: the same translations, no alignment
