"""OpenDocument (odt, odp, ods) and EPUB files through translate_file: the files are built with
odfpy and ebooklib, translated by fake translators, and read back with the same libraries."""

from __future__ import annotations

import io
import re
import zipfile

import pytest
from ebooklib import epub
from lxml import etree
from odf import teletype
from odf.draw import Frame, Page, TextBox
from odf.opendocument import (
    OpenDocumentPresentation,
    OpenDocumentSpreadsheet,
    OpenDocumentText,
    load,
)
from odf.presentation import Notes
from odf.style import Footer, Header, MasterPage, PageLayout, Style, TextProperties
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import A, H, LineBreak, Note, NoteBody, NoteCitation, P, PageNumber, Span, Tab

from nmtserve.documents._core import DocumentError
from nmtserve.documents._files import segment_file, translate_file

_WORD = re.compile(r"</?g\d+>|<x\d+/>|[^\W\d_]+")


def _reverse(sentences: list[str]) -> list[str]:
    """Each word reversed behind a Q ("red" -> "Qder"), placeholders kept."""
    return [_WORD.sub(lambda m: m.group() if m.group().startswith("<") else "Q" + m.group()[::-1].lower(), s)
            for s in sentences]


def _mangle(sentences: list[str]) -> list[str]:
    """``_reverse``, losing every atomic placeholder and the first pair's closing marker."""
    return [re.sub(r"<x\d+/>", "", s).replace("</g1>", "", 1) for s in _reverse(sentences)]


def _untranslated(text: str) -> list[str]:
    return [w for w in re.findall(r"[^\W\d_]+", text) if not w.startswith("Q")]


def _members(data: bytes) -> list[zipfile.ZipInfo]:
    infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    assert infos[0].filename == "mimetype" and infos[0].compress_type == zipfile.ZIP_STORED
    return infos


def _same_members(before: bytes, after: bytes) -> None:
    assert [i.filename for i in _members(before)] == [i.filename for i in _members(after)]


def _replace_member(data: bytes, name: str, content: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, content if info.filename == name else source.read(info))
    return out.getvalue()


def _save(doc) -> bytes:
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


# -- OpenDocument text

def _odt() -> bytes:
    doc = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    italic = Style(name="Italic", family="text")
    italic.addElement(TextProperties(fontstyle="italic"))
    layout = PageLayout(name="pm1")
    for style in (bold, italic, layout):
        doc.automaticstyles.addElement(style)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    header = Header()
    header.addElement(P(text="The quiet header"))
    footer = Footer()
    page = P(text="Page ")
    page.addElement(PageNumber(selectpage="current", text="1"))
    footer.addElement(page)
    master.addElement(header)
    master.addElement(footer)
    doc.masterstyles.addElement(master)

    doc.text.addElement(H(outlinelevel=1, text="A short story"))
    p = P(text="Press the ")
    p.addElement(Span(stylename=bold, text="red"))
    p.addElement(Span(stylename=bold, text=" door"))
    teletype.addTextToElement(p, " now.  Then wait. ")
    p.addElement(A(href="https://example.org/manual", text="Read the manual"))
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="A small note."))
    note.addElement(body)
    p.addElement(note)
    doc.text.addElement(p)
    lines = P()
    teletype.addTextToElement(lines, "First line\tafter a tab\nsecond line, ")
    lines.addElement(Span(stylename=italic, text="slowly"))
    lines.addText(".")
    doc.text.addElement(lines)
    doc.text.addElement(P(text="2024"))
    table = Table(name="Plan")
    table.addElement(TableColumn())
    for text in ("Cell text", "Another cell"):
        row = TableRow()
        cell = TableCell(valuetype="string")
        cell.addElement(P(text=text))
        row.addElement(cell)
        table.addElement(row)
    doc.text.addElement(table)
    return _save(doc)


def _paragraphs(doc) -> list[str]:
    """The text of every paragraph of the body and of the master pages (headers, footers)."""
    elements = doc.masterstyles.getElementsByType(P) + doc.body.getElementsByType(H) + doc.body.getElementsByType(P)
    return [teletype.extractText(e) for e in elements]


def _spans(doc) -> list[tuple[str, str]]:
    return [(s.getAttribute("stylename"), teletype.extractText(s)) for s in doc.body.getElementsByType(Span)]


