"""The serving contract's input checks, without a server (the server tests send the same cases)."""

from __future__ import annotations

import numpy as np
import pytest

from nmtserve.runtime.spec import ModelSpec
from nmtserve.server.protocol import InputError, parse_sources

SPEC = ModelSpec(layers=2, heads=4, d_k=8, vocab=90, max_positions=64, pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                 src_vocab=50, max_source_len=6)


def test_sources_come_back_unpadded_in_order():
    src = np.array([[5, 6, 2, 0], [7, 2, 0, 0], [9, 9, 9, 2]], dtype=np.int32)
    assert parse_sources(src, np.array([3, 2, 4], dtype=np.int32), SPEC) == [[5, 6, 2], [7, 2], [9, 9, 9, 2]]


@pytest.mark.parametrize("src, lengths, message", [
    (None, np.array([1]), "SRC_IDS .n, S. and SRC_LEN .n. are required"),
    (np.array([[5, 2]]), np.array([2, 2]), "are required"),
    (np.array([5, 2]), np.array([2]), "are required"),
    (np.array([[5.0, 2.0]]), np.array([2]), "must be integers"),
    (np.array([[5, 2], [6, 2]]), np.array([2, 0]), r"SRC_LEN\[1\] is 0"),
    (np.array([[5, 2]]), np.array([3]), r"SRC_LEN\[0\] is 3: it must be between 1 and 2"),
    (np.full((1, 8), 5), np.array([7]), r"SRC_LEN\[0\] is 7.*max_source_len 6"),
    (np.array([[5, 2], [50, 2]]), np.array([2, 2]), r"SRC_IDS\[1\] holds token id 50, outside the source vocabulary \(0..49\)"),
    (np.array([[-3, 2]]), np.array([2]), r"SRC_IDS\[0\] holds token id -3"),
])
def test_bad_sources_are_refused_naming_the_sentence(src, lengths, message):
    with pytest.raises(InputError, match=message):
        parse_sources(src, lengths, SPEC)


def test_an_export_without_a_recorded_source_vocabulary_skips_only_that_check():
    import dataclasses

    spec = dataclasses.replace(SPEC, src_vocab=0)
    assert parse_sources(np.array([[500, 2]]), np.array([2]), spec) == [[500, 2]]
    with pytest.raises(InputError, match="token id -1"):
        parse_sources(np.array([[-1, 2]]), np.array([2]), spec)


# ---- target prefixes and per-sentence inputs


def _bytes(*items):
    return np.array([i.encode() for i in items], dtype=np.object_)


def test_a_text_input_is_one_value_for_all_or_one_per_sentence():
    from nmtserve.server.protocol import decode_strings

    assert decode_strings("TARGET_LANG", None, 3, per_sentence=True) is None
    assert decode_strings("TARGET_LANG", _bytes("fr"), 3, per_sentence=True) == ["fr"] * 3
    assert decode_strings("TARGET_LANG", _bytes("fr", "de", "fr"), 3, per_sentence=True) == ["fr", "de", "fr"]
    with pytest.raises(InputError, match=r"TARGET_LANG must be \[1\] or \[3\]"):
        decode_strings("TARGET_LANG", _bytes("fr", "de"), 3, per_sentence=True)
    with pytest.raises(InputError, match=r"SOURCE_LANG must be \[1\]"):
        decode_strings("SOURCE_LANG", _bytes("fr", "de"), 2, per_sentence=False)
    with pytest.raises(InputError, match=r"TARGET_PREFIX\[1\] is not valid UTF-8"):
        decode_strings("TARGET_PREFIX", np.array([b"ok", b"\xff"], dtype=np.object_), 2, per_sentence=True)


def test_forced_tokens_become_one_target_prefix_per_sentence():
    from nmtserve.decoding.search import TargetPrefix
    from nmtserve.server.protocol import parse_prefixes

    ids = np.array([[7, 8, 0], [0, 0, 0], [9, 0, 0]], dtype=np.int32)
    got = parse_prefixes(ids, np.array([2, 0, 1], np.int32), np.array([2, 0, 0], np.int32), 3, SPEC)
    assert got == [TargetPrefix((7, 8), prompt=2), TargetPrefix(), TargetPrefix((9,))]
    assert parse_prefixes(None, None, None, 3, SPEC) is None
    assert parse_prefixes(ids, np.zeros(3, np.int32), np.zeros(3, np.int32), 3, SPEC) is None  # all empty


