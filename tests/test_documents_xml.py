"""XML documents (nmtserve.documents, format "xml"): DeepL's tag_handling=xml without a server.

Proves: Weblate's placeholders (``<x id="7"></x>``) and every other empty element are atomic
spans that come back exactly once each, wherever the word alignment puts them, whatever the
alignment or translation; ``ignore_tags`` keeps an element and its content byte for byte;
runs are cut as DeepL describes (outline detection, ``splitting_tags``, ``non_splitting_tags``,
line breaks for ``split_sentences=1``); entities are decoded for the translator and escaped
back; everything outside the sentences comes back byte for byte (prolog, DOCTYPE, comments,
CDATA, attributes, non-ASCII text before the markup); XML that is not well formed, and any
entity declaration (so no expansion: billion laughs, external entities), is a MarkupError naming
the line and column.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import time
from pathlib import Path

import pytest
from test_documents import assert_only_sentences_change, shout

from nmtserve import contract
from nmtserve.documents import (
    FORMATS,
    DocumentError,
    MarkupError,
    XmlRules,
    segment,
    translate_document,
)

# -- Weblate's placeholders

WEBLATE_TEXTS = [
    '<x id="0"></x> files selected.',  # at the start
    'Delete <x id="7"></x> files now.',  # in the middle
    'Saved in <x id="9"></x>',  # at the end
    'Copy <x id="5"></x> of <x id="13"></x> files.',  # two
    "Nothing to replace here.",  # none
]


def test_weblate_placeholders_are_atomic_spans_the_translator_never_sees():
    docs = [segment(t, "xml", xml=XmlRules(ignore_tags={"x"})) for t in WEBLATE_TEXTS]
    assert [d.sentences for d in docs] == [
        ["<x1/> files selected."], ["Delete <x1/> files now."], ["Saved in <x1/>"],
        ["Copy <x1/> of <x2/> files."], ["Nothing to replace here."]]
    # what the model gets: the text as a reader sees it, a placeholder as a space
    assert [d.without_markup() for d in docs] == [
        ["files selected."], ["Delete files now."], ["Saved in"], ["Copy of files."], ["Nothing to replace here."]]


def test_placeholders_go_after_the_aligned_word_and_the_text_is_the_translation():
    doc = segment('Copy <x id="5"></x> of <x id="13"></x> files.', "xml")
    # "Copy of files." -> "Copier des fichiers de." with Copy-Copier, of-de, files-fichiers
    out = doc.render_aligned(["Copier des fichiers de."], [[(0, 0), (2, 2), (1, 3), (2, 1)]])
    assert out == 'Copier <x id="5"></x> des fichiers de. <x id="13"></x>'
    start = segment('<x id="0"></x> files selected.', "xml")
    assert start.render_aligned(["fichiers sélectionnés."], [[(0, 0), (1, 1)]]) == '<x id="0"></x> fichiers sélectionnés.'


@pytest.mark.parametrize("text", WEBLATE_TEXTS + [
    "Press <x/> then <ph/> and <x id='3'></x>.", '<b>Bold <x id="1"></x> text</b> and <ph/>.',
    '<x id="0"></x><x id="1"></x> twice, touching.'])
def test_each_placeholder_comes_back_exactly_once_whatever_the_alignment(text):
    placeholders = re.findall(r"<x/>|<ph/>|<x id=[\"']\d+[\"']></x>", text)
    rng = random.Random(len(text))
    doc = segment(text, "xml")
    for _ in range(200):
        translations, alignments = [], []
        for sentence in doc.without_markup():
            words = [rng.choice(["mot", "autre", "x.", "«", "l'eau"]) for _ in range(rng.randint(0, 6))]
            translations.append(" ".join(words))
            alignments.append([(rng.randrange(len(sentence.split()) + 2), t)
                               for t in range(len(words)) if rng.random() < 0.7])
        out = doc.render_aligned(translations, alignments)
        for p in placeholders:
            assert out.count(p) == text.count(p), (text, out)


def test_ignore_tags_keep_the_element_and_its_content_verbatim():
    text = "Press <x>{count} &amp; <b>more</b></x> to go on. <x>Acme</x> stays."
    doc = segment(text, "xml", xml=XmlRules(ignore_tags={"x"}))
    assert doc.sentences == ["Press <x1/> to go on.", "<x1/> stays."]
    out = doc.render(shout(doc.sentences))
    assert out == "&lt;&lt;PRESS <x>{count} &amp; <b>more</b></x> TO GO ON.&gt;&gt; &lt;&lt;<x>Acme</x> STAYS.&gt;&gt;"
    # not ignored, the same element's text is translated and its tags are inline markup
    assert segment(text, "xml").sentences == ["Press <g1>{count} & <g2>more</g2></g1> to go on.", "<g1>Acme</g1> stays."]


# -- how runs are cut: DeepL's outline detection and tag lists

DEEPL_EXAMPLE = """\
<document>
  <meta>
    <title>A document's title</title>
  </meta>
  <content>
    <par>This is the first sentence. Followed by a <b>second</b> one.</par>
    <par>This is the third sentence.</par>
  </content>
