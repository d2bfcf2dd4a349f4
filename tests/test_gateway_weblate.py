"""Weblate's DeepL machinery against the gateway on the demo model and a real tritonserver.

Weblate (``weblate/machinery/deepl.py``) sends each batch of strings as JSON to /v2/translate
with ``tag_handling=xml``, ``ignore_tags=["x"]``, ``formality=default``, its format strings
replaced by ``<x id="N"></x>`` (N: where the format string starts in the source), and reads the
language lists from GET /v2/languages?type=source|target.

Proves: every placeholder comes back exactly once in each translation (at the start, the
middle, the end, two in one string, none), and the text around the placeholders is exactly the
plain translation of the string without them; a string without placeholders is translated as
without tag handling; ``ignore_tags`` content comes back verbatim; the document's structure cuts
it (outline detection, or ``splitting_tags``), through DeepL's own Python client too; XML that
is not well formed, or that declares entities, gets DeepL's 400 "Tag handling parsing failed,
please check input." and the gateway keeps serving; HTML's ``class="notranslate"`` is kept as
``translate="no"`` is; the language lists answer as Weblate asks.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import deepl
import pytest
from gateway_helpers import EXPECTED, running_gateway

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]

PLACEHOLDER = re.compile(r'<x id="\d+"></x>')
PARSING_FAILED = "Tag handling parsing failed, please check input."
AUTH = {"Authorization": "DeepL-Auth-Key weblate-key"}

# Weblate's strings, their format strings already placeholders.
STRINGS = [
    '<x id="0"></x> I have three red apples.',  # at the start
    'The train leaves at <x id="20"></x> 7:45.',  # in the middle
    "The red car costs twelve thousand euros. <x id=\"40\"></x>",  # at the end
    'On Tuesday, <x id="12"></x> March 5, 2024, we bought <x id="40"></x> seven chairs.',  # two
    "This is the second page.",  # none
]


@pytest.fixture(scope="module")
def gateway(demo_server, tmp_path_factory):
    with running_gateway(demo_server.urls.grpc_address, tmp_path_factory.mktemp("weblate")) as gw:
        yield gw


def weblate_request(texts: list[str], **extra) -> dict:
    """The body Weblate sends (download_multiple_translations), for English to French."""
    return {"text": texts, "source_lang": "EN", "target_lang": "FR", "formality": "default",
            "tag_handling": "xml", "ignore_tags": ["x"], **extra}


def translations(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [t["text"] for t in response.json()["translations"]]


def without_placeholders(text: str) -> str:
    """The string as the model reads it: each placeholder a space, spaces single, XML unescaped
    (Weblate unescapes what DeepL answers)."""
    return html.unescape(" ".join(PLACEHOLDER.sub(" ", text).split()))


def test_every_placeholder_comes_back_once_around_the_plain_translation(gateway):
    got = translations(gateway.post("/v2/translate", json=weblate_request(STRINGS), headers=AUTH))
    plain = translations(gateway.post("/v2/translate", headers=AUTH, json={
        "text": [without_placeholders(s) for s in STRINGS], "source_lang": "EN", "target_lang": "FR"}))
    assert len(got) == len(STRINGS)
    for source, translated, reference in zip(STRINGS, got, plain, strict=True):
        for placeholder in PLACEHOLDER.findall(source):
            assert translated.count(placeholder) == 1, (source, translated)
        assert len(PLACEHOLDER.findall(translated)) == len(PLACEHOLDER.findall(source))
        # The words are the plain translation's, in its order: a placeholder only goes between
        # them (after the word aligned to the source word before it), so taking the placeholders
        # out gives that translation exactly. Where a placeholder lands follows the French word
        # order, so it is not compared with the English position, except at the very start.
        assert without_placeholders(translated) == reference, (source, translated)
    assert got[0].startswith('<x id="0"></x> ')
    assert got[4] == EXPECTED["This is the second page."]


def test_ignore_tags_content_comes_back_verbatim(gateway):
    text = "I have <x>{count} &amp; {name}</x> three red apples."
    got = translations(gateway.post("/v2/translate", json=weblate_request([text]), headers=AUTH))[0]
    assert got.count("<x>{count} &amp; {name}</x>") == 1, got
    assert without_placeholders(re.sub(r"<x>.*?</x>", " ", got)) == translations(gateway.post("/v2/translate", json={
        "text": ["I have three red apples."], "source_lang": "EN", "target_lang": "FR"}))[0]


def test_the_structure_cuts_the_document_and_deepls_client_sends_the_options(gateway):
    one, two = "I have three red apples.", "The train leaves at 7:45."
    document = f"<doc>\n  <par>{one}</par>\n  <par>{two}</par>\n</doc>"
    want = f"<doc>\n  <par>{EXPECTED[one]}</par>\n  <par>{EXPECTED[two]}</par>\n</doc>"
    assert translations(gateway.post("/v2/translate", json=weblate_request([document]))) == [want]
    translator = deepl.Translator("any-key", server_url=gateway.url)
    result = translator.translate_text(document, source_lang="EN", target_lang="FR", tag_handling="xml",
                                       outline_detection=False, splitting_tags=["par"], ignore_tags=["x", "code"])
    assert result.text == want
    # split_sentences=1 (DeepL's default) ends a sentence at a line break; nonewlines does not
    wrapped = "<p>I have three red\napples.</p>"
    assert translations(gateway.post("/v2/translate", json=weblate_request([wrapped], split_sentences="nonewlines"))) == [
        f"<p>{EXPECTED[one]}</p>"]


@pytest.mark.parametrize("text", [
    'I have <x id="0"> red apples.',  # unclosed
    "I have three red apples.</x>",  # stray end tag
    "Tom & Jerry",  # an XML text escapes its "&"
    '<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]><d>&b;&b;</d>',  # never expanded
    "caf&eacute;",  # no HTML entities in XML
])
def test_xml_that_cannot_be_read_is_deepls_400_and_the_gateway_keeps_serving(gateway, text):
    response = gateway.post("/v2/translate", json=weblate_request(["This is the second page.", text]))
    assert response.status_code == 400, response.text
    assert list(response.json()) == ["message"]
    message = response.json()["message"]
    assert message.startswith(PARSING_FAILED) and "text[1]: the xml document" in message, message
    assert translations(gateway.post("/v2/translate", json=weblate_request(["This is the second page."]))) == [
        EXPECTED["This is the second page."]]


@pytest.mark.parametrize(("extra", "message"), [
    ({"tag_handling": "yaml"}, "Value for 'tag_handling' not supported"),
    ({"outline_detection": "maybe"}, "Value for 'outline_detection' not supported."),
    ({"ignore_tags": [1]}, "Value for 'ignore_tags' not supported"),
    ({"tag_handling": "html"}, "Value for 'ignore_tags' not supported: this server reads it with tag_handling=xml only"),
    ({"tag_handling_version": "v9"}, "Value for 'tag_handling_version' not supported."),
])
def test_bad_xml_options_are_deepls_400(gateway, extra, message):
    response = gateway.post("/v2/translate", json=weblate_request(["This is the second page."], **extra))
    assert response.status_code == 400 and message in response.json()["message"], response.text


def test_html_class_notranslate_is_kept_as_translate_no_is(gateway):
    text = '<p class="notranslate">I have three red apples.</p><p translate="no">The book costs one euro.</p><p>the first day</p>'
    got = translations(gateway.post("/v2/translate", json={"text": [text], "target_lang": "FR", "tag_handling": "html"}))
    assert got == ['<p class="notranslate">I have three red apples.</p><p translate="no">The book costs one euro.</p>'
                   f"<p>{EXPECTED['the first day']}</p>"]


def test_the_language_lists_as_weblate_reads_them(gateway):
    sources = gateway.get("/v2/languages", params={"type": "source"}, headers=AUTH)
    targets = gateway.get("/v2/languages", params={"type": "target"}, headers=AUTH)
    assert sources.status_code == targets.status_code == 200
    assert {x["language"] for x in sources.json()} == {"EN"}
    assert [(x["language"], x.get("supports_formality")) for x in targets.json()] == [("FR", False)]


def test_the_weblate_curl_examples_answer_as_shown(gateway, tmp_path):
    page = (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8")
    section = page.split("## Weblate and DeepL's XML tag handling", 1)[1].split("\n## ", 1)[0]
    lines = "\n".join(re.findall(r"```bash\n(.*?)```", section, re.DOTALL)).replace("\\\n", " ").splitlines()
    examples = [(line, lines[i + 1][2:]) for i, line in enumerate(lines[:-1])
                if line.startswith("curl ") and lines[i + 1].startswith("# ")]
    assert len(examples) == 2
    host = gateway.url.removeprefix("http://")
    for command, shown in examples:
        out = subprocess.run(["bash", "-c", command.replace("localhost:5000", host)], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
        assert out.returncode == 0, (command, out.stderr)
        assert json.loads(out.stdout) == json.loads(shown), command