@pytest.mark.parametrize("ids, lengths, prompts, message", [
    ([[7, 8]], [2], None, "go together"),
    ([[7, 8]], [2, 1], [0, 0], "go together"),
    ([[7, 8]], [3], [0], "FORCED_LEN"),
    ([[7, 8]], [1], [2], "PROMPT_LEN"),
    ([[7, 2]], [2], [0], "end-of-sentence"),
    ([[7, 95]], [2], [0], "outside the target vocabulary"),
])
def test_bad_forced_tokens_are_named(ids, lengths, prompts, message):
    from nmtserve.server.protocol import parse_prefixes

    arrays = [np.array(x, dtype=np.int32) if x is not None else None for x in (ids, lengths, prompts)]
    with pytest.raises(InputError, match=message):
        parse_prefixes(*arrays, 1, SPEC)


def test_tokenize_puts_a_target_prefix_in_the_prompt(demo_checkpoint):
    from nmtserve import contract as c
    from nmtserve.server.protocol import tokenize_request

    tok = demo_checkpoint.tokenizer
    spec = ModelSpec(layers=2, heads=4, d_k=8, vocab=1000, max_positions=300, pad_id=0, bos_id=1, eos_id=2,
                     unk_id=3, max_source_len=256, max_target_len=256)
    out = tokenize_request(tok, ["one apple", "two apples"], spec, prefixes=["Une", ""])
    assert out[c.SRC_IDS][0, : out[c.SRC_LEN][0]].tolist() == tok.encode("one apple")
    prefix = tok.encode_target("Une")[:-1]
    assert out[c.FORCED_IDS][0, : out[c.FORCED_LEN][0]].tolist() == prefix
    assert out[c.FORCED_LEN].tolist() == [len(prefix), 0] and out[c.PROMPT_LEN].tolist() == [len(prefix), 0]
    with pytest.raises(InputError, match=r"TARGET_PREFIX\[0\] is too long"):
        tokenize_request(tok, ["one"], spec, prefixes=["un " * 200])
    with pytest.raises(InputError, match=r"TEXT\[1\] is too long: .* no space to cut it at"):
        tokenize_request(tok, ["one", "one" * 300], spec)


def _demo_spec(max_source_len: int = 256) -> ModelSpec:
    return ModelSpec(layers=2, heads=4, d_k=8, vocab=1000, max_positions=300, pad_id=0, bos_id=1, eos_id=2,
                     unk_id=3, max_source_len=max_source_len, max_target_len=256)


def test_a_text_of_several_sentences_is_sent_sentence_by_sentence(demo_checkpoint):
    from nmtserve import contract as c
    from nmtserve.server.protocol import tokenize_request

    tok = demo_checkpoint.tokenizer
    line = "I have three red apples.  The train leaves at 7:45.\nOn the first day, we bought seven chairs."
    out = tokenize_request(tok, ["one apple", line, "7:45"], _demo_spec(), prefixes=["", "J'ai", ""])
    sentences = ["I have three red apples.", "The train leaves at 7:45.", "On the first day, we bought seven chairs."]
    rows = [out[c.SRC_IDS][i, : out[c.SRC_LEN][i]].tolist() for i in range(len(out[c.SRC_LEN]))]
    assert rows == [tok.encode(t) for t in ["one apple", *sentences, "7:45"]]
    assert out[c.PIECES].tolist() == [1, 3, 1] and out[c.CUTS].tolist() == [0, 0, 0]
    assert [g.decode() for g in out[c.GAPS]] == ["", "", "", "  ", "\n", "", "", ""]
    # the prefix goes to the element's first sentence only
    assert out[c.PROMPT_LEN].tolist()[1:4] == [len(tok.encode_target("J'ai")) - 1, 0, 0]
    whole = tokenize_request(tok, [line], _demo_spec(), split=False)
    assert whole[c.PIECES].tolist() == [1] and whole[c.SRC_LEN].tolist() == [len(tok.encode(line))]


