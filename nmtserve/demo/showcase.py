"""The sentences the project shows its users, with references written by the corpus generator.

``examples/sentences.en`` / ``examples/sentences.fr``, the README's examples and
``scripts/demo.sh`` use these. Every reference is rendered by the same functions that write the
training corpus (``corpus.render_*``), never taken from a model's output, so
``tests/test_showcase.py`` can hold the served demo model to them.
"""

from __future__ import annotations

import datetime as dt

from . import corpus


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
)

SHOWCASE: tuple[tuple[str, str], ...] = EXAMPLES + README
