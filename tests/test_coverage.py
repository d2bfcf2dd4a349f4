"""The served WARNING's check (nmtserve.coverage): what it flags and what it lets pass.

Its catch and false-flag rates on the demo's held-out joined set are measured by
bench/omission.py (the issue's note has them); these cases pin the rules."""

from __future__ import annotations

import pytest

from nmtserve.coverage import (
    mentions,
    missing_numbers,
    number_values,
    number_words,
    usual_length_ratio,
    warning,
)

RATIO = 1.1  # about en -> fr


@pytest.mark.parametrize(("source", "translation"), [
    # the issue's own drops
    ("I bought 3 chairs and twenty-one books on 12 march", "J'ai acheté vingt et un livres"),
    ("The train leaves at 7:45 and costs twelve euros.", "Le train part à 7 h 45 euros."),
    ("I have three red apples and " * 100, "pommes rouges " * 8),
    # a number in words left out
    ("We have seven cats and two dogs.", "Nous avons sept chats."),
    # no number lost, but half the sentence
    ("The red car is in the garden behind the big house.", "La voiture rouge."),
])
def test_a_translation_that_leaves_content_out_is_flagged(source, translation):
    assert warning(source, translation, "en", "fr", RATIO).startswith("may be incomplete: ")


@pytest.mark.parametrize(("source", "translation"), [
    ("I bought 3 chairs and twenty-one books on 12 march", "J'ai acheté 3 chaises et vingt et un livres le 12 mars"),
    ("The train leaves at 7:45 and costs twelve euros.", "Le train part à 7 h 45 et coûte douze euros."),
    ("The train leaves at 7:00.", "Le train part à 7 h."),  # ":00" is no number of its own
    ("The red car costs 12,000 euros.", "La voiture rouge coûte 12 000 euros."),
    ("The book costs 12.50 euros.", "Le livre coûte 12,50 euros."),
    ("I have one hundred and twenty-three apples", "j'ai cent vingt-trois pommes"),
    ("On Tuesday, March 5, 2024, we bought seven chairs.", "Le mardi 5 mars 2024, nous avons acheté sept chaises."),
    ("The score is 3 to 0.", "Le score est de 3 à 0."),
    ("hello", "bonjour"),
    ("yes", "oui"),
    ("", ""),
])
def test_a_complete_translation_passes(source, translation):
    assert warning(source, translation, "en", "fr", RATIO) == ""


def test_numbers_compare_by_value_in_digits_or_words():
    # "3" written "trois" is the same number; a number word that changes the value is named.
    assert warning("I have 3 apples", "j'ai trois pommes", "en", "fr", RATIO) == ""
    assert missing_numbers("We have three hundred seventy-five yellow cats.", "Nous avons cent soixante-quinze chats jaunes.",
                           "en", "fr") == "the source's number 'three hundred seventy-five' is not in the translation"
    assert missing_numbers("Twenty-three thousand eight hundred ninety-four and six",
                           "Vingt-trois mille huit cent quatre-vingt-quatorze", "en", "fr") == (
        "the source's number 'six' is not in the translation")
    assert missing_numbers("fifty-one bottles at 7:00, 12,000 euros", "cinquante et une bouteilles à 7 h, 12 000 euros",
                           "en", "fr") == ""
    assert number_values("quatre-vingt mille deux cents", "fr") == [(80200, "quatre-vingt mille deux cents")]


def test_without_a_length_ratio_or_languages_only_what_can_be_checked_is():
    assert warning("The red car is in the garden behind the big house.", "La voiture rouge.") == ""
    assert "digits" in warning("I bought 3 chairs", "J'ai acheté des chaises")
    # a language num2words does not know: the digits alone
    assert number_words("xx") is None and mentions("twelve 12", "xx") == 1


def test_mentions_count_runs_of_number_words_and_digits():
    assert mentions("one hundred and twenty-three apples and 4 pears", "en") == 2
    assert mentions("vingt et un livres et 7 h 45", "fr") == 3
    assert mentions("apples and pears", "en") == 0  # "and" alone is no number


def test_the_usual_ratio_is_the_median_over_sentences_long_enough():
    sources = ["x" * 40, "y" * 40, "z" * 40, "short"]
    assert usual_length_ratio(sources, ["a" * 40, "b" * 44, "c" * 60, "much longer than the source"]) == 1.1
    assert usual_length_ratio(["short"], ["court"]) == 0.0


