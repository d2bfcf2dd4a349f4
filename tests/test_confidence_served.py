"""Confidence, omissions and degenerate output, served: the demo model on a real tritonserver.

The oracle for confidence is the PyTorch reference decode with ``SearchOptions(confidence=True)``:
its tokens' log-probabilities give each word's and the sentence's confidence (nmtserve.confidence),
which the server must return (to the two decimals of WORD_CONFIDENCE); asking changes no token and
no score. Degenerate output is forced through the model itself: a target prefix that starts a
loop, or a copy of the source, which WARNING must name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest

from nmtserve.client import Translator

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("one_torch_thread")]

TEXTS = ["I have three hundred twelve red apples.", "The train leaves at 7:45.",
         "She bought four small houses. We arrive at 17:20."]


@pytest.fixture(scope="module")
def client(demo_server):
    with Translator(demo_server.urls.grpc_address) as translator:
        yield translator


def test_confidence_is_the_reference_decodes_and_changes_nothing(client, demo_checkpoint):
    from helpers import DEFAULTS

    from nmtserve.confidence import sentence_confidence, word_confidences
    from nmtserve.model.reference import reference_decode

    plain = client.translate(TEXTS)
    asked = client.translate(TEXTS, confidence=True)
    assert [(t.text, t.score) for t in asked] == [(t.text, t.score) for t in plain]
    assert all(t.confidence is None and t.word_confidence is None for t in plain)  # free when not asked
    tok, model = demo_checkpoint.tokenizer, demo_checkpoint.model
    for text, got in zip(TEXTS[:2], asked[:2], strict=True):
        best = reference_decode(model, [tok.encode(text)], dataclasses.replace(DEFAULTS, confidence=True))[0][0]
        pieces = tok.target_pieces(best.tokens)
        want_words = word_confidences(pieces, best.token_logprobs)
        assert len(got.word_confidence) == len(got.text.split()) == len(want_words)
        assert got.word_confidence == pytest.approx(want_words, abs=0.006)  # two decimals
        assert got.confidence == pytest.approx(sentence_confidence(best.token_logprobs), abs=1e-4)
        assert got.confidence == pytest.approx(math.exp(got.score), abs=1e-4)  # length penalty 1
    two = asked[2]  # two sentences: the lowest sentence's confidence, every word of both
    assert len(two.word_confidence) == len(two.text.split())
    assert two.confidence == pytest.approx(min(t.confidence for t in client.translate(
        TEXTS[2].split(". ", 1)[0:1] + [TEXTS[2].split(". ", 1)[1]], confidence=True)), abs=1e-4)


def test_the_cli_writes_confidence_into_its_json(demo_server):
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--json", "--confidence"], input=TEXTS[0] + "\n", capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert 0 < record["confidence"] <= 1 and len(record["word_confidence"]) == len(record["translation"].split())
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--confidence"], input=TEXTS[0] + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "add --json" in done.stderr


def test_a_loop_and_a_copy_of_the_source_are_named_in_warning(client):
    """The model is steered into each by a target prefix (forced, then decoding continues)."""
    loop = client.translate("I have seven apples.", target_prefix="sept sept sept sept")
    assert loop.text.startswith("sept sept sept sept")
    assert "may be wrong" in loop.warning and "come 4 times in a row" in loop.warning, loop.warning
    source = "The red car costs twelve thousand euros."
    copy = client.translate(source, target_prefix=source)
    assert copy.text.startswith(source) and "it copies the source" in copy.warning, (copy.text, copy.warning)
    assert client.translate(source).warning == ""


def test_missing_words_name_the_source_words_nothing_attended_to(client):
    exact = client.translate(TEXTS[0], alignment=True, confidence=True)
    assert exact.missing_words == []
    got = client.translate("I see fifty-three elegant tables.", alignment=True, confidence=True)
    assert "elegant" not in got.text and "élégant" not in got.text  # the demo never learned it
    # Something is named, and only content words: which one is the decoder's attention peak, one
    # word off on this model more often than not ("tables." here; the adjective is named in
    # 32 of 200 such sentences: docs/measurements.md#omissions): a hint, not named in WARNING.
    named = ["I see fifty-three elegant tables.".split()[i] for i in got.missing_words]
    assert named and set(named) <= {"see", "elegant", "tables."}, named
    # WARNING says the translation may be incomplete, by the count of content words, named or not.
    assert got.warning.startswith("may be incomplete: it has 2 content words where the source has 3"), got.warning
    assert client.translate("I see fifty-three elegant tables.").warning == got.warning.split("; may be wrong")[0]
