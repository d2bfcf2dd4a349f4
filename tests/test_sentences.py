"""A TEXT element of several sentences, and a sentence over the token limit, on the real tritonserver.

Oracles: the showcase's references (written by the corpus generator) for a line of README
sentences, and the PyTorch reference decode for a line sent whole; a cut sentence equals its
pieces translated one by one and joined with the whitespace they were cut at.
"""

from __future__ import annotations

import numpy as np
import pytest

from nmtserve import contract as c
from nmtserve.client import InvalidInputError, Translator
from nmtserve.demo.showcase import SHOWCASE
from nmtserve.server.protocol import cut_to_fit

pytestmark = pytest.mark.server

# The showcase sentences that end a sentence (a fragment such as "the first day" has no stop,
# so the segmenter rightly joins it to the next sentence).
SENTENCES = [(en, fr) for en, fr in SHOWCASE if en.endswith(".")]
SPACING = ["  ", "\n", " ", "\t", " "]


def _joined(side: int) -> str:
    parts = [pair[side] for pair in SENTENCES]
    out = parts[0]
    for i, part in enumerate(parts[1:]):
        out += SPACING[i % len(SPACING)] + part
    return out


def test_a_line_of_readme_sentences_comes_back_sentence_by_sentence(demo_server):
    assert len(SENTENCES) >= 6
    with Translator(demo_server.urls.grpc_address) as client:
        got = client.translate([_joined(0), SENTENCES[0][0]])
    assert got[0].text == _joined(1)  # each sentence exact, the spacing kept
    assert got[1].text == SENTENCES[0][1]


def test_split_sentences_false_sends_the_line_whole(demo_server, demo_checkpoint):
    from nmtserve.decoding.search import SearchOptions
    from nmtserve.model.reference import translate

    line = " ".join(en for en, _ in SENTENCES[:2])
    with Translator(demo_server.urls.grpc_address) as client:
        whole = client.translate(line, split_sentences=False).text
        split = client.translate(line).text
    options = SearchOptions(beam_size=4, max_length=128, max_length_a=2.0, max_length_b=10)
    reference = translate(demo_checkpoint.model, demo_checkpoint.tokenizer, [line], options)[0][0][0]
    assert whole == reference
    assert split == " ".join(fr for _, fr in SENTENCES[:2])


def _served(address: str, texts: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    try:
        tensor = grpcclient.InferInput(c.TEXT, [len(texts)], "BYTES")
        tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
        result = client.infer(c.DEFAULT_MODEL, [tensor])
        return {name: result.as_numpy(name) for name in (c.TRANSLATION, c.CUTS)}
    finally:
        client.close()


def test_a_sentence_over_the_token_limit_is_cut_and_translated_in_pieces(demo_server, demo_checkpoint):
    clause = "we bought three hundred twenty-one red apples"
    long = "On the first day, " + ", ".join([clause] * 12) + "."
    tokens = demo_checkpoint.tokenizer.encode
    assert len(tokens(long)) > 128  # the demo repository's --max-source-len
    pieces = cut_to_fit(long, lambda t: len(tokens(t)) <= 128)
    assert pieces is not None and len(pieces) >= 2
    out = _served(demo_server.urls.grpc_address, ["I have three red apples.", long])
    assert out[c.CUTS].tolist() == [0, len(pieces) - 1]
    with Translator(demo_server.urls.grpc_address) as client:
        alone = client.translate([p for p, _ in pieces], split_sentences=False)
    assert out[c.TRANSLATION][1].decode() == "".join(t.text + gap for t, (_, gap) in zip(alone, pieces, strict=True))


def test_a_single_word_over_the_limit_is_refused_by_name(demo_server):
    with Translator(demo_server.urls.grpc_address) as client:
        with pytest.raises(InvalidInputError, match=r"too long: .* no space to cut it at") as caught:
            client.translate(["I have three red apples.", "seven" * 200])
    assert caught.value.index == 1


def test_a_one_model_server_lists_its_pair(demo_server, tmp_path):
    """`nmtserve pairs` and Translator.pairs() on a repository of one model: the pair its checkpoint
    names (the demo's test.en / test.fr), printed with exit status 0."""
    import subprocess
    import sys

    from nmtserve.export.pipeline import named_pair

    with Translator(demo_server.urls.grpc_address) as client:
        assert client.pairs() == ["en-fr"]
        assert client.languages() == []  # it takes no language inputs
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "pairs", "--url", demo_server.urls.grpc_address],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "en-fr\n", "")
    # `nmtserve languages` lists the pair's languages (it said "nmtserve translate: error" and exited 0).
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "languages", "--url", demo_server.urls.grpc_address],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "en\ten\tEnglish\nfr\tfr\tFrench\n", "")
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "languages", "--json", "--url", demo_server.urls.grpc_address],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[0] == '{"code": "en", "iso": "en", "name": "English", "targets": ["fr"]}'
    from nmtserve.client.cli import _pair_languages

    assert _pair_languages(["unknown-unknown"]) == [] and [lang.code for lang in _pair_languages(["de-unknown"])] == []
    (tmp_path / "tokenizer_config.json").write_text('{"source_lang": "de"}')
    assert named_pair(tmp_path) == "de-unknown"