def test_odt_every_paragraph_is_translated_with_its_formatting() -> None:
    data = _odt()
    out = translate_file(data, "odt", _reverse)
    _same_members(data, out)
    doc = load(io.BytesIO(out))
    texts = _paragraphs(doc)
    assert not [w for t in texts for w in _untranslated(t)], texts
    assert "Qeht Qteiuq Qredaeh" in texts  # the header
    assert "Qa Qtrohs Qyrots" in texts
    assert "2024" in texts
    # the two bold spans are one pair around the same words, translated
    assert [t.strip() for s, t in _spans(doc) if s == "Bold"] == ["Qder Qrood"]
    assert [t for s, t in _spans(doc) if s == "Italic"] == ["Qylwols"]
    links = doc.body.getElementsByType(A)
    assert [(a.getAttribute("href"), teletype.extractText(a)) for a in links] == [
        ("https://example.org/manual", "Qdaer Qeht Qlaunam")]
    notes = doc.body.getElementsByType(Note)
    assert len(notes) == 1 and teletype.extractText(notes[0].getElementsByType(NoteCitation)[0]) == "1"
    assert teletype.extractText(notes[0].getElementsByType(NoteBody)[0]) == "Qa Qllams Qeton."
    assert len(doc.body.getElementsByType(Tab)) == 1 and len(doc.body.getElementsByType(LineBreak)) == 1
    assert len(doc.masterstyles.getElementsByType(PageNumber)) == 1
    assert [t.getAttribute("name") for t in doc.body.getElementsByType(Table)] == ["Plan"]


def test_odt_identity_keeps_text_spaces_and_formatting() -> None:
    data = _odt()
    out = translate_file(data, "odt", lambda s: list(s))
    before, after = load(io.BytesIO(data)), load(io.BytesIO(out))
    assert _paragraphs(after) == _paragraphs(before)
    assert any("now.  Then" in t for t in _paragraphs(after))  # text:s kept
    assert _spans(after) == [("Bold", "red door"), ("Italic", "slowly")]  # the two bold spans merged
    doc = segment_file(data, "odt")  # the file can be written again, from other translations
    first, again = doc.render(_reverse(doc.sentences)), doc.render(list(doc.sentences))
    assert _paragraphs(load(io.BytesIO(again))) == _paragraphs(before)
    assert doc.render(_reverse(doc.sentences)) == first


def test_odt_placeholders_lost_by_the_translator_are_repaired() -> None:
    data = _odt()
    out = translate_file(data, "odt", _mangle)
    doc = load(io.BytesIO(out))
    texts = _paragraphs(doc)
    assert not [w for t in texts for w in _untranslated(t)], texts
    assert len(doc.body.getElementsByType(Note)) == 1  # the note's citation came back at the end
    assert len(doc.body.getElementsByType(Tab)) == 1 and len(doc.body.getElementsByType(LineBreak)) == 1
    assert len(doc.masterstyles.getElementsByType(PageNumber)) == 1


# -- OpenDocument spreadsheet

def _ods() -> bytes:
    doc = OpenDocumentSpreadsheet()
    table = Table(name="Prices")
    row = TableRow()
    cells = [
        (TableCell(valuetype="string", stringvalue="Red apple"), "Red apple"),
        (TableCell(valuetype="float", value="3.5"), "3.5"),
        (TableCell(valuetype="float", value="7", formula="of:=[.B1]*2"), "7"),
        (TableCell(valuetype="string", formula='of:=CONCATENATE("Big";" box")'), "Big box"),
    ]
    for cell, text in cells:
        cell.addElement(P(text=text))
        row.addElement(cell)
    table.addElement(row)
    row = TableRow()
    cell = TableCell(valuetype="string")
    cell.addElement(P(text="Green pear"))
    row.addElement(cell)
    table.addElement(row)
    doc.spreadsheet.addElement(table)
    return _save(doc)


def test_ods_translates_string_cells_only() -> None:
    data = _ods()
    out = translate_file(data, "ods", _reverse)
    _same_members(data, out)
    doc = load(io.BytesIO(out))
    table = doc.spreadsheet.getElementsByType(Table)[0]
    assert table.getAttribute("name") == "Prices"  # sheet names are not translated
    rows = table.getElementsByType(TableRow)
    first = rows[0].getElementsByType(TableCell)
    assert teletype.extractText(first[0]) == "Qder Qelppa"
    assert first[0].getAttribute("stringvalue") == "Qder Qelppa"
    assert (first[1].getAttribute("value"), teletype.extractText(first[1])) == ("3.5", "3.5")
    assert (first[2].getAttribute("formula"), teletype.extractText(first[2])) == ("of:=[.B1]*2", "7")
    assert first[3].getAttribute("formula") == 'of:=CONCATENATE("Big";" box")'
    assert teletype.extractText(first[3]) == "Big box"  # a formula's result
    assert teletype.extractText(rows[1].getElementsByType(TableCell)[0]) == "Qneerg Qraep"