</document>"""


def test_outline_detection_splits_at_structure_and_keeps_markup_inline():
    doc = segment(DEEPL_EXAMPLE, "xml")
    assert doc.sentences == ["A document's title", "This is the first sentence.",
                             "Followed by a <g1>second</g1> one.", "This is the third sentence."]
    assert_only_sentences_change(DEEPL_EXAMPLE, "xml")


def test_without_outline_detection_only_splitting_tags_split():
    rules = XmlRules(outline_detection=False, splitting_tags={"par", "title"})
    assert segment(DEEPL_EXAMPLE, "xml", xml=rules).sentences == segment(DEEPL_EXAMPLE, "xml").sentences
    text = "<doc><a>One</a><b>two</b></doc>"
    assert segment(text, "xml").sentences == ["One", "two"]
    assert segment(text, "xml", xml=XmlRules(outline_detection=False)).sentences == ["<g1>One</g1><g2>two</g2>"]


def test_non_splitting_tags_are_inline_and_splitting_tags_win():
    text = "<p><b>oat</b> <i>biscuits</i></p>"
    assert segment(text, "xml").sentences == ["oat", "biscuits"]  # <p> holds no text of its own
    assert segment(text, "xml", xml=XmlRules(non_splitting_tags={"b", "i"})).sentences == [
        "<g1>oat</g1> <g2>biscuits</g2>"]
    both = XmlRules(non_splitting_tags={"b", "i"}, splitting_tags={"i"})
    assert segment(text, "xml", xml=both).sentences == ["oat", "biscuits"]
    assert segment("<p>Some <i>oat</i> biscuits</p>", "xml", xml=XmlRules(splitting_tags={"i"})).sentences == [
        "Some", "oat", "biscuits"]


def test_line_breaks_end_a_run_only_with_split_on_newlines():
    text = "<div>She bought oat\nbiscuits.</div>"
    assert segment(text, "xml").sentences == ["She bought oat biscuits."]
    doc = segment(text, "xml", xml=XmlRules(split_on_newlines=True))
    assert doc.sentences == ["She bought oat", "biscuits."]
    assert doc.render(["A", "B"]) == "<div>A\nB</div>"


def test_rules_check_their_arguments():
    with pytest.raises(ValueError, match="ignore_tags must be a collection of tag names"):
        XmlRules(ignore_tags="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="xml rules are for the xml format, not html"):
        segment("<p>x</p>", "html", xml=XmlRules())


# -- text, entities, and the bytes around the text

def test_entities_are_decoded_for_the_translator_and_escaped_back():
    doc = segment("<p>Tom &amp; Jerry &lt;3 &#233;t&#xE9; &quot;ok&apos;</p>", "xml")
    assert doc.sentences == ["Tom & Jerry <3 été \"ok'"]
    assert doc.render(["A & B < C > D ]]> \"E'"]) == "<p>A &amp; B &lt; C &gt; D ]]&gt; \"E'</p>"


WHOLE = """\ufeff<?xml version="1.0" encoding="ISO-8859-1"?>
<!-- before. the root -->
<!DOCTYPE doc SYSTEM "doc.dtd">
<doc xmlns:t="urn:t" lang='en'>
  <t:head a="Attr. value &amp; more">Héllo wörld 😀, first.</t:head>
  <?pi Processing. instruction?>
  <body>Text <![CDATA[<kept> & raw. text]]> after. <br/> Last <!-- inline. comment --> one.</body>
