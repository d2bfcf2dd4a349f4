"""Tests for the synthetic English->French corpus (nmtserve.demo.corpus)."""

from __future__ import annotations

import datetime as dt
import random
import re

import pytest
from num2words import num2words

from nmtserve.demo import corpus

SAMPLE_SIZE = 2000


@pytest.fixture(scope="module")
def sample() -> list[corpus.Example]:
    return corpus.generate_examples(SAMPLE_SIZE, seed=0)


# --------------------------------------------------------------------------------------------
# Determinism, uniqueness, lengths, splits
# --------------------------------------------------------------------------------------------


def test_same_seed_same_pairs() -> None:
    assert corpus.generate_pairs(300, seed=7) == corpus.generate_pairs(300, seed=7)


def test_different_seeds_differ() -> None:
    assert corpus.generate_pairs(300, seed=7) != corpus.generate_pairs(300, seed=8)


def test_global_random_state_is_untouched() -> None:
    random.seed(123)
    expected = random.random()
    random.seed(123)
    corpus.generate_pairs(100, seed=1)
    assert random.random() == expected


def test_stream_is_prefix_stable() -> None:
    assert corpus.generate_pairs(500, seed=3)[:200] == corpus.generate_pairs(200, seed=3)


def test_sources_unique_and_nonempty(sample: list[corpus.Example]) -> None:
    sources = [ex.source for ex in sample]
    assert len(sources) == SAMPLE_SIZE
    assert len(set(sources)) == SAMPLE_SIZE
    for ex in sample:
        assert ex.source.strip() and ex.target.strip()
        assert ex.source == ex.source.strip() and ex.target == ex.target.strip()
        assert "  " not in ex.source and "  " not in ex.target


def test_source_lengths_in_bounds(sample: list[corpus.Example]) -> None:
    lengths = [len(ex.source.split()) for ex in sample]
    assert min(lengths) >= corpus.MIN_TOKENS
    assert max(lengths) <= corpus.MAX_TOKENS
    # Some long sentences must exist, most must be short-to-medium.
    assert sum(n >= 12 for n in lengths) > 0.03 * SAMPLE_SIZE
    assert sum(n <= 10 for n in lengths) > 0.7 * SAMPLE_SIZE


def test_every_category_appears(sample: list[corpus.Example]) -> None:
    counts = {c: 0 for c in corpus.CATEGORY_WEIGHTS}
    for ex in sample:
        counts[ex.category] += 1
    for category, weight in corpus.CATEGORY_WEIGHTS.items():
        # Shares stay near their weights at this size (duplicates are retried in-category).
        assert counts[category] > 0.5 * weight * SAMPLE_SIZE, (category, counts)


def test_weights_sum_to_one() -> None:
    assert sum(corpus.CATEGORY_WEIGHTS.values()) == pytest.approx(1.0)


def test_same_english_same_french_across_seeds() -> None:
    a = dict(corpus.generate_pairs(SAMPLE_SIZE, seed=0))
    b = dict(corpus.generate_pairs(SAMPLE_SIZE, seed=1))
    shared = a.keys() & b.keys()
    assert shared  # small numbers and times recur across seeds
    assert all(a[s] == b[s] for s in shared)


def test_splits_disjoint_by_source() -> None:
    splits = corpus.build_splits(600, 100, 100, seed=5)
    assert {k: len(v) for k, v in splits.items()} == {"train": 600, "valid": 100, "test": 100}
    sources = {k: {src for src, _ in v} for k, v in splits.items()}
    assert not sources["train"] & sources["valid"]
    assert not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]


def test_held_out_splits_do_not_depend_on_train_size() -> None:
    small = corpus.build_splits(100, 50, 50, seed=5)
    large = corpus.build_splits(400, 50, 50, seed=5)
    assert small["test"] == large["test"]
    assert small["valid"] == large["valid"]


def test_impossible_request_raises() -> None:
    with pytest.raises(ValueError):
        corpus.generate_pairs(-1, seed=0)


# --------------------------------------------------------------------------------------------
# Golden values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "en", "fr"),
    [
        (0, "zero", "zéro"),
        (1, "one", "un"),
        (21, "twenty-one", "vingt et un"),
        (71, "seventy-one", "soixante et onze"),
        (80, "eighty", "quatre-vingts"),
        (81, "eighty-one", "quatre-vingt-un"),
        (99, "ninety-nine", "quatre-vingt-dix-neuf"),
        (200, "two hundred", "deux cents"),
        (312, "three hundred twelve", "trois cent douze"),
        (1000, "one thousand", "mille"),
        (1200, "one thousand two hundred", "mille deux cents"),
        (21_000, "twenty-one thousand", "vingt et un mille"),
        (80_000, "eighty thousand", "quatre-vingt mille"),
        (200_000, "two hundred thousand", "deux cent mille"),
        (
            999_999,
            "nine hundred ninety-nine thousand nine hundred ninety-nine",
            "neuf cent quatre-vingt-dix-neuf mille neuf cent quatre-vingt-dix-neuf",
        ),
    ],
)
def test_cardinal_golden(n: int, en: str, fr: str) -> None:
    assert corpus.en_cardinal(n) == en
    assert corpus.fr_cardinal(n) == fr


