"""Glossaries in the gateway: the store, the term finder, DeepL's glossary API and its use in
translation, against a real tritonserver on the demo model (English to French).

Proves: the finder finds a glossary's source terms without regard to case, on word boundaries,
longest first and never overlapping; entries are read as DeepL reads TSV and CSV, and what it
refuses (a line without a tab, an empty term, a source given twice) is DeepL's 400 "Invalid
glossary entries provided" naming the entry; the store keeps each glossary in one file per key,
across a restart, shows a key only its own, and holds its limits. Through DeepL's own Python
client: create, list, get, entries, delete, the glossary language pairs (the served pairs), and
translate_text(glossary=) writing the glossary's target term; Weblate's sequence of calls; a
glossary on tag_handling=xml and on LibreTranslate's /translate (nmtserve's ``glossary``
field); DeepL's errors for a glossary without source_lang, for another pair, and for one that is
not there.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import deepl
import pytest
import requests
from gateway_helpers import EXPECTED, running_gateway

from nmtserve import contract
from nmtserve.gateway.config import Limits
from nmtserve.gateway.errors import BadRequest, NotFound, TooLarge
from nmtserve.gateway.glossaries import EntriesError, Glossary, GlossaryStore, parse_entries

ROOT = Path(__file__).resolve().parents[1]
APPLES = "I have three red apples."


def delete(gateway, path: str, **kw) -> requests.Response:
    return requests.delete(gateway.url + path, timeout=60, **kw)


def glossary(entries: dict[str, str]) -> Glossary:
    return Glossary("id", "name", "en", "fr", entries)


def found(entries: dict[str, str], text: str) -> list[str]:
    return [text[a:b] for a, b, _ in glossary(entries).find(text)]


# -- the term finder


def test_terms_are_found_whatever_their_case():
    assert found({"red car": "x"}, "The RED Car and the Red car.") == ["RED Car", "Red car"]


def test_terms_are_found_on_word_boundaries_only():
    assert found({"car": "x"}, "cars, scar, car-park, car.") == ["car", "car"]


def test_the_longest_term_wins_where_terms_overlap():
    entries = {"car": "voiture", "red car": "voiture rouge", "car park": "parking"}
    assert found(entries, "the red car park") == ["car park"]
    assert found(entries, "the red car parked") == ["red car"]
    assert glossary(entries).terms("the red car and a car") == ["voiture rouge", "voiture"]


def test_found_terms_never_overlap_and_a_repeated_term_is_asked_once():
    entries = {"a b": "1", "b c": "2", "c": "3"}
    assert found(entries, "a b c") == ["a b", "c"]
    assert glossary(entries).terms("c and c") == ["3"]


def test_at_most_the_servers_limit_of_terms_the_longest_kept():
    entries = {f"w{i}": f"t{i}" for i in range(contract.TERMS_LIMIT)} | {"long phrase": "long"}
    text = " ".join(entries)
    terms = glossary(entries).terms(text)
    assert len(terms) == contract.TERMS_LIMIT and "long" in terms


# -- entries


def test_tsv_and_csv_entries_are_read_as_deepl_reads_them():
    assert parse_entries("red\trouge\r\n\n  apple \t pomme \n", "tsv") == {"red": "rouge", "apple": "pomme"}
    assert parse_entries('"red, dark",rouge\napple,pomme,en,fr\n', "csv", "en", "fr") == {
        "red, dark": "rouge", "apple": "pomme"}


@pytest.mark.parametrize(("entries", "fmt", "detail"), [
    ("red\trouge\nred\trouges", "tsv", "Key with the index 1 (starting at position 10) duplicates key with the index 0"),
    ("red rouge", "tsv", "Entry with the index 0 (starting at position 0) holds no tab"),
    ("red\trouge\tvif", "tsv", "holds more than one tab"),
    ("red\t \n", "tsv", "has an empty target term"),
    ("red,rouge,en", "csv", "has 3 columns"),
    ("red,rouge,en,de", "csv", "is for en-de, not the glossary's en-fr"),
])
def test_malformed_entries_name_the_entry(entries, fmt, detail):
    with pytest.raises(EntriesError, match="Invalid glossary entries provided") as caught:
        parse_entries(entries, fmt, "en", "fr")
    assert detail in caught.value.detail


def test_an_unknown_format_or_no_entries_is_refused():
    with pytest.raises(BadRequest, match="entries_format"):
        parse_entries("a\tb", "xlsx")
    with pytest.raises(BadRequest, match="Parameter 'entries' not specified"):
        parse_entries("", "tsv")


# -- the store


def test_a_glossary_outlives_its_store_and_its_file_is_whole(tmp_path):
    store = GlossaryStore(tmp_path)
    made = store.create(None, "colours", "en", "fr", {"red": "rouge"})
    again = GlossaryStore(tmp_path)  # a restarted gateway
    assert [g.info() for g in again.list(None)] == [made.info()]
    assert again.get(None, made.glossary_id).entries == {"red": "rouge"}
    assert [p.name for p in (tmp_path / "shared").iterdir()] == [f"{made.glossary_id}.json"]  # no temporary left
    again.delete(None, made.glossary_id)
    assert GlossaryStore(tmp_path).list(None) == []


def test_a_key_sees_only_its_own_glossaries(tmp_path):
    store = GlossaryStore(tmp_path)
    mine = store.create("key-a", "a", "en", "fr", {"red": "rouge"})
    assert store.list("key-b") == [] and [g.glossary_id for g in store.list("key-a")] == [mine.glossary_id]
    with pytest.raises(NotFound):
        store.get("key-b", mine.glossary_id)
    with pytest.raises(NotFound):
        store.delete("key-b", mine.glossary_id)
    assert "key-a" not in "".join(p.name for p in tmp_path.rglob("*"))  # the key is never written down


def test_the_stores_limits_are_named(tmp_path):
    store = GlossaryStore(tmp_path, Limits(max_glossary_entries=2, max_glossary_bytes=20, max_glossaries=1))
    with pytest.raises(TooLarge, match="3 entries, over the limit of 2 entries per glossary"):
        store.create(None, "n", "en", "fr", {"a": "1", "b": "2", "c": "3"})
    with pytest.raises(TooLarge, match="over the limit of 20 bytes per glossary"):
        store.create(None, "n", "en", "fr", {"a" * 20: "1"})
    store.create(None, "n", "en", "fr", {"a": "1"})
    with pytest.raises(TooLarge, match="Too many glossaries: this key has 1"):
        store.create(None, "n", "en", "fr", {"a": "1"})
    with pytest.raises(BadRequest, match="Parameter 'name' not specified"):
        GlossaryStore(tmp_path / "other").create(None, " ", "en", "fr", {"a": "1"})


# -- served: DeepL's API through its own client, Weblate's calls, LibreTranslate's extension

@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return tmp_path_factory.mktemp("glossaries")


@pytest.fixture(scope="module")
def gateway(demo_server, directory):
    with running_gateway(demo_server.urls.grpc_address, directory, "--glossaries-dir", str(directory / "store")) as gw:
        yield gw


@pytest.fixture
def translator(gateway):
    client = deepl.Translator("any-key", server_url=gateway.url)
    yield client
    for made in client.list_glossaries():
        client.delete_glossary(made)
    client.close()


@pytest.mark.server
def test_deepls_client_manages_glossaries(translator):
    assert [(p.source_lang, p.target_lang) for p in translator.get_glossary_languages()] == [("en", "fr")]
    made = translator.create_glossary("colours", source_lang="EN", target_lang="FR",
                                      entries={"red": "vertes", "apples": "pommes"})
    assert (made.name, made.source_lang, made.target_lang, made.entry_count, made.ready) == (
        "colours", "EN", "FR", 2, True)
    uuid.UUID(made.glossary_id)
    assert [g.glossary_id for g in translator.list_glossaries()] == [made.glossary_id]
    assert translator.get_glossary(made.glossary_id).name == "colours"
    assert translator.get_glossary_entries(made) == {"red": "vertes", "apples": "pommes"}
    translator.delete_glossary(made)
    assert translator.list_glossaries() == []
    with pytest.raises(deepl.GlossaryNotFoundException):
        translator.get_glossary(made.glossary_id)


@pytest.mark.server
def test_a_translation_with_a_glossary_writes_its_target_term(translator):
    made = translator.create_glossary("colours", "EN", "FR", {"red": "vertes"})
    plain = translator.translate_text(APPLES, source_lang="EN", target_lang="FR").text
    assert plain == EXPECTED[APPLES] and "vertes" not in plain
    glossed = translator.translate_text(APPLES, source_lang="EN", target_lang="FR", glossary=made).text
    assert "vertes" in glossed, glossed
    # a text where the glossary finds nothing translates as without it
    other = "This is the second page."
    assert translator.translate_text(other, source_lang="EN", target_lang="FR", glossary=made).text == EXPECTED[other]


@pytest.mark.server
def test_a_glossary_applies_to_each_sentence_and_to_the_text_of_markup(gateway, translator):
    made = translator.create_glossary("colours", "EN", "FR", {"red": "vertes"})
    two = f"{APPLES} This is the second page."
    got = translator.translate_text(two, source_lang="EN", target_lang="FR", glossary=made).text
    assert "vertes" in got and got.endswith(EXPECTED["This is the second page."]), got
    xml = f'<x id="0"></x> {APPLES}'
    response = gateway.post("/v2/translate", json={"text": [xml], "source_lang": "EN", "target_lang": "FR",
                                                    "tag_handling": "xml", "glossary_id": made.glossary_id})
    text = response.json()["translations"][0]["text"]
    assert response.status_code == 200 and "vertes" in text and text.count('<x id="0"></x>') == 1, response.text
    html = f"<p><b>{APPLES}</b></p>"
    got = translator.translate_text(html, source_lang="EN", target_lang="FR", tag_handling="html", glossary=made).text
    assert "vertes" in got and got.startswith("<p><b>") and got.endswith("</b></p>"), got


@pytest.mark.server
def test_weblates_calls(gateway):
    auth = {"Authorization": "DeepL-Auth-Key weblate-key"}
    pairs = gateway.get("/v2/glossary-language-pairs", headers=auth)
    assert pairs.json() == {"supported_languages": [{"source_lang": "en", "target_lang": "fr"}]}
    assert gateway.get("/v2/glossaries", headers=auth).json() == {"glossaries": []}
    created = gateway.post("/v2/glossaries", headers=auth, json={
        "name": "weblate:1:en:fr:0123", "source_lang": "en", "target_lang": "fr",
        "entries": "red\tvertes\nthe train\tle train\n", "entries_format": "tsv"})
    assert created.status_code == 201, created.text
    listed = gateway.get("/v2/glossaries", headers=auth).json()["glossaries"]
    assert [(g["name"], g["glossary_id"]) for g in listed] == [("weblate:1:en:fr:0123", created.json()["glossary_id"])]
    translated = gateway.post("/v2/translate", headers=auth, json={
        "text": [f'<x id="0"></x> {APPLES}'], "source_lang": "EN", "target_lang": "FR", "formality": "default",
        "tag_handling": "xml", "ignore_tags": ["x"], "glossary_id": created.json()["glossary_id"]})
    assert translated.status_code == 200 and "vertes" in translated.json()["translations"][0]["text"], translated.text
    assert delete(gateway, f"/v2/glossaries/{created.json()['glossary_id']}", headers=auth).status_code == 204
    assert gateway.get("/v2/glossaries", headers=auth).json() == {"glossaries": []}


@pytest.mark.server
@pytest.mark.parametrize(("body", "status", "message"), [
    ({"entries": "red\trouge\nred\trouges"}, 400, "Key with the index 1 (starting at position 10) duplicates"),
    ({"entries": "red rouge"}, 400, "holds no tab"),
    ({"entries": "\trouge"}, 400, "has an empty source term"),
    ({"entries_format": "xlsx"}, 400, "Value for 'entries_format' not supported."),
    ({"target_lang": "DE"}, 400, "Unsupported glossary source and target language pair"),
    ({"name": ""}, 400, "Parameter 'name' not specified."),
])
def test_bad_glossaries_are_deepls_errors(gateway, body, status, message):
    request = {"name": "g", "source_lang": "EN", "target_lang": "FR", "entries": "red\trouge", "entries_format": "tsv",
               **body}
    response = gateway.post("/v2/glossaries", json=request)
    assert response.status_code == status and message in json.dumps(response.json()), response.text
    if "Key with" in message or "tab" in message or "empty" in message:
        assert response.json()["message"] == "Invalid glossary entries provided"


@pytest.mark.server
def test_translate_with_a_glossary_asks_for_its_source_and_its_pair(gateway, directory):
    made = gateway.post("/v2/glossaries", data={"name": "g", "source_lang": "en", "target_lang": "fr",
                                                "entries": "red,vertes", "entries_format": "csv"}).json()
    body = {"text": [APPLES], "target_lang": "FR", "glossary_id": made["glossary_id"]}
    missing = gateway.post("/v2/translate", json=body)
    assert missing.status_code == 400 and "source_lang" in missing.json()["message"]
    unknown = gateway.post("/v2/translate", json={**body, "source_lang": "EN", "glossary_id": str(uuid.uuid4())})
    assert unknown.status_code == 404 and unknown.json() == {"message": "Glossary not found"}
    # a glossary for another pair (written as the store writes it: the demo serves en-fr only)
    other = str(uuid.uuid4())
    (directory / "store" / "shared" / f"{other}.json").write_text(json.dumps({
        "glossary_id": other, "name": "de", "source_lang": "en", "target_lang": "de",
        "creation_time": "2026-01-01T00:00:00.000Z", "entries": [["red", "rot"]]}))
    mismatch = gateway.post("/v2/translate", json={**body, "source_lang": "EN", "glossary_id": other})
    assert mismatch.status_code == 400, mismatch.text
    assert mismatch.json()["message"] == "Language pair of the glossary doesn't match the language pair of the request"
    wrong_accept = gateway.get(f"/v2/glossaries/{made['glossary_id']}/entries", headers={"Accept": "application/json"})
    assert wrong_accept.status_code == 415
    for glossary_id in (made["glossary_id"], other):
        delete(gateway, f"/v2/glossaries/{glossary_id}")


@pytest.mark.server
def test_libretranslates_glossary_field(gateway):
    inline = gateway.post("/translate", json={"q": APPLES, "source": "en", "target": "fr",
                                              "glossary": {"red": "vertes"}})
    assert inline.status_code == 200 and "vertes" in inline.json()["translatedText"], inline.text
    made = gateway.post("/v2/glossaries", json={"name": "g", "source_lang": "en", "target_lang": "fr",
                                                "entries": "red\tvertes", "entries_format": "tsv"}).json()
    by_id = gateway.post("/translate", data={"q": APPLES, "source": "en", "target": "fr",
                                             "glossary": made["glossary_id"]})
    assert by_id.status_code == 200 and "vertes" in by_id.json()["translatedText"], by_id.text
    bad = gateway.post("/translate", json={"q": APPLES, "source": "en", "target": "fr", "glossary": {"": "x"}})
    assert bad.status_code == 400 and "empty source term" in bad.json()["error"]
    delete(gateway, f"/v2/glossaries/{made['glossary_id']}")


@pytest.mark.server
def test_glossaries_are_per_key_limited_and_outlive_a_restart(demo_server, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("alice\nbob\n")
    options = ("--api-keys", str(keys), "--glossaries-dir", str(tmp_path / "store"), "--max-glossary-entries", "2")
    with running_gateway(demo_server.urls.grpc_address, tmp_path, *options) as gw:
        alice = deepl.Translator("alice", server_url=gw.url)
        bob = deepl.Translator("bob", server_url=gw.url)
        made = alice.create_glossary("mine", "EN", "FR", {"red": "vertes"})
        assert bob.list_glossaries() == []
        with pytest.raises(deepl.GlossaryNotFoundException):
            bob.get_glossary(made.glossary_id)
        with pytest.raises(deepl.DeepLException, match="over the limit of 2 entries per glossary"):
            alice.create_glossary("big", "EN", "FR", {"a": "1", "b": "2", "c": "3"})
        assert gw.get("/v2/glossaries", headers={"Authorization": "DeepL-Auth-Key mallory"}).status_code == 403
    with running_gateway(demo_server.urls.grpc_address, tmp_path, *options) as gw:  # restarted
        alice = deepl.Translator("alice", server_url=gw.url)
        assert [g.glossary_id for g in alice.list_glossaries()] == [made.glossary_id]
        assert alice.get_glossary_entries(made.glossary_id) == {"red": "vertes"}


@pytest.mark.server
def test_the_glossary_curl_examples_answer_as_shown(gateway, tmp_path):
    page = (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8")
    section = page.split("\n## Glossaries\n", 1)[1].split("\n## ", 1)[0]
    lines = "\n".join(re.findall(r"```sh\n(.*?)```", section, re.DOTALL)).replace("\\\n", " ").splitlines()
    examples = [(line, lines[i + 1][2:]) for i, line in enumerate(lines[:-1])
                if line.startswith("curl ") and lines[i + 1].startswith("# ")]
    assert len(examples) == 4
    host, made = gateway.url.removeprefix("http://"), {}
    for command, shown in examples:
        command = command.replace("localhost:5000", host).replace("GLOSSARY_ID", made.get("glossary_id", ""))
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 0, (command, out.stderr)
        if not shown.startswith("{"):  # the entries, as TSV
            assert out.stdout == shown + "\n", command
            continue
        got = json.loads(out.stdout)
        made = made or got
        want = shown.replace("GLOSSARY_ID", made["glossary_id"]).replace("CREATION_TIME", made["creation_time"])
        assert got == json.loads(want), command
    delete(gateway, f"/v2/glossaries/{made['glossary_id']}")
