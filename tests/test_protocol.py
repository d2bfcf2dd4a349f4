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
    with pytest.raises(InputError, match=r"TEXT\[1\] is too long"):
        tokenize_request(tok, ["one", "one " * 300], spec)