def test_cardinal_matches_num2words() -> None:
    # The fast composition must agree with num2words itself (American-normalised English).
    rng = random.Random(0)
    numbers = [rng.randint(0, corpus.MAX_NUMBER) for _ in range(150)] + [1001, 80_080, 101_101]
    for n in numbers:
        british = num2words(n, lang="en")
        assert corpus.en_cardinal(n) == british.replace(",", "").replace(" and", ""), n
        assert corpus.fr_cardinal(n) == num2words(n, lang="fr"), n


def test_cardinal_out_of_range() -> None:
    with pytest.raises(ValueError):
        corpus.en_cardinal(corpus.MAX_NUMBER + 1)
    with pytest.raises(ValueError):
        corpus.fr_cardinal(-1)


@pytest.mark.parametrize(
    ("n", "en", "fr_masc", "fr_fem"),
    [
        (1, "first", "premier", "première"),
        (2, "second", "deuxième", "deuxième"),
        (5, "fifth", "cinquième", "cinquième"),
        (9, "ninth", "neuvième", "neuvième"),
        (11, "eleventh", "onzième", "onzième"),
        (21, "twenty-first", "vingt et unième", "vingt et unième"),
        (80, "eightieth", "quatre-vingtième", "quatre-vingtième"),
        (101, "one hundred first", "cent unième", "cent unième"),
        (200, "two hundredth", "deux centième", "deux centième"),
        (1000, "one thousandth", "millième", "millième"),
    ],
)
def test_ordinal_golden(n: int, en: str, fr_masc: str, fr_fem: str) -> None:
    assert corpus.en_ordinal(n) == en
    assert corpus.fr_ordinal(n) == fr_masc
    assert corpus.fr_ordinal(n, feminine=True) == fr_fem


def test_ordinal_matches_num2words_where_it_is_right() -> None:
    # num2words 0.5.14 writes "-tsième" (quatre-vingtsième); otherwise the two must agree.
    for n in list(range(2, 400)) + [1080, 2000, 21_021, 999_999]:
        expected = num2words(n, lang="fr", to="ordinal").replace("tsième", "tième")
        assert corpus.fr_ordinal(n) == expected, n


def test_dates_golden() -> None:
    d = dt.date(2024, 3, 5)
    assert corpus.en_date(d, "full") == "Tuesday, March 5, 2024"
    assert corpus.fr_date(d, "full") == "mardi 5 mars 2024"
    assert corpus.en_date(d, "long") == "March 5, 2024"
    assert corpus.fr_date(d, "long") == "5 mars 2024"
    first = dt.date(2024, 3, 1)
    assert corpus.fr_date(first, "full") == "vendredi 1er mars 2024"
    assert corpus.fr_date(first, "long") == "1er mars 2024"
    assert corpus.fr_date(dt.date(2011, 11, 11), "long") == "11 novembre 2011"


def test_times_golden() -> None:
    assert (corpus.en_time(7, 45), corpus.fr_time(7, 45)) == ("7:45", "7 h 45")
    assert (corpus.en_time(19, 5), corpus.fr_time(19, 5)) == ("19:05", "19 h 05")
    assert corpus.fr_time(9, 0) == "9 h"


@pytest.mark.parametrize(
    ("n", "noun", "adj", "en", "fr"),
    [
        (1, "apple", None, "one apple", "une pomme"),
        (1, "apple", "red", "one red apple", "une pomme rouge"),
        (1, "cat", "small", "one small cat", "un petit chat"),
        (21, "apple", None, "twenty-one apples", "vingt et une pommes"),
        (81, "chair", "white", "eighty-one white chairs", "quatre-vingt-une chaises blanches"),
        (101, "key", "gray", "one hundred one gray keys", "cent une clés grises"),
        (71, "flower", None, "seventy-one flowers", "soixante et onze fleurs"),
        (21, "book", None, "twenty-one books", "vingt et un livres"),
        (2, "horse", "white", "two white horses", "deux chevaux blancs"),
        (3, "box", "small", "three small boxes", "trois petites boîtes"),
        (80, "bird", "blue", "eighty blue birds", "quatre-vingts oiseaux bleus"),
    ],
)
def test_noun_phrase_golden(n: int, noun: str, adj: str | None, en: str, fr: str) -> None:
    assert corpus.noun_phrase(n, corpus.noun(noun), corpus.adjective(adj) if adj else None) == (en, fr)


