"""Word and sentence confidence (nmtserve.confidence) and the search's token log-probabilities
they come from (SearchOptions.confidence)."""

from __future__ import annotations

import math

import pytest

from nmtserve.confidence import (
    covered_words,
    format_confidences,
    parse_confidences,
    sentence_confidence,
    word_confidences,
)
from nmtserve.decoding.search import SearchOptions


def test_a_words_confidence_is_its_least_likely_piece():
    pieces = ["\u2581Je", "\u2581vois", "\u2581cinquante", "-", "trois", "\u2581tables", ".", None]
    logprobs = [-0.1, -0.1, -0.1, -0.1, -1.2, -0.8, -0.3, -0.1]
    got = word_confidences(pieces, logprobs)
    assert [round(v, 3) for v in got] == [round(math.exp(x), 3) for x in (-0.1, -0.1, -1.2, -0.8)]
    mean = word_confidences(pieces, logprobs, "mean")
    assert mean[2] == pytest.approx(math.exp((-0.1 - 0.1 - 1.2) / 3))
    assert word_confidences(pieces, None) == []
    assert sentence_confidence(logprobs) == pytest.approx(math.exp(sum(logprobs) / len(logprobs)))
    assert parse_confidences(format_confidences(got)) == [0.9, 0.9, 0.3, 0.45]
    with pytest.raises(ValueError, match="not a confidence"):
        parse_confidences("0.5 high")


def test_covered_words_ignore_punctuation_glued_to_a_word():
    source = ["\u2581She", "\u2581bought", "\u2581four", "\u2581houses", ".", None]
    target = ["\u2581Elle", "\u2581a", "\u2581quatre", ".", None]
    # the full stop attends to the full stop glued to "houses": that is no word for "houses"
    assert covered_words(source, target, [0, 1, 2, 4, 5]) == {0, 1, 2}


def test_the_searchs_token_logprobs_sum_to_its_score_and_cost_nothing_when_not_asked(demo_checkpoint):
    from nmtserve.model.reference import reference_decode

    tok = demo_checkpoint.tokenizer
    sources = [tok.encode(t) for t in ("I have three red apples.", "She sold four small houses.",
                                       "The train leaves at 7:45.", "hello")]
    plain = reference_decode(demo_checkpoint.model, sources, SearchOptions(beam_size=4, max_length=60, num_hypotheses=2))
    asked = reference_decode(demo_checkpoint.model, sources,
                             SearchOptions(beam_size=4, max_length=60, num_hypotheses=2, confidence=True))
    for without, with_ in zip(plain, asked, strict=True):
        assert [(h.tokens, h.score) for h in without] == [(h.tokens, h.score) for h in with_]
        assert all(h.token_logprobs is None for h in without)
        for h in with_:
            assert len(h.token_logprobs) == len(h.tokens)
            assert sum(h.token_logprobs) == pytest.approx(h.sum_logprobs, abs=1e-9)
            assert all(lp <= 0 for lp in h.token_logprobs)


def test_a_model_broken_so_that_it_never_stops_loops_and_warning_says_so(demo_checkpoint):
    """The demo with its end-of-sentence logit pushed down (a model broken on purpose) runs on to
    the length limit repeating itself; WARNING names the loop, and the model's own confidence
    in the words it adds after the sentence is low."""
    import copy

    import torch

    from nmtserve.confidence import word_confidences
    from nmtserve.coverage import warning
    from nmtserve.model.reference import reference_decode

    broken = copy.deepcopy(demo_checkpoint.model)
    with torch.no_grad():
        broken.final_logits_bias[broken.config.eos_id] = -1e4
    tok = demo_checkpoint.tokenizer
    source = "I have seven apples."
    best = reference_decode(broken, [tok.encode(source)], SearchOptions(beam_size=4, max_length=40,
                                                                        confidence=True))[0][0]
    text = tok.decode(best.tokens)
    assert len(best.tokens) == 40 and text.startswith("J'ai sept pommes."), text
    said = warning(source, text, "en", "fr")
    assert "may be wrong: the words" in said and "times in a row" in said, (text, said)
    words = word_confidences(tok.target_pieces(best.tokens), best.token_logprobs)
    assert max(words[:4]) > 0.5 and min(words[4:]) < 0.3, (text, words)
