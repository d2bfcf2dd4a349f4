"""translate_document on the real tritonserver: plain, Markdown and HTML documents.

The oracle: the served document equals the document cut by ``nmtserve.documents`` with each
sentence replaced by what the ``translate`` ensemble returns for it (itself checked against the
PyTorch reference elsewhere), and everything outside the sentences is the input, byte for byte.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from nmtserve.client import AsyncTranslator, InvalidInputError, Translator
from nmtserve.documents import segment

pytestmark = pytest.mark.server

PLAIN = (
    "I have three red apples. The train leaves at 7:45.\n"
    "\n"
    "   the first day  \n"
    "\n\n"
    "The red car costs twelve thousand euros.\n"
)
MARKDOWN = """# the twenty-first day

Write the number ninety-three thousand six hundred ninety. I have three red apples.

- The train leaves at 7:45.
- the first day

```python
print("The red car costs twelve thousand euros.")
```

> The book costs one euro.
"""
HTML = """<!DOCTYPE html>
<html><head><title>the first day</title><style>p { color: red; }</style></head>
<body>
<h1 class="title" data-x='1'>the twenty-first day</h1>
<p>I have three red apples. The train leaves at 7:45.</p>
<p translate="no">The red car costs twelve thousand euros.</p>
<pre>The book costs one euro.</pre>
<p>This is the second page.
</body></html>
"""
DOCUMENTS = {"plain": PLAIN, "markdown": MARKDOWN, "html": HTML}


def _inline_markup(repository) -> str:
    """The export's measured verdict (nmtserve.export.markup): "keep" or "drop"."""
    config = (repository / "translate_document" / "config.pbtxt").read_text()
    found = re.search(r'key: "inline_markup" value: \{ string_value: "(\w+)" \}', config)
    assert found, "the document model has no inline_markup parameter"
    return found.group(1)


def _expected(client: Translator, text: str, fmt: str, mode: str = "drop", **options) -> str:
    """What translate_document must answer, from the sentences' own translations: without
    placeholders and with their word alignments ("drop": the markup goes back by alignment)."""
    document = segment(text, fmt)
    if mode != "drop":
        return document.render([t.text for t in client.translate(document.sentences, split_sentences=False, **options)])
    done = client.translate(document.without_markup(), split_sentences=False, alignment=True, **options)
    return document.render_aligned([t.text for t in done], [t.alignment for t in done])


@pytest.fixture(scope="module")
def mode(demo_repository) -> str:
    return _inline_markup(demo_repository)


# The examples: inline markup around a number or a word changed the number.
# ... and the markup stays on the words that render it (the demo's alignments).
MARKED = [
    ("markdown", "The train leaves at **7:45**.", "The train leaves at 7:45.", "Le train part à **7 h 45**."),
    ("markdown", "I have **three** red apples.", "I have three red apples.", "J'ai **trois** pommes rouges."),
    ("html", "<p>The train leaves at <b>7:45</b>.</p>", "The train leaves at 7:45.", "<p>Le train part à <b>7 h 45</b>.</p>"),
    ("html", "<p>I have <b>three</b> red apples.</p>", "I have three red apples.", "<p>J'ai <b>trois</b> pommes rouges.</p>"),
]


@pytest.mark.parametrize("fmt, text, plain, want", MARKED)
def test_markup_never_changes_the_text_of_a_sentence(demo_server, mode, fmt, text, plain, want):
    with Translator(demo_server.urls.grpc_address) as client:
        got = client.translate_document(text, fmt)
        alone = client.translate(plain).text
        assert got == _expected(client, text, fmt, mode)
    words = re.sub(r"<[^>]+>|[*]", "", got).split()
    assert " ".join(words) == alone, f"{got!r}: its text differs from {alone!r}"
    assert got == want


def test_the_demo_export_measured_that_its_model_drops_placeholders(mode):
    assert mode == "drop"  # the demo corpus has no placeholders (nmtserve/demo/corpus.py)