# -- OpenDocument presentation

def _odp() -> bytes:
    doc = OpenDocumentPresentation()
    layout = PageLayout(name="pl")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    slide = Page(name="Slide one", masterpagename=master)
    for parent, text in ((slide, "Welcome to the meeting"), (Notes(), "Speak slowly here")):
        frame = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(P(text=text))
        frame.addElement(box)
        parent.addElement(frame)
        if parent is not slide:
            slide.addElement(parent)
    doc.presentation.addElement(slide)
    return _save(doc)


def test_odp_slides_and_notes_are_translated() -> None:
    data = _odp()
    out = translate_file(data, "odp", _reverse)
    _same_members(data, out)
    doc = load(io.BytesIO(out))
    assert [teletype.extractText(p) for p in doc.presentation.getElementsByType(P)] == [
        "Qemoclew Qot Qeht Qgniteem", "Qkaeps Qylwols Qereh"]
    names = [[p.getAttribute("name") for p in d.presentation.getElementsByType(Page)] for d in (doc, load(io.BytesIO(data)))]
    assert names[0] == names[1] == ["Slide_20_one"]  # odfpy's encoding of "Slide one", not translated


# -- bad OpenDocument input

def test_odf_bad_input_raises_document_error() -> None:
    odt = _odt()
    with pytest.raises(DocumentError, match="empty"):
        translate_file(b"", "odt", _reverse)
    with pytest.raises(DocumentError, match="(?i)not a (readable )?zip package"):
        translate_file(b"plain text, not a package", "odt", _reverse)
    with pytest.raises(DocumentError, match="(?i)not a (readable )?zip package"):
        translate_file(odt[:len(odt) // 2], "odt", _reverse)
    with pytest.raises(DocumentError, match="OpenDocument spreadsheet"):
        translate_file(_ods(), "odt", _reverse)
    manifest = zipfile.ZipFile(io.BytesIO(odt)).read("META-INF/manifest.xml").decode()
    encrypted = re.sub(r'(<manifest:file-entry [^>]*full-path="content.xml"[^>]*?)/>',
                       r'\1><manifest:encryption-data manifest:checksum-type="SHA1" manifest:checksum="x"/>'
                       r'</manifest:file-entry>', manifest)
    assert encrypted != manifest
    with pytest.raises(DocumentError, match="encrypted"):
        translate_file(_replace_member(odt, "META-INF/manifest.xml", encrypted.encode()), "odt", _reverse)
    broken = _replace_member(odt, "content.xml", b"<office:document-content")
    with pytest.raises(DocumentError, match="content.xml is not well-formed"):
        translate_file(broken, "odt", _reverse)


# -- EPUB

def _epub(tmp_path) -> bytes:
    book = epub.EpubBook()
    book.set_identifier("book-1")
    book.set_title("The Red House")
    book.set_language("en")
    book.add_author("Ann Smith")
    chapters = []
    for name, title, body in (
        ("c1.xhtml", "The first chapter",
         '<p>Open the <b>heavy</b> door and <a href="c2.xhtml">go on</a>. Rain &amp; wind came.</p>'),
        ("c2.xhtml", "The second chapter", "<p>Look at the <i>old</i> garden.</p><p><code>x = 1</code></p>"),
    ):
        chapter = epub.EpubHtml(title=title, file_name=name, lang="en")
        chapter.content = f"<h1>{title}</h1>{body}"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = [epub.Link("c1.xhtml", "The first chapter", "c1"), epub.Link("c2.xhtml", "The second chapter", "c2")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    path = tmp_path / "in.epub"
    epub.write_epub(str(path), book)
    return path.read_bytes()


def _read_epub(tmp_path, data: bytes):
    path = tmp_path / "out.epub"
    path.write_bytes(data)
    return epub.read_epub(str(path))


def _xhtml(book, data: bytes, href: str) -> etree._Element:
    """A document of the book, from the package itself (ebooklib's ``get_content`` writes the head
    again), well-formed XML or raises."""
    assert book.get_item_with_href(href) is not None
    return etree.fromstring(zipfile.ZipFile(io.BytesIO(data)).read(f"EPUB/{href}"))


_X = "{http://www.w3.org/1999/xhtml}"


def test_epub_chapters_title_and_toc_are_translated(tmp_path) -> None:
    data = _epub(tmp_path)
    out = translate_file(data, "epub", lambda s: [t + " & <" for t in _reverse(s)])
    _same_members(data, out)
    book = _read_epub(tmp_path, out)
    assert book.get_metadata("DC", "title")[0][0] == "Qeht Qder Qesuoh & <"
    assert book.get_metadata("DC", "creator")[0][0] == "Ann Smith"
    c1, c2 = _xhtml(book, out, "c1.xhtml"), _xhtml(book, out, "c2.xhtml")
    for doc in (c1, c2):
        for code in doc.iter(f"{_X}code"):
            assert code.text == "x = 1"
            code.getparent().remove(code)
        body = "".join(doc.find(f"{_X}body").itertext())
        assert not _untranslated(body), body
    heading = c1.find(f".//{_X}h1").text
    assert heading == "Qeht Qtsrif Qretpahc & <"
    assert c1.find(f".//{_X}title").text == heading
    assert c1.find(f".//{_X}b").text == "Qyvaeh"
    link = c1.find(f".//{_X}a")
    assert (link.get("href"), link.text) == ("c2.xhtml", "Qog Qno")
    assert "Qniar & Qdniw Qemac." in "".join(c1.find(f".//{_X}p").itertext())
    assert c2.find(f".//{_X}i").text == "Qdlo"
    # the table of contents, EPUB 3's and EPUB 2's, as the chapters' headings
    nav = _xhtml(book, out, "nav.xhtml")
    assert [a.text for a in nav.iter(f"{_X}a")] == [heading, c2.find(f".//{_X}h1").text]
    ncx = etree.fromstring(zipfile.ZipFile(io.BytesIO(out)).read("EPUB/toc.ncx"))
    labels = [t.text for t in ncx.iter("{http://www.daisy.org/z3986/2005/ncx/}text")]
    assert labels == ["Qeht Qder Qesuoh & <", heading, c2.find(f".//{_X}h1").text]


def test_epub_identity_and_repair(tmp_path) -> None:
    data = _epub(tmp_path)
    same = translate_file(data, "epub", lambda s: list(s))
    before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(same))
    for name in ("EPUB/c1.xhtml", "EPUB/c2.xhtml", "EPUB/nav.xhtml"):
        assert after.read(name) == before.read(name)
    assert _read_epub(tmp_path, same).get_metadata("DC", "title")[0][0] == "The Red House"
    out = translate_file(data, "epub", _mangle)
    c1 = _xhtml(_read_epub(tmp_path, out), out, "c1.xhtml")
    assert not _untranslated("".join(c1.find(f"{_X}body").itertext()))


def test_epub_bad_input_raises_document_error(tmp_path) -> None:
    data = _epub(tmp_path)
    with pytest.raises(DocumentError, match="empty"):
        translate_file(b"", "epub", _reverse)
    with pytest.raises(DocumentError, match="(?i)not a (readable )?zip package"):
        translate_file(data[:100], "epub", _reverse)
    with pytest.raises(DocumentError, match="not an EPUB book"):
        translate_file(_odt(), "epub", _reverse)
    drm = _add_member(data, "META-INF/encryption.xml", (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
        b'<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
        b'<enc:CipherData><enc:CipherReference URI="EPUB/c1.xhtml"/></enc:CipherData>'
        b'</enc:EncryptedData></encryption>'))
    with pytest.raises(DocumentError, match="encrypted"):
        translate_file(drm, "epub", _reverse)
    missing = _replace_member(data, "EPUB/content.opf", zipfile.ZipFile(io.BytesIO(data)).read(
        "EPUB/content.opf").replace(b'href="c2.xhtml"', b'href="gone.xhtml"'))
    with pytest.raises(DocumentError, match="gone.xhtml"):
        translate_file(missing, "epub", _reverse)


def _add_member(data: bytes, name: str, content: bytes) -> bytes:
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a") as package:
        package.writestr(name, content)
    return out.getvalue()
