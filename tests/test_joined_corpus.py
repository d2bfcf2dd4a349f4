"""The corpus as people join it (nmtserve/demo/joined.py): its French rules on the inputs that
broke the earlier demo, and a deterministic, varied stream."""

from __future__ import annotations

import random
import re

from nmtserve.demo import corpus, joined
from nmtserve.demo.showcase import FIRST_CONTACT


def test_the_first_contact_references_are_the_generators():
    assert dict(FIRST_CONTACT)["I bought 3 chairs and twenty-one books on 12 march"] == (
        "J'ai acheté 3 chaises et vingt et un livres le 12 mars")
    assert dict(FIRST_CONTACT)["The train leaves at 7:45 and costs twelve euros."] == (
        "Le train part à 7 h 45 et coûte douze euros.")
    assert dict(FIRST_CONTACT)["the train leaves at 7:45 i have three red apples. The book costs 12.50 euros."] == (
        "le train part à 7 h 45 j'ai trois pommes rouges. Le livre coûte 12,50 euros.")


def test_lists_and_dates_follow_french_rules():
    assert joined.listed([("3 chairs", "3 chaises"), ("two tables", "deux tables"), ("a", "b")]) == (
        "3 chairs, two tables and a", "3 chaises, deux tables et b")
    rng = random.Random(3)
    for _ in range(300):
        en, fr = joined.date_words(rng)
        day = int(re.search(r"\d+", en).group())
        month = next(i for i, m in enumerate(joined.MONTHS_EN) if m.lower() in en.lower())
        assert fr.startswith(("1er " if day == 1 else f"{day} ") + joined.MONTHS_FR[month])
        assert (re.search(r"\d{4}", en) is None) == (re.search(r"\d{4}", fr) is None)


def test_the_stream_is_deterministic_varied_and_skips_what_it_is_told():
    first = joined.joined_examples(3000, 11)
    assert first == joined.joined_examples(3000, 11)
    sources = [e.source for e in first]
    assert len(set(sources)) == len(sources) and all(1 <= len(s.split()) <= corpus.MAX_TOKENS for s in sources)
    assert {e.category for e in first} == {f"joined-{k}" for k in joined.KIND_WEIGHTS}
    assert all(e.target.strip() for e in first)
    # what the kinds are for: joins with "and", lists, run-on lines, dates, questions
    assert sum(" and " in e.source for e in first) > 1000
    assert sum(e.category == "joined-runon" and not re.search(r"[.,] ", e.source) for e in first) > 200
    assert any(re.search(r" on \d+ [a-z]+", e.source) for e in first)
    assert any(e.target.endswith(" ?") for e in first)
    again = joined.joined_examples(500, 12, exclude=set(sources), kinds=("first",))
    assert not {e.source for e in again} & set(sources) and {e.category for e in again} == {"joined-first"}


def test_every_number_of_the_source_is_in_its_reference():
    from nmtserve.coverage import warning

    for e in joined.joined_examples(2000, 13):
        assert warning(e.source, e.target, "en", "fr") == "", e


def test_no_reference_pair_of_the_other_generators_is_flagged():
    """WARNING's checks (numbers by value, content-word count, loops) on the references themselves:
    a flag here is a false flag (docs/measurements.md#omissions)."""
    from nmtserve.coverage import warning
    from nmtserve.demo import corpus, typed

    for e in (*corpus.generate_examples(5000, 7), *typed.typed_examples(3000, 7), *joined.short_examples(1000, 7)):
        assert warning(e.source, e.target, "en", "fr") == "", e


def test_a_run_on_line_keeps_its_parts_and_the_case_of_what_follows():
    rng = random.Random(5)
    for _ in range(500):
        en, fr = joined._gen_runon(rng)
        # the French goes on in lower case unless the English does not ("I" is no sentence start)
        if en == en.lower():
            assert fr[:1] == fr[:1].lower()
