"""Terminology (TERMS) served: what the request checks refuse, without a server, and the demo model
on a real tritonserver, where each translation holds its terms exactly as the PyTorch reference
decode with the same constraints writes it, token for token, beside unchanged sentences without
terms, and a term the length limit cut is named in WARNING."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from nmtserve import contract as c
from nmtserve.coverage import missing_terms, warning
from nmtserve.decoding.constraints import Constraint
from nmtserve.decoding.search import NO_PREFIX, SearchOptions, TargetPrefix
from nmtserve.runtime.spec import ModelSpec
from nmtserve.server.protocol import (
    InputError,
    check_constraints,
    parse_constraints,
    parse_terms,
    status_of_message,
    term_rows,
    tokenize_request,
)

SPEC = ModelSpec(layers=2, heads=4, d_k=8, vocab=90, max_positions=64, pad_id=0, bos_id=1, eos_id=2, unk_id=3)
OR, AND, PAD = c.TERM_OR, c.TERM_AND, c.TERM_PAD
# The server's defaults for the demo export of tests/conftest.py (--max-target-len 128).
OPTIONS = SearchOptions(beam_size=4, length_penalty=1.0, max_length=128, max_length_a=2.0, max_length_b=10)


def strings(*texts: str) -> np.ndarray:
    return np.array([t.encode() for t in texts], dtype=np.object_)


# ---- TERMS: the JSON each element carries -----------------------------------------------------

def test_terms_are_strings_or_lists_of_renderings_and_empty_means_none():
    got = parse_terms(strings('[["chat", "chatte"], "maison"]', "", "[]"), 3)
    assert got == [(("chat", "chatte"), ("maison",)), (), ()]
    assert parse_terms(strings("", ""), 2) is None
    assert parse_terms(None, 2) is None


@pytest.mark.parametrize("text, message", [
    ("maison", r"TERMS\[1\]: not JSON"),
    ('{"a": "b"}', r"TERMS\[1\]: must be a JSON array of terms, got dict"),
    (json.dumps(["x"] * (c.TERMS_LIMIT + 1)), rf"TERMS\[1\]: {c.TERMS_LIMIT + 1} terms, more than the {c.TERMS_LIMIT}"),
    (json.dumps([["x"] * (c.TERM_ALTERNATIVES_LIMIT + 1)]), r"TERMS\[1\]: term 0 has 9 alternatives"),
    ('["chat", ""]', r"TERMS\[1\]: term 1 holds an empty string"),
    ('["chat", []]', r"TERMS\[1\]: term 1 must be a string or a non-empty list of strings"),
    ('[["chat", 3]]', r"TERMS\[1\]: term 0 must be a string"),
])
def test_bad_terms_are_refused_naming_the_element_and_its_sentence(text, message):
    with pytest.raises(InputError, match=message) as caught:
        parse_terms(strings("", text), 2)
    assert "(the terms of TEXT[1])" in str(caught.value)  # the client maps TEXT[i] to its input line
    assert status_of_message(str(caught.value)) == "INVALID_ARG"  # and a pair router's BLS says so too


# ---- TERM_IDS: tokenize -> generate ------------------------------------------------------------

def test_term_ids_carry_each_sentences_terms_to_constraints():
    ids = np.array([[5, 6, OR, 9, AND, 12, AND], [PAD] * 7, [7, AND, PAD, PAD, PAD, PAD, PAD]], dtype=np.int32)
    assert parse_constraints(ids, 3, SPEC) == [
        (Constraint(((5, 6), (9,))), Constraint(((12,),))), (), (Constraint(((7,),)),)]
    assert parse_constraints(np.full((2, 3), PAD, np.int32), 2, SPEC) is None
    assert parse_constraints(None, 2, SPEC) is None


@pytest.mark.parametrize("row, message", [
    ([5, 2, AND], r"TERM_IDS\[0\] holds 2: not a target id .* other than the end-of-sentence id 2"),
    ([5, 90, AND], r"TERM_IDS\[0\] holds 90"),
    ([5, OR, AND], r"TERM_IDS\[0\]: a term's rendering must hold 1 to 32 ids"),
    ([5, 6, PAD], r"TERM_IDS\[0\]: its last term must end with -3"),
    ([5, OR, 6, PAD], r"its last term must end"),
])
def test_bad_term_ids_are_refused(row, message):
    with pytest.raises(InputError, match=message):
        parse_constraints(np.array([row], dtype=np.int32), 1, SPEC)


def test_term_ids_of_the_wrong_shape_are_refused():
    with pytest.raises(InputError, match=r"TERM_IDS must be an integer array \[n, L\], one row per sentence \(n = 2\)"):
        parse_constraints(np.array([[5, AND]], dtype=np.int32), 2, SPEC)


def test_generate_refuses_terms_with_forced_tokens_or_another_search_rule():
    terms = [(Constraint(((5,),)),), ()]
    check_constraints(terms, [NO_PREFIX, TargetPrefix((7,), prompt=1)], OPTIONS)  # apart: fine
    with pytest.raises(InputError, match="TERMS of sentence 0: a sentence with terms cannot have forced tokens"):
        check_constraints(terms, [TargetPrefix((7,), prompt=1), NO_PREFIX], OPTIONS)
    with pytest.raises(InputError, match="TERMS: this model decodes with fairseq's beam search rule"):
        check_constraints(terms, None, SearchOptions(beam_size=4, rule="fairseq"))


# ---- tokenize: text terms as target ids -----------------------------------------------------

@pytest.fixture(scope="module")
def demo_tokenize(demo_checkpoint):
    spec = ModelSpec(layers=3, heads=4, d_k=48, vocab=690, max_positions=256, pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                     max_source_len=128, max_target_len=128)
    return lambda texts, **kw: tokenize_request(demo_checkpoint.tokenizer, texts, spec, **kw)


def test_tokenize_encodes_each_rendering_with_the_target_side_without_eos(demo_checkpoint, demo_tokenize):
    tok = demo_checkpoint.tokenizer
    out = demo_tokenize(["She bought four small houses.", "We arrive at 17:20."],
                        terms=[(("achetées", "acheté"), ("maisons",)), ()])
    row = [*tok.encode_target("achetées")[:-1], OR, *tok.encode_target("acheté")[:-1], AND,
           *tok.encode_target("maisons")[:-1], AND]
    assert out[c.TERM_IDS].tolist() == [row, [PAD] * len(row)]
    got = parse_constraints(out[c.TERM_IDS], 2, dataclasses.replace(SPEC, vocab=690))
    assert got[0][0].alternatives[1] == tuple(tok.encode_target("acheté")[:-1])


def test_tokenize_refuses_terms_on_an_element_of_several_sentences_unless_sent_whole(demo_tokenize):
    texts = ["I saw three dogs. She bought four small houses.", "We arrive at 17:20."]
    terms = [(("maisons",),), ()]
    with pytest.raises(InputError, match=r"TERMS\[0\]: TERMS without their source words apply to one sentence, "
                                         r"and it holds 2 sentences: send one sentence per TEXT element with "
                                         r"SPLIT_SENTENCES false"):
        demo_tokenize(texts, terms=terms)
    assert demo_tokenize(texts, terms=terms, split=False)[c.TERM_IDS].shape[0] == 2
    assert demo_tokenize(texts, terms=[(), (("arrivons",),)])[c.TERM_IDS].shape[0] == 3  # others still split


def test_terms_naming_their_source_go_to_the_sentences_that_hold_it(demo_checkpoint, demo_tokenize):
    tok = demo_checkpoint.tokenizer
    terms = parse_terms(strings(json.dumps([{"source": "HOUSES", "target": "maisons"},
                                            {"source": "three dogs", "target": ["trois chiens"]}])), 1)
    assert terms[0][0] == ("maisons",) and terms[0][0].source == "HOUSES"
    rows = demo_tokenize(["I saw three dogs. She bought four small houses. We sleep."], terms=terms)[c.TERM_IDS]
    assert rows.shape[0] == 3  # three sentences, each with the terms whose source words it holds
    assert rows[0].tolist()[:len(tok.encode_target("trois chiens"))] == [*tok.encode_target("trois chiens")[:-1], AND]
    assert rows[1].tolist()[:len(tok.encode_target("maisons"))] == [*tok.encode_target("maisons")[:-1], AND]
    assert set(rows[2].tolist()) == {PAD}
    with pytest.raises(InputError, match=r'TERMS\[0\]: term 0: an object term is \{"source"'):
        parse_terms(strings('[{"target": "maisons"}]'), 1)


def test_tokenize_refuses_terms_beside_a_target_prefix_and_a_term_the_model_cannot_write(demo_tokenize):
    with pytest.raises(InputError, match=r"TERMS\[1\]: an element cannot have both terms and a TARGET_PREFIX"):
        demo_tokenize(["one", "two"], prefixes=["", "Deux"], terms=[(), (("deux",),)])
    with pytest.raises(InputError, match=r"TERMS\[0\]: term 0: '日本' holds characters this model cannot write"):
        demo_tokenize(["one"], terms=[(("日本",),)])
    with pytest.raises(InputError, match=r"TERMS\[0\]: term 0: .* is \d+ target tokens, more than the 32"):
        demo_tokenize(["one"], terms=[(("x" * 40,),)])


def test_term_rows_of_sentences_without_terms_are_padding():
    assert term_rows(None, [(), ()], [0, 1], SPEC).tolist() == [[PAD], [PAD]]


# ---- WARNING: a term missing --------------------------------------------------------------------

def test_a_term_none_of_whose_renderings_is_in_the_translation_is_named():
    terms = [("chat", "chatte"), ("maison",), ("dix-sept heures",)]
    assert missing_terms("La chatte  est dans la maison.", terms) == ["dix-sept heures"]
    assert warning("We arrive at 17:20.", "Nous arrivons à 17 h 20.", terms=[("dix-sept heures",)]) == \
        "may be incomplete: the term 'dix-sept heures' is missing"
    assert warning("We arrive at 17:20.", "Nous arrivons à 17 h 20.", terms=[("arrivons",)]) == ""


# ---- served: the demo model on a real tritonserver --------------------------------------------

CASES = [  # (sentence, its terms); the model writes neither 819 nor "achetées" unforced
    ("We saw eight hundred nineteen black dogs.", [["819"]]),
    ("She bought four small houses.", [["achetées"]]),
    ("The museum closes at 15:05.", ["musée", "ferme"]),
    ("You see two hundred forty-eight chairs.", [["tu vois", "vous voyez"]]),
    ("She saw eighty-one green horses.", None),
    ("The horse costs sixty-five euros.", None),
]


def _constraints(tok, terms):
    return tuple(Constraint(tuple(tuple(tok.encode_target(r)[:-1]) for r in ([t] if isinstance(t, str) else t)))
                 for t in terms or ())


@pytest.fixture(scope="module")
def reference(demo_checkpoint):
    """Per case, the reference decode's best hypothesis with its terms, and without."""
    from nmtserve.model.reference import reference_decode

    tok, model = demo_checkpoint.tokenizer, demo_checkpoint.model
    src = [tok.encode(text) for text, _ in CASES]
    with_terms = reference_decode(model, src, OPTIONS, constraints=[_constraints(tok, t) for _, t in CASES])
    plain = reference_decode(model, src, OPTIONS)
    return [h[0] for h in with_terms], [h[0] for h in plain]


