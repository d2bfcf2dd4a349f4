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
