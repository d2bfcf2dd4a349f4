"""The gateway's parts that need no server: language detection among several served sources,
the sentence/document split, API keys and their rate limit, the files store, language pairs.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from nmtserve.demo.showcase import SHOWCASE
from nmtserve.gateway.access import Access
from nmtserve.gateway.config import ApiKeysFileError, read_api_keys
from nmtserve.gateway.detect import Detector
from nmtserve.gateway.errors import Forbidden, RateLimited
from nmtserve.gateway.files import FileStore, safe_name
from nmtserve.gateway.languages import Catalog, parse_pairs
from nmtserve.gateway.service import is_one_sentence

# Short everyday phrases (the hard case for a detector), two to five words each.
PHRASES = {
    "en": ["Good morning", "Thank you very much", "Where is the station?", "See you tomorrow"],
    "fr": ["Merci beaucoup", "Où est la gare ?", "J'ai faim", "Il fait beau aujourd'hui"],
    "de": ["Vielen Dank", "Wo ist der Bahnhof?", "Ich habe Hunger", "Bis morgen"],
    "es": ["Muchas gracias", "¿Dónde está la estación?", "Tengo hambre", "Hasta mañana"],
}


def detect(detector: Detector, text: str):
    return asyncio.run(detector.detect(text))


def test_detection_is_limited_to_the_served_sources_and_right_on_short_texts():
    detector = Detector(["de", "en", "es", "fr"])
    for language, phrases in PHRASES.items():
        for phrase in phrases:
            found = detect(detector, phrase)
            assert found[0].language == language, (phrase, found)
            assert {d.language for d in found} <= {"de", "en", "es", "fr"}
            assert 0 < found[0].confidence <= 100
    for english, french in SHOWCASE:
        assert detect(detector, english)[0].language == "en"
        assert detect(detector, french)[0].language == "fr"
    assert detect(Detector(["en", "fr"]), "Wo ist der Bahnhof?")[0].language in ("en", "fr")  # never "de"


def test_one_source_needs_no_detector_and_unknown_text_gets_zero_confidence():
    (only,) = detect(Detector(["en"]), "Bonjour")
    assert (only.language, only.confidence) == ("en", 100.0)
    (unknown,) = detect(Detector(["en", "fr"]), "1234 5678")
    assert (unknown.language, unknown.confidence) == ("en", 0.0)


@pytest.mark.parametrize(("text", "one"), [
    ("The train leaves at 7:45.", True),
    ("  the first day  ", True),
    ("It costs 3.50 euros.", True),
    ("I have three red apples. The train leaves at 7:45.", False),
    ("Hello! How are you?", False),
    ("first line\nsecond line", False),
    ('He said "stop." Then he left.', False),
])
def test_one_sentence_or_a_document(text, one):
    assert is_one_sentence(text) is one


def test_api_keys_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# comment\nalpha 120\nbeta 0 5000  # trailing comment\n\ngamma\n", encoding="utf-8")
    keys = read_api_keys(path)
    assert [(k.key, k.requests_per_minute, k.char_limit) for k in keys.values()] == [
        ("alpha", 120, None), ("beta", 0, 5000), ("gamma", 0, None)]
    for text, message in [("a b c d\n", "expected KEY"), ("a x\n", "whole numbers"), ("a -1\n", "negative"),
                          ("a\na\n", "listed twice"), ("# none\n", "lists no key")]:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ApiKeysFileError, match=message):
            read_api_keys(path)


def test_rate_limit_is_a_moving_minute_per_key(tmp_path):
    path = tmp_path / "keys"
    path.write_text("slow 2\nfree\n", encoding="utf-8")
    now = [1000.0]
    access = Access(read_api_keys(path), clock=lambda: now[0])
    with pytest.raises(Forbidden, match="Missing"):
        access.check(None)
    with pytest.raises(Forbidden, match="Invalid"):
        access.check("other")
    access.check("slow")
    now[0] += 30
    access.check("slow")
    with pytest.raises(RateLimited, match="2 per 1 minute"):
        access.check("slow")
    for _ in range(100):
        access.check("free")
    now[0] += 30.5  # the first request left the window; the second has not
    access.check("slow")
    with pytest.raises(RateLimited):
        access.check("slow")
    assert Access(None).check(None) is None


def test_file_store_names_and_expiry(tmp_path):
    assert safe_name("../../etc/pass wd.txt") == "pass_wd.txt"
    assert safe_name("C:\\Users\\me\\résumé.md") == "r_sum_.md"
    assert safe_name("...") == "file"
    store = FileStore(tmp_path / "files", ttl_s=60, max_files=2)
    first = store.put("a.txt", b"one")
    path, name = store.get(first)
    assert path.read_bytes() == b"one" and name == "a.txt"
    assert store.get("../" + first) is None and store.get("a.txt") is None
    old = time.time() - 120
    os.utime(path, (old, old))
    assert store.get(first) is None  # expired, and removed
    names = [store.put(f"{i}.txt", b"x") for i in range(3)]
    assert store.get(names[0]) is None and store.get(names[2]) is not None  # the oldest over the cap went


def test_language_pairs():
    assert parse_pairs(["en-fr", " DE-en "]) == [("en", "fr"), ("de", "en")]
    for bad in ("english", "en-", "-fr", "en-fr-ca"):
        with pytest.raises(ValueError, match="SOURCE-TARGET"):
            parse_pairs([bad])
    catalog = Catalog((("en", "fr"), ("en", "de"), ("de", "en")), routed=True)
    assert catalog.codes == ["de", "en", "fr"] and catalog.targets_of("en") == ["de", "fr"]
    assert catalog.route("en", "fr") == {"source_lang": "en", "target_lang": "fr"}
    assert Catalog((("en", "fr"),), routed=False).route("en", "fr") == {}


def test_languages_come_from_the_server_under_the_codes_clients_send():
    from dataclasses import replace

    from nmtserve.gateway.languages import discover
    from nmtserve.languages import describe

    codes = ["eng_Latn", "fra_Latn", "zho_Hans", "zho_Hant"]  # a multilingual model (NLLB's codes)

    class Server:
        def __init__(self, languages):
            self._languages = languages

        async def languages(self):
            return self._languages

    served = [replace(lang, targets=tuple(c for c in codes if c != lang.code)) for lang in describe(codes)]
    catalog = asyncio.run(discover(Server(served), ["en-fr"]))
    assert catalog.routed and catalog.sources == ["en", "fr", "zho_Hans", "zho_Hant"]  # zh is ambiguous
    assert catalog.targets_of("fr") == ["en", "zho_Hans", "zho_Hant"] and len(catalog.pairs) == 12
    assert catalog.route("fr", "en") == {"source_lang": "fra_Latn", "target_lang": "eng_Latn"}
    assert (catalog.name("fr"), catalog.name("zho_Hant")) == ("French", "Chinese (Hant)")

    unnamed = asyncio.run(discover(Server([]), ["en-fr"]))  # one model exported without --pair
    assert (unnamed.pairs, unnamed.routed, unnamed.route("en", "fr")) == ((("en", "fr"),), False, {})


def test_many_sources_detect_in_low_accuracy_mode():
    from lingua import Language

    many = sorted({lang.iso_code_639_1.name.lower() for lang in Language.all()})  # Lingua's 75
    detector, few = Detector(many), Detector(["de", "en", "es", "fr"])
    assert detect(detector, "Wo ist der Bahnhof?")[0].language == detect(few, "Wo ist der Bahnhof?")[0].language == "de"
    assert detector.low_accuracy and not few.low_accuracy


# Issue 35: French sent with source=auto to a server that translates from English (the demo's).
FRENCH = "J'ai trois pommes rouges et le train part à 7 h 45."
# Short: never refused, whatever Lingua makes of them (low accuracy calls "hello" Sotho).
SHORT = ["hello", "twenty", "7:45", "I have 3 apples", "i have 3 apples", "Hello world", "seventy-five"]
# English that Lingua's low-accuracy mode alone names otherwise at 99%+ (Ganda, Somali).
MISTAKEN = ["The meeting is on Thursday, October 17, 2052.", "we see 850 gray keys.",
            "On Thursday, October 31, 2075, I found ten gray horses."]


def test_words_count_letters_not_digits():
    from nmtserve.gateway.detect import words

    assert [words(t) for t in ("7:45", "I have 3 apples", "quatre-vingt-onze", "我有三个", "")] == [0, 3, 3, 4, 0]


def test_a_text_surely_in_a_language_not_served_is_named():
    from nmtserve.gateway.detect import name_of

    english = Detector(["en"])
    seen = asyncio.run(english.foreign(FRENCH))
    assert seen is not None and seen[0].language == "fr" and seen[0].confidence > 90, seen
    assert asyncio.run(english.see(FRENCH))[0] == seen[0]  # /detect says what it sees
    for text, language in (("Die Katze schläft auf dem Sofa.", "de"), ("Я люблю читать книги по вечерам.", "ru"),
                           ("我有三个红苹果，火车七点四十五分出发。", "zh"),
                           ("Gracias por tu respuesta rápida.", "es")):
        found = asyncio.run(english.foreign(text))
        assert found is not None and found[0].language == language, (text, found)
    assert (name_of("fr"), name_of("lg"), name_of("nb")) == ("French", "Ganda", "Norwegian")


def test_short_english_and_served_languages_are_never_refused():
    english = Detector(["en"])
    for text in SHORT + MISTAKEN + [english for english, _ in SHOWCASE]:
        assert asyncio.run(english.foreign(text)) is None, text
        assert [(d.language, d.confidence) for d in asyncio.run(english.see(text))] == [("en", 100.0)], text
    both = Detector(["en", "fr"])  # French is served: detected among the sources, as before
    assert asyncio.run(both.foreign(FRENCH)) is None and detect(both, FRENCH)[0].language == "fr"
    assert asyncio.run(Detector(["en", "fr"], served=["de", "en", "fr"]).foreign("Die Katze schläft auf dem Sofa.")) is None
    unknown = Detector(["xx"])  # a source Lingua has no model for: any text may be in it
    assert asyncio.run(unknown.foreign(FRENCH)) is None and asyncio.run(unknown.see(FRENCH))[0].language == "xx"


def test_the_second_check_holds_a_bounded_number_of_models():
    from nmtserve.gateway.detect import MAX_EXTRA_MODELS

    english = Detector(["en"])
    texts = [FRENCH, "Die Katze schläft auf dem Sofa.", "Gracias por tu respuesta rápida.",
             "Grazie per la tua risposta veloce.", "Waar kan ik een kaartje kopen?", "Obrigado pela sua resposta rápida.",
             "Vielen Dank für Ihre schnelle Antwort!", "Votre commande a été expédiée.", "Dove posso comprare un biglietto?"]
    for text in texts:
        asyncio.run(english.foreign(text))
        assert len(english._extra) <= MAX_EXTRA_MODELS
    assert asyncio.run(english.foreign(FRENCH))[0].language == "fr"  # a dropped language comes back


def test_a_gateway_started_before_its_server_waits_quietly(tmp_path, caplog):
    """No retry warning a second while the server starts: one line saying the gateway waits."""
    import logging

    from nmtserve.gateway.config import GatewayConfig
    from nmtserve.gateway.service import Service
    from nmtserve.server.ports import free_port

    async def run() -> None:
        service = Service(GatewayConfig(url=f"127.0.0.1:{free_port()}", files_dir=tmp_path / "files"))
        service.start()
        await asyncio.sleep(2.5)  # five polls of a server that is not there
        await service.close()

    with caplog.at_level(logging.INFO):
        asyncio.run(run())
    messages = [r.getMessage() for r in caplog.records]
    assert sum("waiting for the translation server" in m for m in messages) == 1, messages
    assert not any("retrying" in m for m in messages), messages
