"""The demo corpus as people join it: clauses with "and", lists, run-on lines, dates, first words.

``corpus.py`` writes one statement per sentence and ``typed.py`` types it otherwise. People join
what they say, and a small model that never saw a join keeps one part and drops the other ("I
bought 3 chairs and twenty-one books on 12 march" -> "J'ai acheté vingt et un livres"). This
module writes the joins with their exact French, from the same tables and French rules:

* **Two statements with "and"**: "The train leaves at 7:45 and costs twelve euros." ->
  "Le train part à 7 h 45 et coûte douze euros."; "I bought 3 chairs and sold two books" ->
  "J'ai acheté 3 chaises et vendu deux livres"; any two statements ("The book costs 12 euros
  and we have three cats.").
* **Lists of counted things**: "I bought 3 chairs, two tables and twenty-one books" ->
  "J'ai acheté 3 chaises, deux tables et vingt et un livres" (counts in words or digits).
* **Dates as people write them**: "on 12 march", "on March 12", "on 12 March 2024" after a
  statement in the past, or leading it ("On 12 March, we sold ...") -> "le 12 mars", "le 1er mars".
* **Run-on lines**: two statements with no full stop between ("the train leaves at 7:45 i have
  three red apples" -> "le train part à 7 h 45 j'ai trois pommes rouges"), or a comma.
* **First words**: the greetings and questions a person types first ("hello" -> "bonjour",
  "what time is it" -> "quelle heure est-il", "how much does the red car cost?" ->
  "Combien coûte la voiture rouge ?").

Case and the final stop follow the input as in ``typed.py``. ``joined_examples`` is deterministic
for its seed; ``train.py`` adds a stream of these to the training data and holds out a "joined"
set (``joined.en`` / ``joined.fr``) and a "first words" set (``first.en`` / ``first.fr``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from . import corpus, typed
from .corpus import Example

# Shares of the joined kinds (they sum to 1); "first" is also drawn alone for its held-out set.
KIND_WEIGHTS: dict[str, float] = {
    "and": 0.30,  # two statements joined with "and", or one subject with two predicates
    "list": 0.20,  # a subject, a verb and two or three counted things
    "dated": 0.15,  # a statement in the past with a date as people write it
    "runon": 0.20,  # two statements with no full stop between them
    "first": 0.15,  # greetings and questions
}
JOINED_KINDS = ("and", "list", "dated", "runon")

MONTHS_EN = tuple(__import__("calendar").month_name[1:])
MONTHS_FR = ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre", "novembre", "décembre")


# --------------------------------------------------------------------------------------------
# Statements: capitalised, without a final stop
# --------------------------------------------------------------------------------------------


def _number_pair(rng: random.Random, n: int, feminine: bool = False) -> tuple[str, str]:
    """``n`` in words (any spelling) or in digits, with its French."""
    if rng.random() < 0.4:
        en, fr = typed._digits_pair(rng, min(n, typed.MAX_DIGITS_NUMBER))
        return en, fr
    return typed.en_cardinal_spelled(n, typed._spelling(rng)), corpus.fr_cardinal(n, feminine=feminine)


def _counted(rng: random.Random, noun: corpus.Noun | None = None) -> tuple[str, str]:
    """("3 red chairs", "3 chaises rouges") with the count in words or digits."""
    noun = noun or rng.choice(corpus.NOUNS)
    n = corpus._sample_count(rng, noun) if rng.random() < 0.5 else rng.randint(1, 30)
    if n > typed.MAX_DIGITS_NUMBER:
        n = rng.randint(1, 999)
    en_n, fr_n = _number_pair(rng, n, feminine=noun.feminine)
    return typed.noun_phrase_typed(n, noun, corpus._sample_adjective(rng), en_n, fr_n)


def subject_verb(subject: corpus.Subject, verb: corpus.Verb) -> tuple[str, str]:
    """("I bought", "je ai acheté"): elided when the clause is put together (``render_clause``)."""
    en_verb = verb.en_third if subject.person == "3s" else verb.en
    return f"{subject.en} {en_verb}", f"{subject.fr} {verb.fr_forms[subject.person]}"


def listed(phrases: list[tuple[str, str]]) -> tuple[str, str]:
    """("3 chairs, two tables and twenty-one books", "3 chaises, deux tables et vingt et un livres")."""
    en = ", ".join(p[0] for p in phrases[:-1]) + f" and {phrases[-1][0]}"
    fr = ", ".join(p[1] for p in phrases[:-1]) + f" et {phrases[-1][1]}"
    return en, fr


def render_clause(subject: corpus.Subject, verb: corpus.Verb, things: tuple[str, str]) -> tuple[str, str]:
    """A lower-case clause of a subject, a verb and what it takes: ("I bought 3 chairs", "j'ai acheté 3 chaises")."""
    en_sv, fr_sv = subject_verb(subject, verb)
    return f"{en_sv} {things[0]}", corpus._elide(f"{fr_sv} {things[1]}")


def dated_after(clause: tuple[str, str], date: tuple[str, str]) -> tuple[str, str]:
    """("I bought 3 chairs on 12 march", "J'ai acheté 3 chaises le 12 mars"), capitalised."""
    return corpus._capitalise(f"{clause[0]} on {date[0]}"), corpus._capitalise(f"{clause[1]} le {date[1]}")


def _subject_verb(rng: random.Random, past: bool | None = None) -> tuple[str, str, corpus.Subject, corpus.Verb]:
    subject = rng.choice(corpus.SUBJECTS)
    verb = rng.choice([v for v in corpus.VERBS if past is None or v.past == past])
    return (*subject_verb(subject, verb), subject, verb)


def _clause(rng: random.Random, past: bool | None = None) -> tuple[str, str]:
    """("I bought 3 chairs", "j'ai acheté 3 chaises"): lower case, the count in words or digits."""
    en_sv, fr_sv, _, _ = _subject_verb(rng, past)
    en_np, fr_np = _counted(rng)
    return f"{en_sv} {en_np}", corpus._elide(f"{fr_sv} {fr_np}")


def _listed(rng: random.Random) -> tuple[str, str]:
    """("3 chairs, two tables and twenty-one books", "3 chaises, deux tables et vingt et un livres")."""
    nouns = rng.sample(corpus.NOUNS, 3 if rng.random() < 0.35 else 2)
    return listed([_counted(rng, noun) for noun in nouns])


def _list_clause(rng: random.Random, past: bool | None = None) -> tuple[str, str]:
    en_sv, fr_sv, _, _ = _subject_verb(rng, past)
    en_l, fr_l = _listed(rng)
    return f"{en_sv} {en_l}", corpus._elide(f"{fr_sv} {fr_l}")


def _time_pair(rng: random.Random) -> tuple[str, str]:
    hour = rng.randint(1, 23)
    minute = rng.randrange(0, 60, 5) if rng.random() < 0.7 else rng.randint(0, 59)
    return corpus.en_time(hour, minute), corpus.fr_time(hour, minute)


def _price_words(rng: random.Random) -> tuple[str, str]:
    """("twelve euros", "douze euros"), ("12.50 euros", "12,50 euros")."""
    if rng.random() < 0.5:
        n = corpus.sample_number(rng, low=1)
        en_n, fr_n = typed.en_cardinal_spelled(n, typed._spelling(rng)), corpus.fr_cardinal(n)
    elif rng.random() < 0.5:
        n = rng.randint(2, 999)
        decimals = rng.randint(0, 99)
        en_n, fr_n = typed.en_digits(n, decimals), typed.fr_digits(n, decimals)
    else:
        n = typed._digits_number(rng)
        en_n, fr_n = typed._digits_pair(rng, n)
    currency = "euro" if n == 1 and "." not in en_n else "euros"
    return f"{en_n} {currency}", f"{fr_n} {currency}"


def _price_statement(rng: random.Random) -> tuple[str, str]:
    noun, adj = rng.choice(corpus.NOUNS), corpus._sample_adjective(rng)
    en, fr = corpus.render_price(1, noun, adj)
    en_p, fr_p = _price_words(rng)
    return en.replace(" one euro.", f" {en_p}"), fr.replace(" un euro.", f" {fr_p}")


def _time_statement(rng: random.Random) -> tuple[str, str]:
    en_t, fr_t = _time_pair(rng)
    en, fr = rng.choice(corpus._TIME_TEMPLATES)
    return en.format(t=en_t).removesuffix("."), fr.format(t=fr_t).removesuffix(".")


def _statement(rng: random.Random) -> tuple[str, str]:
    """One capitalised statement without its stop, drawn from every kind the corpus writes."""
    draw = rng.random()
    if draw < 0.35:
        en, fr = _clause(rng)
    elif draw < 0.5:
        en, fr = _list_clause(rng)
    elif draw < 0.7:
        return _time_statement(rng)
    elif draw < 0.85:
        return _price_statement(rng)
    else:
        return _dated(rng)
    return corpus._capitalise(en), corpus._capitalise(fr)


# (English, French) predicates a timetable's subject takes after "and", with "{t}" for a time or
# "{p}" for a price; keyed by the English opening of a corpus._TIME_TEMPLATES entry.
_SECOND_PREDICATES: dict[str, tuple[tuple[str, str], ...]] = {
    "The train leaves": (("arrives at {t}", "arrive à {t}"), ("costs {p}", "coûte {p}")),
    "The bus leaves": (("arrives at {t}", "arrive à {t}"), ("costs {p}", "coûte {p}")),
    "The film starts": (("ends at {t}", "finit à {t}"), ("costs {p}", "coûte {p}")),
    "The meeting starts": (("ends at {t}", "finit à {t}"),),
    "The shop opens": (("closes at {t}", "ferme à {t}"),),
    "The museum closes": (("opens at {t}", "ouvre à {t}"),),
}


def render_timetable_and(opening: str, time: tuple[str, str], predicate: int, value: tuple[str, str]) -> tuple[str, str]:
    """("The train leaves at 7:45 and costs twelve euros", "Le train part à 7 h 45 et coûte douze euros")
    for ``_SECOND_PREDICATES[opening][predicate]`` with ``value`` a time or a price pair."""
    en_tpl, fr_tpl = next(t for t in corpus._TIME_TEMPLATES if t[0].startswith(opening))
    en_2, fr_2 = _SECOND_PREDICATES[opening][predicate]
    en_2, fr_2 = en_2.format(t=value[0], p=value[0]), fr_2.format(t=value[1], p=value[1])
    return f"{en_tpl.format(t=time[0])[:-1]} and {en_2}", f"{fr_tpl.format(t=time[1])[:-1]} et {fr_2}"


def _timetable_and(rng: random.Random) -> tuple[str, str]:
    opening = rng.choice(list(_SECOND_PREDICATES))
    time = _time_pair(rng)
    predicate = rng.randrange(len(_SECOND_PREDICATES[opening]))
    value = _price_words(rng) if "{p}" in _SECOND_PREDICATES[opening][predicate][0] else _time_pair(rng)
    return render_timetable_and(opening, time, predicate, value)


def _shared_subject_and(rng: random.Random) -> tuple[str, str]:
    """("I bought 3 chairs and sold two books", "J'ai acheté 3 chaises et vendu deux livres")."""
    subject = rng.choice(corpus.SUBJECTS)
    first, second = rng.sample([v for v in corpus.VERBS if v.past], 2)
    en_1, fr_1 = _counted(rng)
    en_2, fr_2 = _counted(rng)
    participle = second.fr_forms[subject.person].split(" ", 1)[1]
    en = f"{subject.en} {first.en} {en_1} and {second.en} {en_2}"
    fr = corpus._elide(f"{subject.fr} {first.fr_forms[subject.person]} {fr_1} et {participle} {fr_2}")
    return corpus._capitalise(en), corpus._capitalise(fr)


def _lower_first(en: str, fr: str) -> tuple[str, str]:
    """A statement continuing a sentence: "The book ..." -> "the book ...", but "I" stays "I"."""
    if not en.startswith("I "):
        en = en[:1].lower() + en[1:]
    return en, fr[:1].lower() + fr[1:]


def _gen_and(rng: random.Random) -> tuple[str, str]:
    draw = rng.random()
    if draw < 0.3:
        en, fr = _timetable_and(rng)
    elif draw < 0.5:
        en, fr = _shared_subject_and(rng)
    else:
        en_1, fr_1 = _statement(rng)
        en_2, fr_2 = _lower_first(*_statement(rng))
        en, fr = f"{en_1} and {en_2}", f"{fr_1} et {fr_2}"
    return typed._typed_case(rng, f"{en}.", f"{fr}.", p_lower=0.4, p_no_stop=0.4)


def _gen_list(rng: random.Random) -> tuple[str, str]:
    en, fr = corpus.sentence(*_list_clause(rng))
    return typed._typed_case(rng, en, fr, p_lower=0.4, p_no_stop=0.4)


def date_words(rng: random.Random) -> tuple[str, str]:
    """("12 march", "12 mars"), ("March 12, 2024", "12 mars 2024"), ("1 May", "1er mai")."""
    date = corpus.sample_date(rng)
    month_en, month_fr = MONTHS_EN[date.month - 1], MONTHS_FR[date.month - 1]
    if rng.random() < 0.3:
        month_en = month_en.lower()
    day_fr = "1er" if date.day == 1 else str(date.day)
    with_year = rng.random() < 0.35
    if rng.random() < 0.5:
        en = f"{date.day} {month_en} {date.year}" if with_year else f"{date.day} {month_en}"
    else:
        en = f"{month_en} {date.day}, {date.year}" if with_year else f"{month_en} {date.day}"
    return en, f"{day_fr} {month_fr} {date.year}" if with_year else f"{day_fr} {month_fr}"


def _dated(rng: random.Random) -> tuple[str, str]:
    """("I bought 3 chairs on 12 march", "J'ai acheté 3 chaises le 12 mars"), capitalised."""
    en_c, fr_c = _clause(rng, past=True) if rng.random() < 0.6 else _list_clause(rng, past=True)
    en_d, fr_d = date_words(rng)
    if rng.random() < 0.7:
        return dated_after((en_c, fr_c), (en_d, fr_d))
    return f"On {en_d}, {en_c}", f"Le {fr_d}, {fr_c}"


def _gen_dated(rng: random.Random) -> tuple[str, str]:
    en, fr = _dated(rng)
    return typed._typed_case(rng, f"{en}.", f"{fr}.", p_lower=0.4, p_no_stop=0.4)


def _gen_runon(rng: random.Random) -> tuple[str, str]:
    """Two statements with no stop between: "the train leaves at 7:45 i have three red apples"."""
    en_1, fr_1 = _statement(rng)
    en_2, fr_2 = _statement(rng)
    lower = rng.random() < 0.6
    if lower or rng.random() < 0.5:
        en_2, fr_2 = _lower_first(en_2, fr_2)
    elif en_2.startswith("I "):  # "I" does not start a sentence: the French goes on in lower case
        fr_2 = fr_2[:1].lower() + fr_2[1:]
    separator = ", " if rng.random() < 0.3 else " "
    en, fr = f"{en_1}{separator}{en_2}", f"{fr_1}{separator}{fr_2}"
    return typed._typed_case(rng, f"{en}.", f"{fr}.", p_lower=0.6 if lower else 0.0, p_no_stop=0.6)


# --------------------------------------------------------------------------------------------
# First words: greetings and questions
# --------------------------------------------------------------------------------------------

GREETINGS: tuple[tuple[str, str], ...] = (
    ("hello", "bonjour"), ("hi", "salut"), ("good morning", "bonjour"), ("good afternoon", "bonjour"),
    ("good evening", "bonsoir"), ("good night", "bonne nuit"), ("goodbye", "au revoir"), ("bye", "au revoir"),
    ("thank you", "merci"), ("thanks", "merci"), ("thank you very much", "merci beaucoup"),
    ("please", "s'il vous plaît"), ("yes", "oui"), ("no", "non"), ("sorry", "désolé"),
    ("excuse me", "excusez-moi"), ("welcome", "bienvenue"), ("see you tomorrow", "à demain"),
    ("good luck", "bonne chance"), ("happy birthday", "joyeux anniversaire"), ("have a nice day", "bonne journée"),
    ("nice to meet you", "enchanté"), ("how are you", "comment allez-vous"), ("what time is it", "quelle heure est-il"),
    ("what is your name", "comment vous appelez-vous"), ("where are you", "où êtes-vous"),
)
# Greetings that take an addressee ("hello everyone" -> "bonjour à tous", "hello Anna").
_ADDRESSED = {"hello", "hi", "good morning", "good afternoon", "good evening", "good night", "goodbye", "bye",
              "thank you", "thanks", "welcome", "see you tomorrow", "good luck", "happy birthday", "have a nice day"}
NAMES = ("Anna", "Paul", "Marie", "Tom", "Sophie", "Lucas", "Emma", "Hugo", "Léa", "Louis", "Chloé", "Jules")

# Questions about the corpus's things: (English, French) with "{np}" for "the red car" /
# "la voiture rouge" or a plural "the three red apples" / "les trois pommes rouges".
_TIME_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("what time does the train leave", "à quelle heure part le train"),
    ("what time does the bus leave", "à quelle heure part le bus"),
    ("what time does the meeting start", "à quelle heure commence la réunion"),
    ("what time does the film start", "à quelle heure commence le film"),
    ("what time does the shop open", "à quelle heure ouvre le magasin"),
    ("what time does the shop close", "à quelle heure ferme le magasin"),
    ("what time does the museum close", "à quelle heure ferme le musée"),
    ("when does the train leave", "quand part le train"),
    ("when does the bus leave", "quand part le bus"),
)
# "how many apples do you have" -> "combien de pommes avez-vous": present verbs, inverted.
_INVERTED = {
    "have": {"2p": "avez-vous", "1p": "avons-nous", "3p": "ont-ils", "3s he": "a-t-il", "3s she": "a-t-elle"},
    "see": {"2p": "voyez-vous", "1p": "voyons-nous", "3p": "voient-ils", "3s he": "voit-il", "3s she": "voit-elle"},
    "want": {"2p": "voulez-vous", "1p": "voulons-nous", "3p": "veulent-ils", "3s he": "veut-il", "3s she": "veut-elle"},
}


def _the_thing(rng: random.Random) -> tuple[str, str, bool]:
    """("the red car", "la voiture rouge", plural=False) or ("the 3 books", "les 3 livres", True)."""
    noun, adj = rng.choice(corpus.NOUNS), corpus._sample_adjective(rng)
    if rng.random() < 0.65:
        en_np, fr_np = corpus.noun_phrase(1, noun, adj)
        en_np, fr_np = en_np.removeprefix("one "), fr_np.split(" ", 1)[1]
        return f"the {en_np}", corpus._elide(f"{'la' if noun.feminine else 'le'} {fr_np}"), False
    n = rng.randint(2, 20) if rng.random() < 0.7 else corpus.sample_number(rng, low=2, high=999)
    en_n, fr_n = _number_pair(rng, n, feminine=noun.feminine)
    en_np, fr_np = typed.noun_phrase_typed(n, noun, adj, en_n, fr_n)
    return f"the {en_np}", f"les {fr_np}", True


def _question(rng: random.Random) -> tuple[str, str]:
    draw = rng.random()
    if draw < 0.2:
        return rng.choice(_TIME_QUESTIONS)
    if draw < 0.45:
        en_np, fr_np, plural = _the_thing(rng)
        return (f"how much do {en_np} cost", f"combien coûtent {fr_np}") if plural else (f"how much does {en_np} cost", f"combien coûte {fr_np}")
    if draw < 0.65:
        en_np, fr_np, plural = _the_thing(rng)
        return (f"where are {en_np}", f"où sont {fr_np}") if plural else (f"where is {en_np}", f"où est {fr_np}")
    subject = rng.choice([s for s in corpus.SUBJECTS if s.en != "I"])
    verb = rng.choice(list(_INVERTED))
    key = subject.person if subject.person != "3s" else f"3s {subject.en}"
    does = "does" if subject.person == "3s" else "do"
    noun = rng.choice(corpus.NOUNS)
    if draw < 0.85:
        return f"how many {noun.en_plural} {does} {subject.en} {verb}", f"combien de {noun.fr_plural} {_INVERTED[verb][key]}"
    en_np, fr_np = _counted(rng, noun)
    return f"{does} {subject.en} {verb} {en_np}", f"{_INVERTED[verb][key]} {fr_np}"


def _end_and_case(rng: random.Random, en: str, fr: str, ends: tuple[str, ...]) -> tuple[str, str]:
    end = rng.choice(ends)
    # French typography: a space before "?" and "!".
    en, fr = f"{en}{end}", f"{fr}{ {'': '', '.': '.', '!': ' !', '?': ' ?'}[end]}"
    if rng.random() < 0.5:
        en, fr = corpus._capitalise(en), corpus._capitalise(fr)
    return en, fr


def _gen_first(rng: random.Random) -> tuple[str, str]:
    """A greeting or a question, typed any way: "hello", "Hello everyone!", "how much does the book cost?",
    "hello, how much does the red car cost?"."""
    if rng.random() < 0.2:
        # a greeting, then what the person came to say
        en_g, fr_g = rng.choice(GREETINGS[:12])
        if rng.random() < 0.5:
            en_q, fr_q = _question(rng)
            return _end_and_case(rng, f"{en_g}, {en_q}", f"{fr_g}, {fr_q}", ("", "?", "?"))
        en_s, fr_s = _lower_first(*_statement(rng))
        return _end_and_case(rng, f"{en_g}, {en_s}", f"{fr_g}, {fr_s}", ("", ".", "!"))
    if rng.random() < 0.45:
        en, fr = rng.choice(GREETINGS)
        if en in _ADDRESSED and rng.random() < 0.5:
            if rng.random() < 0.4:
                en, fr = f"{en} everyone", f"{fr} à tous"
            else:
                name = rng.choice(NAMES)
                en, fr = f"{en} {name}", f"{fr} {name}"
        ends = ("", "", "!", ".") if not en.startswith(("what", "how", "where")) else ("", "?")
    else:
        en, fr = _question(rng)
        ends = ("", "?", "?")
    return _end_and_case(rng, en, fr, ends)


# The words a small model must know to answer first words at all: every greeting and question of
# GREETINGS and the numbers 0..100 alone, as typed in lower case. They are never held out, and the
# short stream repeats them (the corpus's unique sources would show each once in 700,000 pairs).
LEXICON: tuple[tuple[str, str], ...] = (*GREETINGS, *((corpus.en_cardinal(n), corpus.fr_cardinal(n)) for n in range(101)))


def _gen_short(rng: random.Random) -> tuple[str, str]:
    """A lexicon entry typed any way ("Twelve", "hello!", "Thank you.", "twenty one") or first words."""
    draw = rng.random()
    if draw < 0.3:
        en, fr = rng.choice(GREETINGS)
        return _end_and_case(rng, en, fr, ("", "", "!", ".") if not en.startswith(("what", "how", "where")) else ("", "?"))
    if draw < 0.55:
        n = rng.randint(0, 100)
        en, fr = typed.en_cardinal_spelled(n, typed._spelling(rng)), corpus.fr_cardinal(n)
        return _end_and_case(rng, en, fr, ("", "", "", "."))
    return _gen_first(rng)


def short_examples(n: int, seed: int, exclude: set[str] = frozenset()) -> list[Example]:
    """``n`` short pairs (``_gen_short``), repeats allowed, none of ``exclude``; deterministic for ``seed``."""
    rng = random.Random(seed)
    examples: list[Example] = []
    while len(examples) < n:
        source, target = _gen_short(rng)
        if source not in exclude:
            examples.append(Example("short", source, target))
    return examples


_GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "and": _gen_and,
    "list": _gen_list,
    "dated": _gen_dated,
    "runon": _gen_runon,
    "first": _gen_first,
}


def joined_examples(n: int, seed: int, exclude: set[str] = frozenset(), kinds: tuple[str, ...] | None = None) -> list[Example]:
    """``n`` pairs with unique English sources not in ``exclude``, deterministic for ``seed``.

    ``kinds`` restricts the draw to some of ``KIND_WEIGHTS`` (in their relative shares); the
    category of each example is ``joined-<kind>``. Sources have 1..corpus.MAX_TOKENS words.
    """
    weights = {k: KIND_WEIGHTS[k] for k in (kinds or KIND_WEIGHTS)}
    return typed.unique_examples(n, random.Random(seed), weights, _GENERATORS, exclude, "joined")