def test_a_score_far_under_the_models_usual_is_flagged_as_maybe_wrong():
    assert warning("hello", "Trente et un", "en", "fr", RATIO, score=-2.05, score_floor=-0.4) == (
        "may be incomplete: it has 0 content words where the source has 1; "
        "may be wrong: the model is unsure of it (score -2.05, under this model's floor of -0.40); "
        "the translation has the number 'trente et un', which the source has not")
    assert warning("Hello, my friend", "Bonjour, mon ami", "en", "fr", RATIO, score=-2.05, score_floor=-0.4) == (
        "may be wrong: the model is unsure of it (score -2.05, under this model's floor of -0.40)")
    assert warning("hello", "bonjour", "en", "fr", RATIO, score=-0.1, score_floor=-0.4) == ""
    assert warning("hello", "bonjour", "en", "fr", RATIO, score=-5.0) == ""  # no floor measured
    both = warning("We have 7 cats.", "Nous avons.", "en", "fr", 0.0, score=-1.0, score_floor=-0.4)
    assert both.startswith("may be incomplete: the source's number '7'") and "; may be wrong: " in both


def test_the_floor_is_three_times_the_first_percentile_of_held_out_scores():
    from nmtserve.coverage import usual_score_floor

    scores = [-0.1] * 95 + [-0.2] * 4 + [-0.3]
    assert usual_score_floor(scores) == -0.6  # 1st percentile: -0.2
    assert usual_score_floor([-0.1] * 10) == 0.0  # too few to say


# -- omissions by alignment and degenerate output (issue 48) -----------------------------------

def test_content_words_leave_out_function_words_numbers_tags_and_punctuation():
    from nmtserve.coverage import content_words

    #            0  1   2            3        4       5  6
    source = "I see fifty-three elegant tables. <b> 7:45"
    assert content_words(source, "en") == [1, 3, 4]
    assert content_words("I'm not at home, don't go {1}", "en") == [1, 3, 4, 5]  # negations stay
    assert content_words("Ich sehe drei Tische.", "xx") == []  # no list for the language: no check


def test_a_content_word_nothing_attended_to_is_named_and_flagged():
    from nmtserve.coverage import omitted_words

    source, translation = "I see fifty-three elegant tables.", "Je vois cinquante-trois tables."
    omitted = omitted_words(source, {0, 1, 2, 4}, "en", translation, "fr")
    assert omitted == [3]
    assert warning(source, translation, "en", "fr", RATIO, omitted=omitted) == (
        "may be incomplete: no word of the translation stands for 'elegant' "
        "(it has 2 content words where the source has 3)")
    # Without the decoder's alignments the count alone says it, naming no word.
    assert warning(source, translation, "en", "fr", RATIO) == (
        "may be incomplete: it has 2 content words where the source has 3")
    # Attended to: nothing missing.
    assert omitted_words(source, {1, 3, 4}, "en", translation, "fr") == []


def test_an_attention_maximum_one_word_off_is_no_omission_when_every_content_word_has_a_counterpart():
    from nmtserve.coverage import omitted_words

    # "née" attends to "on", so nothing attends to "born"; but the translation has as many
    # content words as the source (née, septembre): no word is missing.
    source, translation = "She was born on September 5, 1990.", "Elle est née le 5 septembre 1990."
    assert omitted_words(source, {0, 3, 4}, "en") == [2]
    assert omitted_words(source, {0, 3, 4}, "en", translation, "fr") == []


@pytest.mark.parametrize(("translation", "says"), [
    ("Le train part à 7 h 45. six. six. six. six.", "may be wrong: the words 'six' come 4 times in a row"),
    ("Le train part à 7 h 45 le train part à 7 h 45", "may be wrong: the words 'le train part à 7 h 45' come 2 times"),
    ("The train leaves at 7:45.", "may be wrong: it copies the source"),
])
def test_degenerate_output_is_flagged(translation, says):
    assert warning("The train leaves at 7:45.", translation, "en", "fr", RATIO).startswith(says)


@pytest.mark.parametrize(("source", "translation"), [
    ("It is very very very cold.", "Il fait très très très froid."),  # the source repeats as often
    ("I have three red apples.", "J'ai trois pommes rouges."),
    ("Paris 2024", "Paris 2024"),  # too few words to call a copy
    ("The score is 0 0 0.", "Le score est 0 0 0."),
])
def test_repetition_the_source_has_and_short_copies_pass(source, translation):
    from nmtserve.coverage import degenerate

    assert degenerate(source, translation) == ""


def test_ordinals_are_compared_by_value_and_never_stand_for_a_cardinal():
    from nmtserve.coverage import Ordinal

    assert number_values("the three hundred eighty-sixth time", "en") == [(Ordinal(386), "three hundred eighty-sixth")]
    assert number_values("le cinquante et unième jour", "fr") == [(Ordinal(51), "cinquante et unième")]
    assert Ordinal(51) != 51 and int(Ordinal(51)) == 51
    assert number_values("at first, a second later", "en") == []  # "first", "second" alone are words
    assert missing_numbers("the three hundred eighty-sixth time", "la cent quatre-vingt-sixième fois", "en", "fr") == (
        "the source's number 'three hundred eighty-sixth' is not in the translation")
    assert missing_numbers("the fifteenth step", "la quinzième étape", "en", "fr") == ""
    # A cardinal the model turned into an ordinal is lost: "428 bottles" is not "the 428th century".
    assert missing_numbers("She sees four hundred twenty-eight strange bottles.",
                           "Elle voit quatre cent vingt-huitième siècle.", "en", "fr") == (
        "the source's number 'four hundred twenty-eight' is not in the translation")