@pytest.mark.server
def test_each_translation_holds_its_terms_as_the_reference_decodes_them(demo_server, demo_checkpoint, reference):
    from nmtserve.client import Translator

    tok = demo_checkpoint.tokenizer
    with_terms, plain = reference
    want = [tok.decode(h.tokens) for h in with_terms]
    for (_, terms), text, before in zip(CASES, want, plain, strict=True):
        if terms:
            assert all(any(r in text for r in ([t] if isinstance(t, str) else t)) for t in terms), text
        else:
            assert text == tok.decode(before.tokens)  # no terms: the sentence decodes as before
    assert want[:2] != [tok.decode(h.tokens) for h in plain[:2]]  # the terms changed these
    texts, terms = [t for t, _ in CASES], [t for _, t in CASES]
    for url, protocol in ((demo_server.urls.grpc_address, "grpc"), (demo_server.urls.http_address, "http")):
        with Translator(url, protocol=protocol) as client:
            got = client.translate(texts, terms=terms)
            assert [g.text for g in got] == want
            assert [g.score for g in got] == pytest.approx([h.score for h in with_terms], abs=1e-4)
            assert client.translate(texts[0], terms=terms[0]).text == want[0]  # one str: its own list


@pytest.mark.server
def test_generate_fed_term_ids_returns_the_reference_tokens(demo_server, demo_checkpoint, reference):
    import tritonclient.grpc as grpcclient

    from nmtserve.graphs import pad_batch

    tok = demo_checkpoint.tokenizer
    src = [tok.encode(text) for text, _ in CASES]
    spec = ModelSpec(layers=3, heads=4, d_k=48, vocab=690, max_positions=256, pad_id=0, bos_id=1, eos_id=2, unk_id=3)
    terms = [tuple(([t] if isinstance(t, str) else tuple(t)) for t in ts or ()) for _, ts in CASES]
    arrays = {c.SRC_IDS: pad_batch(src, 0, np.int32), c.SRC_LEN: np.array([len(s) for s in src], np.int32),
              c.TERM_IDS: term_rows(tok, terms, list(range(len(src))), spec)}
    inputs = []
    for name, value in arrays.items():
        x = grpcclient.InferInput(name, list(value.shape), "INT32")
        x.set_data_from_numpy(value)
        inputs.append(x)
    result = grpcclient.InferenceServerClient(demo_server.urls.grpc_address).infer("generate", inputs)
    ids, lengths = result.as_numpy(c.OUT_IDS), result.as_numpy(c.OUT_LEN)
    with_terms, _ = reference
    assert [ids[i, 0, : lengths[i, 0]].tolist() for i in range(len(src))] == [h.tokens for h in with_terms]