@pytest.mark.parametrize("language", ["en", "de", "ja", "zz", ""])
def test_the_first_look_at_a_line_cuts_it_as_the_segmenter_does(language):
    from nmtserve.documents import plain_line_is_one_sentence
    from nmtserve.server.protocol import _segmented_sentences, sentences_of

    texts = ["He sold three red horses.", "  one apple  ", "7:45", "", "   ", "Dr. Smith came at 5 p.m. today.",
             "I came. I saw. I won.", "Stop!Go?", "He said: \"No.\" Then left.", "e.g. this one", "x\u00a0. Y",
             "\u4f60\u597d\u3002\u518d\u89c1\u3002", "Il est 7 h 45... Oui.", "A\x07B. C d.", "one.\ntwo.",
             "no break\r\nhere. Or here.", "**Stop.** Go", "<g1>Hello.</g1> World.", "U.S.A. is big. Yes."]
    one = 0
    for text in texts:
        assert sentences_of(text, language) == _segmented_sentences(text, language), text
        one += plain_line_is_one_sentence(text, language)
    assert one >= 5 or not language  # the first look decided some (none without a language: segment refuses it)


def test_a_sentence_over_the_token_limit_is_cut_at_a_clause_then_at_words(demo_checkpoint):
    from nmtserve import contract as c
    from nmtserve.server.protocol import cut_to_fit, tokenize_request

    tok = demo_checkpoint.tokenizer
    clauses = "On the first day, we bought seven chairs, three red apples and twelve books"
    limit = max(len(tok.encode(part)) for part in clauses.split(", ")) + 1
    out = tokenize_request(tok, [clauses], _demo_spec(limit))
    assert (out[c.SRC_LEN] <= limit).all() and out[c.CUTS].tolist() == [out[c.PIECES][0] - 1] and out[c.PIECES][0] > 1
    pieces = cut_to_fit(clauses, lambda t: len(tok.encode(t)) <= limit)
    assert "".join(p + gap for p, gap in pieces) == clauses and pieces[0][0].endswith(",")
    words = "one two three four five six seven eight nine ten eleven twelve"
    pieces = cut_to_fit(words, lambda t: len(t.split()) <= 5)
    assert [p for p, _ in pieces] == ["one two three four five", "six seven eight nine ten", "eleven twelve"]
    assert cut_to_fit("abcdefgh", lambda t: len(t) <= 3) is None


def test_detokenize_joins_the_pieces_with_their_gaps_and_sums_their_scores():
    from nmtserve.server.protocol import join_pieces

    texts = np.array([[b"A."], [b"B."], [b"C."], [b"D"]], dtype=np.object_)
    scores = np.array([[-1.0], [-2.0], [-0.5], [-0.25]], dtype=np.float32)
    gaps = np.array([b"", b"  ", b"\n", b"", b"", b""], dtype=np.object_)
    joined, summed = join_pieces(texts, scores, np.array([3, 1], np.int32), gaps)
    assert joined[:, 0].tolist() == [b"A.  B.\nC.", b"D"] and summed[:, 0].tolist() == [-3.5, -0.25]
    same, _ = join_pieces(texts, scores, None, None)
    assert same is texts
    with pytest.raises(InputError, match="PIECES must add up to the 4 rows"):
        join_pieces(texts, scores, np.array([2, 1], np.int32), gaps[:5])


# ---- the rest of the Triton-free checks: texts, options, limits, pairs, BLS error wording


@pytest.mark.parametrize("array, message", [
    (None, "input TEXT is required"),
    (np.array([[b"a"]], dtype=np.object_), r"TEXT must be 1-D \[n\]"),
    (np.array([], dtype=np.object_), "TEXT is empty"),
    (np.array([b"ok", b"\xff\xfe"], dtype=np.object_), r"TEXT\[1\] is not valid UTF-8"),
    (np.array([b"ok", b"  \t"], dtype=np.object_), r"TEXT\[1\] is empty or whitespace only"),
    (np.array([b"ok", None], dtype=np.object_), r"TEXT\[1\] is not a string"),
])
def test_bad_texts_are_named(array, message):
    from nmtserve.server.protocol import decode_texts

    with pytest.raises(InputError, match=message):
        decode_texts(array)


def test_texts_come_back_decoded_in_order():
    from nmtserve.server.protocol import decode_texts

    assert decode_texts(np.array(["été".encode(), b"two"], dtype=np.object_)) == ["été", "two"]