@pytest.mark.parametrize(
    ("subject", "verb", "n", "noun", "adj", "en", "fr"),
    [
        (
            "I", "have", 312, "apple", "red",
            "I have three hundred twelve red apples", "j'ai trois cent douze pommes rouges",
        ),
        ("she", "have", 1, "car", None, "she has one car", "elle a une voiture"),
        ("they", "see", 4, "dog", "black", "they see four black dogs", "ils voient quatre chiens noirs"),
        ("we", "bought", 7, "chair", None, "we bought seven chairs", "nous avons acheté sept chaises"),
        ("you", "want", 11, "pen", None, "you want eleven pens", "vous voulez onze stylos"),
        ("I", "saw", 8, "bird", None, "I saw eight birds", "j'ai vu huit oiseaux"),
    ],
)  # fmt: skip
def test_clause_golden(
    subject: str, verb: str, n: int, noun: str, adj: str | None, en: str, fr: str
) -> None:
    got = corpus.render_clause(
        corpus.subject(subject), corpus.verb(verb), n, corpus.noun(noun), corpus.adjective(adj) if adj else None
    )
    assert got == (en, fr)


def test_generated_sentences_are_well_formed(sample: list[corpus.Example]) -> None:
    pairs = {ex.source: ex.target for ex in sample}
    for ex in sample:
        if ex.category in ("sentence", "time", "price"):
            assert ex.source[0].isupper() and ex.source.endswith(".")
            assert ex.target[0].isupper() and ex.target.endswith(".")
        if ex.category == "cardinal" and ex.source.startswith("the number "):  # (or a score)
            words = ex.source.removeprefix("the number ")
            assert ex.target.startswith("le nombre ")
            assert words and ex.target.removeprefix("le nombre ")
    # The compound form with a date prefix follows the documented shape.
    dated = [(s, t) for s, t in pairs.items() if s.startswith("On ") and not s.startswith("On the ")]
    assert dated
    for source, target in dated:
        assert re.fullmatch(r"On [A-Z][^,]*(, [^,]+)?, \d{4}, .+\.", source), source
        assert re.fullmatch(r"Le .+ \d{4}, .+\.", target), target
    # The compound form with an ordinal opener: "On the first day, ..." / "For the third time, ...".
    ordinal_led = [(s, t) for s, t in pairs.items() if s.startswith(("On the ", "For the ", "In the "))]
    assert ordinal_led
    for source, target in ordinal_led:
        assert re.fullmatch(r"(On the [a-z -]+ day|For the [a-z -]+ time|In the [a-z -]+ century), (I|[a-z]).+\.",
                            source), source
        assert re.fullmatch(r"(Le [a-zè -]+ jour|Pour la [a-zè -]+ fois|Au [a-zè -]+ siècle), [a-z].+\.",
                            target), target
    scores = [(s, t) for s, t in pairs.items() if s.startswith("The score is ")]
    assert any("zero" in s for s, _ in scores)
    for source, target in scores:
        assert re.fullmatch(r"The score is [a-z -]+ to [a-z -]+\.", source), source
        assert re.fullmatch(r"Le score est de [a-zéè -]+ à [a-zéè -]+\.", target), target


def test_round_numbers_and_small_ordinals_are_common(sample: list[corpus.Example]) -> None:
    # Uniform draws almost never give "douze mille" or "the first day"; the corpus must.
    bare_thousands = [ex for ex in sample if re.search(r"\bmille( euros?)?\.?$", ex.target)]
    assert len(bare_thousands) > 0.002 * len(sample)
    firsts = [ex for ex in sample if re.search(r"\b(premier|première)\b", ex.target)]
    assert len(firsts) > 0.002 * len(sample)
    assert all(" first " in f" {ex.source} " for ex in firsts)


def test_sample_number_rounding_keeps_the_bounds() -> None:
    rng = random.Random(5)
    for _ in range(5_000):
        assert 150 <= corpus.sample_number(rng, low=150, high=2_000) <= 2_000
        assert 1 <= corpus.sample_ordinal(rng, 7) <= 7


def test_feminine_counts_avoid_un_mille() -> None:
    rng = random.Random(0)
    apple = corpus.noun("apple")
    for _ in range(500):
        n = corpus._sample_count(rng, apple)
        assert not re.search(r"\bun mille\b", corpus.fr_cardinal(n))


# English number words that are not also French words ("six" is both).
_ENGLISH_NUMBER_WORDS = {
    "zero", "one", "two", "three", "four", "five", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
    "eighty", "ninety", "hundred", "thousand", "first", "second", "third", "and",
}  # fmt: skip


def test_no_english_number_words_in_french(sample: list[corpus.Example]) -> None:
    for ex in sample:
        words = set(re.findall(r"[a-zà-ÿ]+", ex.target.lower()))
        assert not words & _ENGLISH_NUMBER_WORDS, ex


def test_no_british_number_style_in_english(sample: list[corpus.Example]) -> None:
    for ex in sample:
        if ex.category != "compound":  # compounds join clauses with a real " and "
            assert " and " not in ex.source, ex
        assert not re.search(r"(hundred|thousand),", ex.source), ex
