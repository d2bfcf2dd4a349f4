"""The corpus as people type it (nmtserve/demo/typed.py): its rules, and splits that never overlap."""

from __future__ import annotations

import random

import pytest

from nmtserve.demo import corpus, typed


@pytest.mark.parametrize("n, spelling, words", [
    (123, "american", "one hundred twenty-three"),
    (123, "british", "one hundred and twenty-three"),
    (123, "british spaced", "one hundred and twenty three"),
    (1005, "british", "one thousand and five"),
    (123_456, "british", "one hundred and twenty-three thousand four hundred and fifty-six"),
    (20, "spaced", "twenty"),
])
def test_every_spelling_reads_back_as_its_number(n, spelling, words):
    assert typed.en_cardinal_spelled(n, spelling) == words
    assert typed.parse_cardinal(corpus.en_cardinal(n)) == n


def test_respelling_changes_numbers_but_never_an_ordinal():
    rng = random.Random(0)
    for _ in range(200):
        text = typed.respell_numbers(rng, "the one hundred first page and twenty-first day, I have one hundred five cats")
        assert text.startswith("the one hundred first page and twenty-first day, I have one hundred ")
        assert text.endswith(("one hundred five cats", "one hundred and five cats"))


def test_digits_follow_french_typography():
    assert typed.fr_digits(12_000) == "12 000" and typed.fr_digits(9999) == "9999"
    assert typed.fr_digits(12, 50) == "12,50" and typed.en_digits(12_000, grouped=True) == "12,000"
    en, fr = typed.render_price_digits(12, 50, corpus.noun("book"), None)
    assert (en, fr) == ("The book costs 12.50 euros.", "Le livre coûte 12,50 euros.")
    assert typed.render_price_digits(1, None, corpus.noun("book"), None) == ("The book costs 1 euro.", "Le livre coûte 1 euro.")


def test_case_and_stop_follow_the_input():
    assert typed.as_typed("I have three cats.", "J'ai trois chats.", lower=True, stop=False) == ("i have three cats", "j'ai trois chats")
    assert typed.as_typed("The train leaves at 7:45.", "Le train part à 7 h 45.", lower=False, stop=False) == (
        "The train leaves at 7:45", "Le train part à 7 h 45")


def test_typed_examples_are_deterministic_unique_and_skip_what_they_are_told():
    first = typed.typed_examples(2000, 5)
    assert first == typed.typed_examples(2000, 5)
    sources = [e.source for e in first]
    assert len(set(sources)) == len(sources) and all(1 <= len(s.split()) <= corpus.MAX_TOKENS for s in sources)
    assert {e.category for e in first} == {f"typed-{k}" for k in typed.KIND_WEIGHTS}
    assert all(e.target.strip() for e in first)  # never an empty reference
    again = typed.typed_examples(500, 6, exclude=set(sources))
    assert not {e.source for e in again} & set(sources)


def test_the_training_splits_never_share_a_source():
    from nmtserve.demo.train import TrainOptions, _splits

    splits = _splits(TrainOptions(output="unused", train_size=3000, valid_size=100, test_size=200,
                                  typed_train_size=2000, typed_valid_size=100, typed_test_size=500,
                                  joined_train_size=2000, joined_valid_size=100, joined_test_size=500, first_test_size=200,
                                  short_train_size=1000))
    assert len(splits["typed-test"]) == 500 and len(splits["joined-test"]) == 500 and len(splits["first-test"]) == 200
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            # the short stream repeats the lexicon ("twenty", "hello"), also found in the other
            # training streams; a held-out source is in no other split
            if not (a.endswith("-train") or a == "train") or not (b.endswith("-train") or b == "train"):
                assert not {s for s, _ in splits[a]} & {s for s, _ in splits[b]}, (a, b)