def test_absent_options_are_the_exports_defaults():
    from nmtserve.server.protocol import parse_search_options

    spec = ModelSpec(layers=2, heads=4, d_k=8, vocab=90, max_positions=64, pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                     max_target_len=40, beam_size=5, length_penalty=0.6)
    options = parse_search_options({}, spec, 8)
    assert options == spec.search_options()
    assert (options.beam_size, options.length_penalty, options.max_length_for(3)) == (5, 0.6, 16)  # 2 * 3 + 10
    given = parse_search_options({"BEAM_SIZE": np.array([2], np.int32), "MAX_LENGTH": np.array([7], np.int32),
                                  "NUM_HYPOTHESES": np.array([2], np.int32)}, spec, 8)
    assert (given.beam_size, given.max_length_for(30), given.num_hypotheses) == (2, 7, 2)
    assert options.early_stopping is False and given.early_stopping is False
    early = parse_search_options({"EARLY_STOPPING": np.array([True])}, spec, 8)
    assert early == spec.search_options(early_stopping=True)


@pytest.mark.parametrize("inputs, message", [
    ({"BEAM_SIZE": np.array([9], np.int32)}, "BEAM_SIZE must be between 1 and 8"),
    ({"BEAM_SIZE": np.array([2.0], np.float32)}, "BEAM_SIZE must be an integer"),
    ({"NUM_HYPOTHESES": np.array([5], np.int32)}, r"NUM_HYPOTHESES must be between 1 and BEAM_SIZE \(4\)"),
    ({"MAX_LENGTH": np.array([0], np.int32)}, "MAX_LENGTH must be between 1 and 40"),
    ({"LENGTH_PENALTY": np.array([np.inf], np.float32)}, "LENGTH_PENALTY must be a finite number"),
    ({"BEAM_SIZE": np.array([2, 3], np.int32)}, r"BEAM_SIZE must hold one value"),
    ({"EARLY_STOPPING": np.array([1.0], np.float32)}, "EARLY_STOPPING must hold one boolean"),
    ({"EARLY_STOPPING": np.array([True, False])}, "EARLY_STOPPING must hold one boolean"),
])
def test_bad_options_are_named(inputs, message):
    from nmtserve.server.protocol import parse_search_options

    spec = ModelSpec(layers=2, heads=4, d_k=8, vocab=90, max_positions=64, pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                     max_target_len=40)
    with pytest.raises(InputError, match=message):
        parse_search_options(inputs, spec, 8)


def test_request_limits_name_the_limit_and_zero_means_none():
    from nmtserve.server.protocol import RequestLimits

    limits = RequestLimits.from_params({"max_request_sentences": "2", "max_sentence_chars": "5"})
    limits.check(["abc", "abcde"])
    with pytest.raises(InputError, match="more than the 2 a request may hold"):
        limits.check(["a", "b", "c"])
    with pytest.raises(InputError, match=r"TEXT\[1\] is too long: 6 characters, the maximum is 5"):
        limits.check(["a", "abcdef"])
    RequestLimits(0, 0).check(["x" * 10_000] * 3000)
    assert RequestLimits.from_params({}) == RequestLimits()


def test_a_pair_is_chosen_from_what_the_request_gives():
    from nmtserve.server.protocol import choose_pair

    pairs = ("en-de", "en-fr", "de-fr")
    assert choose_pair(pairs, "en", "fr") == "en-fr"
    assert choose_pair(pairs, "de", None) == "de-fr"
    with pytest.raises(InputError, match=r"ambiguous: give SOURCE_LANG and TARGET_LANG \(this server translates"):
        choose_pair(pairs, "en", None)
    with pytest.raises(InputError, match="no model for the language pair en-es"):
        choose_pair(pairs, "en", "es")


@pytest.mark.parametrize("message, status", [
    ("in ensemble 'translate', TEXT[3] is empty or whitespace only", "INVALID_ARG"),
    ("BEAM_SIZE must be between 1 and 8, got 9", "INVALID_ARG"),
    ("server busy: 2048 sentences are waiting", "UNAVAILABLE"),
    ("decoding failed: the decoding engine is shutting down", "UNAVAILABLE"),
    ("Request for unknown model: 'generate' has no available versions", "UNAVAILABLE"),
    ("onnxruntime: bad allocation", None),
])
def test_the_status_a_bls_error_message_means(message, status):
    from nmtserve.server.protocol import status_of_message

    assert status_of_message(message) == status