def _infer(demo_server, texts, terms, **extra):
    import tritonclient.grpc as grpcclient

    arrays = {c.TEXT: ("BYTES", strings(*texts)), c.TERMS: ("BYTES", strings(*terms)), **extra}
    inputs = []
    for name, (dtype, value) in arrays.items():
        x = grpcclient.InferInput(name, list(value.shape), dtype)
        x.set_data_from_numpy(value)
        inputs.append(x)
    return grpcclient.InferenceServerClient(demo_server.urls.grpc_address).infer("translate", inputs)


@pytest.mark.server
def test_a_term_the_length_limit_cut_is_named_in_warning(demo_server):
    result = _infer(demo_server, ["We arrive at 17:20.", "We arrive at 17:20."], ['["dix-sept heures"]', ""])
    warnings = [w.decode() for w in result.as_numpy(c.WARNING)]
    assert "the term 'dix-sept heures' is missing" in warnings[0]
    assert warnings[1] == ""


@pytest.mark.server
@pytest.mark.parametrize("terms, message", [
    ("not json", r"TERMS\[1\]: not JSON"),
    (json.dumps(["x"] * 17), r"TERMS\[1\]: 17 terms, more than the 16"),
    ('["chat", ""]', r"TERMS\[1\]: term 1 holds an empty string"),
])
def test_bad_terms_are_invalid_arg_naming_the_element(demo_server, terms, message):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match=message) as caught:
        _infer(demo_server, ["one", "two"], ["", terms])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.server