@pytest.mark.parametrize("fmt", list(DOCUMENTS))
def test_documents_keep_their_layout_and_translate_every_sentence(demo_server, mode, fmt):
    text = DOCUMENTS[fmt]
    with Translator(demo_server.urls.grpc_address) as client:
        got = client.translate_document(text, fmt)
        assert got == _expected(client, text, fmt, mode)
    document = segment(text, fmt)
    assert len(document.sentences) >= 4
    # Outside the sentences, the output is the input.
    cuts = [0, *(i for span in document.spans for i in span), len(text)]
    outside = [text[cuts[i]:cuts[i + 1]] for i in range(0, len(cuts), 2)]
    position = 0
    for piece in outside:
        found = got.find(piece, position)
        assert found >= 0, f"{piece!r} is missing from the translated {fmt} document"
        position = found + len(piece)
    if fmt == "html":
        assert '<p translate="no">The red car costs twelve thousand euros.</p>' in got
        assert "<pre>The book costs one euro.</pre>" in got
        assert "<style>p { color: red; }</style>" in got
        assert "le vingt et unième jour" in got
    if fmt == "markdown":
        assert 'print("The red car costs twelve thousand euros.")' in got
        assert got.startswith("# le vingt et unième jour\n")


def test_http_async_and_options_reach_the_document_model(demo_server):
    async def run():
        async with AsyncTranslator(demo_server.urls.http_address, protocol="http") as client:
            return await client.translate_document(PLAIN, "plain", beam_size=1)

    with Translator(demo_server.urls.grpc_address) as client:
        want = _expected(client, PLAIN, "plain", beam_size=1)
    import asyncio

    assert asyncio.run(run()) == want


def test_bad_documents_are_refused_and_the_server_keeps_serving(demo_server):
    with Translator(demo_server.urls.grpc_address, max_retries=0) as client:
        with pytest.raises(InvalidInputError, match="format must be one of"):
            client.translate_document("x", "pdf")
        with pytest.raises(InvalidInputError, match="a docx file must be bytes"):
            client.translate_document("x", "docx")
        with pytest.raises(InvalidInputError, match="the docx file is not a readable zip package|docx"):
            client.translate_document(b"not a zip", "docx")
        with pytest.raises(InvalidInputError, match=r"offset|control|binary"):
            client.translate_document("I have three red apples.\x00\x01\x02", "plain")
        with pytest.raises(InvalidInputError, match="sentence 2 of the document"):
            client.translate_document("I have three red apples. " + "one " * 2000 + "end.", "plain")
        # Unclosed tags are HTML as browsers read it: kept as written, the text translated.
        out = client.translate_document("<p><b>I have three red apples.", "html")
        assert out.startswith("<p><b>") and "pommes" in out
        assert client.translate_document("", "markdown") == ""
        assert client.translate("the first day").text == "le premier jour"


def test_the_cli_translates_a_document_file(demo_server, mode, tmp_path):
    path = tmp_path / "doc.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address, "--document",
         "--format", "markdown", str(path)], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    with Translator(demo_server.urls.grpc_address) as client:
        assert proc.stdout == _expected(client, MARKDOWN, "markdown", mode)


def test_a_thousand_sentence_document_against_the_same_sentences_as_a_list(demo_server, demo_sentences):
    sentences = [s if s.endswith(".") else s + "." for s in demo_sentences[:1000]]
    text = "\n\n".join(sentences) + "\n"
    with Translator(demo_server.urls.grpc_address, batch_size=32, concurrency=4) as client:
        document = segment(text, "plain")
        assert len(document.sentences) == 1000
        started = time.perf_counter()
        listed = client.translate(document.sentences)
        as_list = time.perf_counter() - started
        started = time.perf_counter()
        got = client.translate_document(text, "plain")
        as_document = time.perf_counter() - started
    assert got == document.render([t.text for t in listed])
    print(f"1,000 sentences: as a list {1000 / as_list:.1f} sent/s, as one document {1000 / as_document:.1f} sent/s")


@pytest.mark.server
def test_an_xml_document_comes_back_with_its_placeholders_once(demo_server):
    """translate_document with format xml (DeepL's rules, nmtserve.documents._xml): placeholders
    placed by the decoder's alignments, each once, the markup around the text kept; malformed
    XML refused naming the problem, and the server keeps serving."""
    with Translator(demo_server.urls.grpc_address, max_retries=0) as client:
        out = client.translate_document('<doc><p>I have <x id="1"/> three red apples.</p></doc>', "xml")
        assert out.startswith("<doc><p>") and out.endswith("</p></doc>")
        assert out.count('<x id="1"/>') == 1 and "pommes rouges" in out
        with pytest.raises(InvalidInputError, match="well-formed|not closed|xml"):
            client.translate_document("<doc><p>I have three red apples.</doc>", "xml")
        assert client.translate("the first day").text == "le premier jour"