def test_zero_is_a_number():
    assert missing_numbers("The score is zero to seventeen.", "Le score est de à dix-sept.", "en", "fr") == (
        "the source's number 'zero' is not in the translation")
    assert missing_numbers("The score is zero to seventeen.", "Le score est de 0 à 17.", "en", "fr") == ""
    assert missing_numbers("at 7:00", "à 7 h", "en", "fr") == ""


def test_a_number_the_source_does_not_have_is_flagged_as_maybe_wrong():
    from nmtserve.coverage import extra_numbers

    assert extra_numbers("They see two blue wooden keys", "Ils voient deux clés bleues et douze clés", "en", "fr") == (
        "the translation has the number 'douze', which the source has not")
    assert extra_numbers("I see a cat", "Je vois un chat", "en", "fr") == ""  # "un" is an article
    assert "may be wrong: the translation has the number 'douze'" in warning(
        "They see two blue wooden keys", "Ils voient deux clés bleues et douze clés", "en", "fr", RATIO)


def test_fewer_content_words_than_the_source_is_flagged_without_any_alignment():
    from nmtserve.coverage import content_units, fewer_content_words

    assert fewer_content_words("I see fifty-three elegant tables.", "Je vois cinquante-trois tables.", "en", "fr") == (
        "it has 2 content words where the source has 3")
    assert fewer_content_words("Good morning, my friend.", "Bonjour, mon ami.", "en", "fr") == ""  # a phrase
    assert fewer_content_words("I see fifty-three tables.", "Je vois cinquante-trois tables.", "en", "fr") == ""
    assert fewer_content_words("I see tables.", "Ich sehe Tische.", "en", "xx") == ""  # no list: not checked
    # "May" the month is a content word; "may" the verb is not.
    assert warning("May 23, 1954", "23 1954", "en", "fr", RATIO) == (
        "may be incomplete: it has 0 content words where the source has 1")
    assert [u for u in content_units("She was born in May.", "en")] == [(2,), (4,)]
    assert [u for u in content_units("May I come in?", "en")] == [(2,)]
    assert [u for u in content_units("Le 3 août 1978, j'ai vu sept petits.", "fr")] == [(2,), (5,), (7,)]


def test_content_units_kept_between_calls_are_the_same_and_not_shared():
    """content_units keeps each text's units and each word's kind (WARNING reads a text more than
    once): a word's kind is kept, its context is not ("may" the month and the verb in turn), and
    a caller changing the list it got changes nothing for the next caller."""
    from nmtserve.coverage import content_units

    for _ in range(2):
        assert content_units("In May I may come.", "en") == [(1,), (4,)]
        assert content_units("May I come in May?", "en") == [(2,), (4,)]
    got = content_units("I see fifty-three elegant tables.", "en")
    got.append((9,))
    assert content_units("I see fifty-three elegant tables.", "en") == [(1,), (3,), (4,)]
    assert content_units("I see fifty-three elegant tables.", "fr") != content_units("I see fifty-three elegant tables.", "en")


def _longest_loop_by_definition(words):
    """longest_loop as its docstring defines it: every block compared with its repeats."""
    from nmtserve.coverage import LOOP_BLOCK, LOOP_LONG_BLOCK, LOOP_REPEATS

    best, size = (0, 0), len(words)
    for n in range(1, min(LOOP_BLOCK, size // 2) + 1):
        for start in range(size - 2 * n + 1):
            k = 1
            while start + (k + 1) * n <= size and words[start + k * n: start + (k + 1) * n] == words[start: start + n]:
                k += 1
            if (k >= LOOP_REPEATS or (k >= 2 and n >= LOOP_LONG_BLOCK)) and k * n > best[0] * best[1]:
                best = (n, k)
    return best


def test_the_loop_finder_equals_comparing_every_block_with_its_repeats():
    import random

    from nmtserve.coverage import longest_loop

    rng = random.Random(7)
    looped = 0
    for _ in range(4000):
        vocabulary = rng.choice([2, 3, 5, 20])
        words = [str(rng.randrange(vocabulary)) for _ in range(rng.randrange(0, 30))]
        if rng.random() < 0.4:  # a block written 2-4 times somewhere
            block = [str(rng.randrange(vocabulary)) for _ in range(rng.randrange(1, 9))]
            at = rng.randrange(len(words) + 1)
            words = words[:at] + block * rng.randrange(2, 5) + words[at:]
        expected = _longest_loop_by_definition(words)
        assert longest_loop(words) == expected, words
        looped += expected != (0, 0)
    assert looped > 500  # the cases hold loops, not only their absence
    assert longest_loop("six six six six".split()) == (1, 4)
    assert longest_loop("a b a b c".split()) == (0, 0)  # a short block twice is no loop