def test_terms_on_an_element_of_several_sentences_are_refused_unless_sent_whole(demo_server):
    from nmtserve.client import InvalidInputError, Translator

    text = "I saw three dogs. She bought four small houses."
    with Translator(demo_server.urls.grpc_address) as client:
        with pytest.raises(InvalidInputError, match="send one sentence per TEXT element with SPLIT_SENTENCES false"):
            client.translate([text], terms=[["maisons"]])
        assert "maisons" in client.translate(text, terms=["maisons"], split_sentences=False).text
        rejected, fine = client.translate([text, "We arrive at 17:20."], terms=[["maisons"], None], on_error="return")
        assert not rejected.ok and fine.ok


@pytest.mark.server
def test_a_glossary_gives_each_sentence_of_a_text_its_own_terms(demo_server, tmp_path):
    """Client ``glossary=`` and the CLI's ``--glossary FILE.tsv``: each sentence of a text is
    translated as it is alone with the terms its own words ask for (the oracle: one sentence per
    request with ``terms=``), found in any case; a text without a glossary term is unchanged."""
    import subprocess
    import sys

    from nmtserve.client import Translator

    glossary = {"houses": "maisons", "three dogs": "trois chiens", "car": "voiture"}
    text = "I saw three dogs. She bought four small Houses."
    with Translator(demo_server.urls.grpc_address) as client:
        alone = [client.translate(s, terms=t, split_sentences=False).text for s, t in (
            ("I saw three dogs.", ["trois chiens"]), ("She bought four small Houses.", ["maisons"]))]
        plain = client.translate("We arrive at 17:20.").text
        got = client.translate([text, "We arrive at 17:20."], glossary=glossary)
    assert got[0].text == " ".join(alone) and "trois chiens" in got[0].text and "maisons" in got[0].text
    assert got[1].text == plain and not got[0].warning
    (tmp_path / "terms.tsv").write_text("houses\tmaisons\nthree dogs\ttrois chiens\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--glossary", str(tmp_path / "terms.tsv")], input=text + "\n", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == " ".join(alone) + "\n"
    (tmp_path / "bad.tsv").write_text("houses maisons\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--glossary", str(tmp_path / "bad.tsv")], input=text + "\n", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "bad.tsv: Entry with the index 0" in done.stderr and "no tab" in done.stderr
