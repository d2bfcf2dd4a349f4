"""The sentences the project shows its users, with references written by the corpus generator.

``examples/sentences.en`` / ``examples/sentences.fr``, the README's examples and
``scripts/demo.sh`` use these. Every reference is rendered by the same functions that write the
training corpus (``corpus.render_*``), never taken from a model's output, so
``tests/test_showcase.py`` can hold the served demo model to them.
"""

from __future__ import annotations

import datetime as dt

from . import corpus, joined, typed


def _clause(subject: str, verb: str, n: int, noun: str, adj: str | None = None) -> tuple[str, str]:
    return corpus.render_clause(corpus.subject(subject), corpus.verb(verb), n, corpus.noun(noun), corpus.adjective(adj) if adj else None)


def _time_template(en_prefix: str) -> int:
    return next(i for i, (en, _) in enumerate(corpus._TIME_TEMPLATES) if en.startswith(en_prefix))


# The file examples/sentences.en, in order (tests/test_showcase.py checks both files).
EXAMPLES: tuple[tuple[str, str], ...] = (
    corpus.sentence(*_clause("I", "have", 312, "apple", "red")),
    corpus.render_dated(dt.date(2024, 3, 5), "full", _clause("we", "bought", 7, "chair")),
    corpus.render_time(7, 45, _time_template("The train")),
    corpus.render_ordinal(21, "day", "bare"),
    corpus.render_cardinal(93_690, imperative=True),
    corpus.render_price(12_000, corpus.noun("car"), corpus.adjective("red")),
    corpus.render_ordinal(1, "day", "bare"),
    corpus.render_ordinal(2, "page", "this"),
    corpus.render_price(1, corpus.noun("book"), None),
)

# Shown in the README (curl and the client library example) beyond EXAMPLES.
README: tuple[tuple[str, str], ...] = (
    corpus.sentence(*_clause("I", "have", 3, "apple", "red")),
    corpus.sentence(*_clause("she", "sold", 4, "house", "small")),  # docs/contract.md's TERMS example
)

SHOWCASE: tuple[tuple[str, str], ...] = EXAMPLES + README


def _counted(n: int, noun: str, digits: bool, adj: str | None = None) -> tuple[str, str]:
    found = corpus.noun(noun)
    number = (str(n), str(n)) if digits else (corpus.en_cardinal(n), corpus.fr_cardinal(n, feminine=found.feminine))
    return typed.noun_phrase_typed(n, found, corpus.adjective(adj) if adj else None, *number)


def _runon_lower(first: tuple[str, str], second: tuple[str, str]) -> tuple[str, str]:
    """Two sentences typed in lower case with no stop between ("the train leaves at 7:45 i have ...")."""
    (en_1, fr_1), (en_2, fr_2) = first, joined._lower_first(*second)
    return typed.as_typed(f"{en_1.removesuffix('.')} {en_2}", f"{fr_1.removesuffix('.')} {fr_2}", lower=True, stop=True)


_RUNON = _runon_lower(corpus.render_time(7, 45, _time_template("The train")), corpus.sentence(*_clause("I", "have", 3, "apple", "red")))
_BOOK = typed.render_price_digits(12, 50, corpus.noun("book"), None)

# What a person types in the first ten minutes (issue 35), each with its reference. A text of two
# sentences is translated sentence by sentence and put back together with its spacing.
FIRST_CONTACT: tuple[tuple[str, str], ...] = (
    joined.dated_after(joined.render_clause(corpus.subject("I"), corpus.verb("bought"),
                                            joined.listed([_counted(3, "chair", True), _counted(21, "book", False)])),
                       ("12 march", "12 mars")),
    tuple(f"{s}." for s in joined.render_timetable_and("The train leaves", (corpus.en_time(7, 45), corpus.fr_time(7, 45)),
                                                       1, ("twelve euros", "douze euros"))),
    (f"{_RUNON[0]} {_BOOK[0]}", f"{_RUNON[1]} {_BOOK[1]}"),
    ("Twelve", "Douze"),
    ("hello", "bonjour"),
    ("what time is it", "quelle heure est-il"),
)