</doc>
<!-- after. the root -->
"""


def test_everything_but_the_text_comes_back_byte_for_byte():
    doc = segment(WHOLE, "xml")
    assert doc.sentences == ["Héllo wörld 😀, first.", "Text", "after.", "<x1/> Last", "one."]
    assert_only_sentences_change(WHOLE, "xml")
    out = doc.render(shout(doc.sentences))
    for kept in ['\ufeff<?xml version="1.0" encoding="ISO-8859-1"?>\n<!-- before. the root -->\n<!DOCTYPE doc SYSTEM "doc.dtd">\n',
                 "<doc xmlns:t=\"urn:t\" lang='en'>", '<t:head a="Attr. value &amp; more">', "<?pi Processing. instruction?>",
                 "<![CDATA[<kept> & raw. text]]>", "<br/>", "<!-- inline. comment -->", "</doc>\n<!-- after. the root -->\n"]:
        assert kept in out
    assert "&lt;&lt;HÉLLO WÖRLD 😀, FIRST.&gt;&gt;" in out


def test_translate_document_takes_the_rules():
    text = 'Hello <x id="0"></x> <x>{name}</x>!'
    got = translate_document(text, "xml", shout, xml=XmlRules(ignore_tags={"x"}))
    assert got == '&lt;&lt;HELLO <x id="0"></x> <x>{name}</x>!&gt;&gt;'


def test_the_served_formats_are_read_here():
    from nmtserve.documents._files import FILE_FORMATS

    assert "xml" in FORMATS and set(contract.TEXT_FORMATS) <= set(FORMATS)
    assert set(contract.DOCUMENT_FORMATS) == set(contract.TEXT_FORMATS) | set(FILE_FORMATS)


# -- bad XML

@pytest.mark.parametrize(("text", "message"), [
    ('I have <x id="0"> red apples.', r"is not well-formed \(<x> is not closed\) at line 1, column 30"),
    ("a <b>c</a>", r"is not well-formed \(mismatched tag\) at line 1, column 9"),
    ("line one\nx </y>", r"is not well-formed \(mismatched tag\) at line 2, column 5"),
    ("Tom & Jerry", r"is not well-formed \(invalid token\) at line 1, column 6"),
    ("a < b", r"is not well-formed \(invalid token\) at line 1, column 4"),
    ("caf\u00e9 &nbsp; ok", r"is not well-formed \(undefined entity\) at line 1, column 6"),
    ('<a b="1" b="2"/>', r"duplicate attribute"),
    ("<a>ok</a><?xml version='1.0'?>", r"XML or text declaration not at start of entity"),
    ("x <![CDATA[ y", r"unclosed CDATA section"),
    ("form\ffeed", r"invalid token"),
])
def test_xml_that_is_not_well_formed_is_a_markup_error_naming_the_place(text, message):
    with pytest.raises(MarkupError, match=message):
        segment(text, "xml")
    assert issubclass(MarkupError, DocumentError)


LAUGHS = '<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(
    f'<!ENTITY lol{i} "{("&lol" + str(i - 1 or "") + ";") * 10}">' for i in range(1, 10)) + "]><lolz>&lol9;</lolz>"


@pytest.mark.parametrize(("text", "message"), [
    (LAUGHS, "declares the entity 'lol', which is refused"),
    ('<!DOCTYPE d [<!ENTITY % p "x">]><d>ok</d>', "declares the entity 'p'"),
    ('<!DOCTYPE d [<!ENTITY e SYSTEM "file:///etc/passwd">]><d>&e;</d>', "declares the entity 'e'"),
    ('<!DOCTYPE d [<!ENTITY e SYSTEM "x" NDATA png>]><d/>', "declares the entity 'e'"),
    ('<!DOCTYPE d SYSTEM "http://example.com/d.dtd"><d>&e;</d>', "refers to the undeclared entity 'e'"),
])
def test_entities_are_never_declared_so_never_expanded(text, message):
    started = time.perf_counter()
    with pytest.raises(MarkupError, match=message):
        segment(text, "xml")
    assert time.perf_counter() - started < 0.5


def test_a_doctype_without_entities_is_kept():
    text = '<!DOCTYPE d [<!ELEMENT d ANY><!ATTLIST d a CDATA "x">]>\n<d>Plain text.</d>'
    doc = segment(text, "xml")
    assert doc.sentences == ["Plain text."] and doc.render(["Texte."]) == text.replace("Plain text.", "Texte.")


def test_the_documented_example_prints_what_docs_documents_md_shows():
    page = (Path(__file__).resolve().parents[1] / "docs" / "documents.md").read_text(encoding="utf-8")
    code = next(b for b in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
                if b.startswith("from nmtserve.documents import XmlRules, segment"))
    shown = [line.split("# ", 1)[1] for line in code.splitlines() if "# " in line]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, {})  # noqa: S102 - the page's own example
    assert printed.getvalue().splitlines() == shown
