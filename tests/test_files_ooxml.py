"""Office Open XML files (docx, pptx, xlsx) translated whole (nmtserve.documents._ooxml).

Proves, on files built with python-docx, python-pptx and openpyxl and read back with them: every
translatable text is translated (the fake translator upper-cases and reverses every word, so
any lowercase letter left in a translatable place is text that was not translated), including
headers, footers, tables, footnotes, comments, text boxes (both copies of an
``mc:AlternateContent``, from one translation), hyperlinks, fields' shown text, notes slides,
grouped shapes, shared and inline strings and cell comments; formatting stays on the right
words (bold, italic, hyperlinks); what is not text stays as it was (field codes, tabs,
breaks, footnote references, formulas, numbers, dates, sheet names, shared strings no cell
uses); a translation that lost or moved its placeholders still gives a whole file; the
identity translation gives the file back; the package keeps its members, their order and
their compression; bad input is a DocumentError that says what is wrong.
"""

from __future__ import annotations

import datetime
import io
import re
import zipfile

import docx
import openpyxl
import pptx
import pytest
from docx.oxml import parse_xml
from lxml import etree
from openpyxl.cell.rich_text import CellRichText, TextBlock
from openpyxl.cell.text import InlineFont
from openpyxl.comments import Comment
from openpyxl.worksheet.table import Table
from pptx.util import Inches

from nmtserve.documents._core import DocumentError
from nmtserve.documents._files import segment_file, translate_file

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NS = {"w": W, "a": "http://schemas.openxmlformats.org/drawingml/2006/main",
      "s": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
_TOKEN_RE = re.compile(r"</?g\d+>|<x\d+/>|[^\W\d_]+")


def _word(match: re.Match) -> str:
    token = match.group()
    return token if token.startswith("<") else token[::-1].upper()


def fake(sentences: list[str]) -> list[str]:
    """Every word reversed and upper-cased; placeholders kept where they are."""
    return [_TOKEN_RE.sub(_word, s) for s in sentences]


def mover(sentences: list[str]) -> list[str]:
    """``fake``, then every closing marker dropped (so every pair is lost) and every atomic
    placeholder moved to the front in reverse order: what a careless model does."""
    out = []
    for s in fake(sentences):
        atoms = re.findall(r"<x\d+/>", s)
        out.append("".join(reversed(atoms)) + re.sub(r"</g\d+>|<x\d+/>", "", s))
    return out


def t(text: str) -> str:
    """What ``fake`` makes of a text."""
    return _TOKEN_RE.sub(_word, text)


def _bytes(save) -> bytes:
    buffer = io.BytesIO()
    save(buffer)
    return buffer.getvalue()


def _add_part(data: bytes, main: str, name: str, xml: str, content_type: str, rel_type: str) -> bytes:
    """The package with one more part, declared in [Content_Types].xml and related from ``main``."""
    source = zipfile.ZipFile(io.BytesIO(data))
    rels = f"{main.rsplit('/', 1)[0]}/_rels/{main.rsplit('/', 1)[1]}.rels"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            content = source.read(info)
            if info.filename == "[Content_Types].xml":
                content = content.replace(b"</Types>", f'<Override PartName="/{name}" '
                                          f'ContentType="{content_type}"/></Types>'.encode())
            elif info.filename == rels:
                content = content.replace(b"</Relationships>", f'<Relationship Id="rIdX9" Type="{rel_type}" '
                                          f'Target="{name.rsplit("/", 1)[1]}"/></Relationships>'.encode())
            target.writestr(info.filename, content)
        target.writestr(name, xml)
    return out.getvalue()


def _member_xml(data: bytes, name: str) -> etree._Element:
    return etree.fromstring(zipfile.ZipFile(io.BytesIO(data)).read(name))


def _check_package(before: bytes, after: bytes) -> None:
    a, b = zipfile.ZipFile(io.BytesIO(before)), zipfile.ZipFile(io.BytesIO(after))
    assert b.testzip() is None
    assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
    assert [i.compress_type for i in a.infolist()] == [i.compress_type for i in b.infolist()]
    for info in b.infolist():  # a rewritten part keeps its XML declaration, or its lack of one
        old, new = a.read(info.filename), b.read(info)
        if new != old:
            declared = old.startswith(b"<?xml")
            assert new.startswith(b"<?xml version='1.0' encoding='UTF-8' standalone='yes'?>") == declared
            assert new.startswith(b"<?xml") == declared


# -- docx

_TEXT_BOX = (
    f'<w:r xmlns:w="{W}" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
    'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
    'xmlns:v="urn:schemas-microsoft-com:vml"><mc:AlternateContent>'
    '<mc:Choice Requires="wps"><w:drawing><wp:inline><wp:extent cx="100" cy="100"/><wp:docPr id="5" name="Box"/>'
    '<a:graphic><a:graphicData uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">'
    '<wps:wsp><wps:txbx><w:txbxContent><w:p><w:r><w:t>Boxed words inside</w:t></w:r></w:p></w:txbxContent>'
    '</wps:txbx><wps:bodyPr/></wps:wsp></a:graphicData></a:graphic></wp:inline></w:drawing></mc:Choice>'
    '<mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent><w:p><w:r><w:t>Boxed words inside</w:t></w:r>'
    '</w:p></w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r>'
)

_FOOTNOTES = (
    f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:footnotes xmlns:w="{W}">'
    '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
    '<w:footnote w:id="1"><w:p><w:r><w:rPr><w:vertAlign w:val="superscript"/></w:rPr><w:footnoteRef/></w:r>'
    '<w:r><w:t xml:space="preserve"> A footnote with </w:t></w:r><w:r><w:rPr><w:i/></w:rPr><w:t>slanted</w:t>'
    '</w:r><w:r><w:t xml:space="preserve"> words.</w:t></w:r></w:p></w:footnote></w:footnotes>')


def _hyperlink(paragraph, text: str, url: str) -> None:
    rid = paragraph.part.relate_to(url, docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    paragraph._p.append(parse_xml(
        f'<w:hyperlink xmlns:w="{W}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
        f'r:id="{rid}"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr><w:t>{text}</w:t></w:r></w:hyperlink>'))


def _complex_field(paragraph) -> None:
    for xml in ('<w:r><w:fldChar w:fldCharType="begin"/></w:r>',
                '<w:r><w:instrText xml:space="preserve"> HYPERLINK "https://example.org/field" </w:instrText></w:r>',
                '<w:r><w:fldChar w:fldCharType="separate"/></w:r>',
                '<w:r><w:rPr><w:u w:val="single"/></w:rPr><w:t>field result words</w:t></w:r>',
                '<w:r><w:fldChar w:fldCharType="end"/></w:r>'):
        paragraph._p.append(parse_xml(xml.replace("<w:r>", f'<w:r xmlns:w="{W}">', 1)))


def make_docx() -> bytes:
    d = docx.Document()
    d.add_heading("The title of things", level=1)
    p = d.add_paragraph("Plain start ")
    p.add_run("bold words").bold = True
    p.add_run(" then ")
    p.add_run("italic words").italic = True
    p.add_run(" and a ")
    _hyperlink(p, "link text here", "https://example.org/")
    p.add_run(" at the end.")
    tabbed = d.add_paragraph("Before tab")
    run = tabbed.add_run()
    run.add_tab()
    run.add_text("after tab")
    run.add_break()
    run.add_text("after break")
    fielded = d.add_paragraph("See ")
    _complex_field(fielded)
    fielded.add_run(" please, or ")
    fielded._p.append(parse_xml(f'<w:fldSimple xmlns:w="{W}" w:instr=" HYPERLINK &quot;https://example.org/simple&quot; ">'
                                f'<w:r><w:t>simple field words</w:t></w:r></w:fldSimple>'))
    note = d.add_paragraph("Noted claim")
    note._p.append(parse_xml(f'<w:r xmlns:w="{W}"><w:rPr><w:vertAlign w:val="superscript"/></w:rPr>'
                             f'<w:footnoteReference w:id="1"/></w:r>'))
    note.add_run(" continues here.")
    boxed = d.add_paragraph("Box anchor here ")
    boxed._p.append(parse_xml(_TEXT_BOX))
    controlled = d.add_paragraph("Marked ")
    controlled._p.extend(parse_xml(
        f'<w:x xmlns:w="{W}"><w:bookmarkStart w:id="7" w:name="mark"/><w:r><w:t>bookmarked words</w:t></w:r>'
        '<w:bookmarkEnd w:id="7"/><w:r><w:t xml:space="preserve"> and </w:t></w:r><w:sdt><w:sdtPr>'
        '<w:alias w:val="Box"/></w:sdtPr><w:sdtContent><w:r><w:t>controlled words</w:t></w:r></w:sdtContent>'
        '</w:sdt></w:x>'))
    table = d.add_table(rows=2, cols=2)
    for i, cell in enumerate(table._cells):
        cell.text = f"cell number {i} text"
    commented = d.add_paragraph("Commented sentence here.")
    d.add_comment(commented.runs, text="A remark about it", author="Ann", initials="A")
    section = d.sections[0]
    section.header.paragraphs[0].text = "Header words"
    section.footer.paragraphs[0].text = "Footer words"
    section.footer.paragraphs[0]._p.append(parse_xml(
        f'<w:fldSimple xmlns:w="{W}" w:instr=" PAGE "><w:r><w:t>1</w:t></w:r></w:fldSimple>'))
    data = _bytes(d.save)
    return _add_part(data, "word/document.xml", "word/footnotes.xml", _FOOTNOTES,
                     "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml",
                     "http://schemas.openxmlformats.org/officeDocument/2006/relationships/footnotes")


DOCX = make_docx()


def _docx_texts(data: bytes) -> list[str]:
    """The text of every w:t of every part that holds text."""
    z = zipfile.ZipFile(io.BytesIO(data))
    texts = []
    for name in z.namelist():
        if re.fullmatch(r"word/(document|header\d*|footer\d*|footnotes|comments)\.xml", name):
            texts += [e.text or "" for e in etree.fromstring(z.read(name)).iter(f"{{{W}}}t")]
    return texts


def test_docx_every_text_is_translated():
    sentences = segment_file(DOCX, "docx").sentences
    assert sum("Boxed words inside" in s for s in sentences) == 1  # the fallback copy follows the choice
    out = translate_file(DOCX, "docx", fake)
    _check_package(DOCX, out)
    texts = _docx_texts(out)
    assert texts and not [s for s in texts if re.search("[a-z]", s)], texts
    d = docx.Document(io.BytesIO(out))
    body = [p.text for p in d.paragraphs]
    assert t("The title of things") in body
    assert d.paragraphs[0].style.name == "Heading 1"
    assert d.sections[0].header.paragraphs[0].text == t("Header words")
    assert d.sections[0].footer.paragraphs[0].text.startswith(t("Footer words"))
    assert [c.text for c in d.tables[0]._cells] == [t(f"cell number {i} text") for i in range(4)]
    assert [p.text for c in d.comments for p in c.paragraphs] == [t("A remark about it")]
    assert len(d.comments) == 1


def test_docx_formatting_stays_on_its_words():
    d = docx.Document(io.BytesIO(translate_file(DOCX, "docx", fake)))
    p = d.paragraphs[1]
    runs = [(r.text, r.bold, r.italic) for r in p.runs]
    assert (t("bold words"), True, None) in runs
    assert (t("italic words"), None, True) in runs
    assert p.text.startswith(t("Plain start"))
    links = p.hyperlinks
    assert [(h.text, h.url) for h in links] == [(t("link text here"), "https://example.org/")]
    assert links[0].runs[0]._r.style == "Hyperlink"


def test_docx_atomic_content_stays():
    out = translate_file(DOCX, "docx", fake)
    doc = _member_xml(out, "word/document.xml")
    assert len(doc.findall(".//w:tab", NS)) == 1 and len(doc.findall(".//w:br", NS)) == 1
    instr = doc.findall(".//w:instrText", NS)
    assert [i.text for i in instr] == [' HYPERLINK "https://example.org/field" ']
    kinds = [c.get(f"{{{W}}}fldCharType") for c in doc.iter(f"{{{W}}}fldChar")]
    assert kinds == ["begin", "separate", "end"]
    assert t("field result words") in "".join(e.text for e in doc.iter(f"{{{W}}}t"))
    simple = doc.findall(".//w:fldSimple", NS)
    assert [(f.get(f"{{{W}}}instr"), "".join(f.itertext())) for f in simple] == [
        (' HYPERLINK "https://example.org/simple" ', t("simple field words"))]
    assert len(doc.findall(".//w:footnoteReference", NS)) == 1
    boxes = ["".join(x.itertext()) for x in doc.iter(f"{{{W}}}txbxContent")]
    assert boxes == [t("Boxed words inside")] * 2
    notes = _member_xml(out, "word/footnotes.xml")
    assert len(notes.findall(".//w:footnoteRef", NS)) == 1 and len(notes.findall(".//w:separator", NS)) == 1
    assert "".join(notes.itertext()) == t(" A footnote with slanted words.")
    italic = [r for r in notes.iter(f"{{{W}}}r") if r.find("w:rPr/w:i", NS) is not None]
    assert ["".join(r.itertext()) for r in italic] == [t("slanted")]
    marked = doc.xpath("//w:p[w:bookmarkStart]", namespaces=NS)[0]
    assert [etree.QName(c).localname for c in marked] == ["r", "bookmarkStart", "r", "bookmarkEnd", "r", "sdt"]
    assert marked.find("w:sdt/w:sdtPr/w:alias", NS).get(f"{{{W}}}val") == "Box"
    assert "".join(marked.find("w:sdt/w:sdtContent", NS).itertext()) == t("controlled words")
    footer = next(_member_xml(out, n) for n in zipfile.ZipFile(io.BytesIO(out)).namelist() if "footer" in n)
    assert footer.find(".//w:fldSimple", NS).get(f"{{{W}}}instr") == " PAGE "


def test_docx_damaged_placeholders_still_give_a_whole_file():
    out = translate_file(DOCX, "docx", mover)
    texts = _docx_texts(out)
    assert not [s for s in texts if re.search("[a-z]", s)], texts
    doc = _member_xml(out, "word/document.xml")
    kinds = [c.get(f"{{{W}}}fldCharType") for c in doc.iter(f"{{{W}}}fldChar")]
    assert kinds == ["begin", "separate", "end"]  # the end moved before its begin is put back after it
    marked = doc.xpath("//w:p[w:bookmarkStart]", namespaces=NS)[0]
    names = [etree.QName(c).localname for c in marked]
    assert names.index("bookmarkStart") < names.index("bookmarkEnd")
    for name in ("tab", "br", "footnoteReference", "instrText", "drawing", "pict"):
        assert len(doc.findall(f".//w:{name}", NS)) == 1, name
    d = docx.Document(io.BytesIO(out))
    assert t("bold words") in d.paragraphs[1].text


def test_docx_identity_gives_the_same_file():
    out = translate_file(DOCX, "docx", lambda s: list(s))
    a, b = zipfile.ZipFile(io.BytesIO(DOCX)), zipfile.ZipFile(io.BytesIO(out))
    assert all(a.read(n) == b.read(n) for n in a.namelist())


def test_docx_runs_of_one_format_merge():
    d = docx.Document()
    p = d.add_paragraph()
    for word in ("one ", "two ", "three"):
        p.add_run(word).bold = True
    p.add_run(" plain tail")
    data = _bytes(d.save)
    assert segment_file(data, "docx").sentences == ["one two three<g1> plain tail</g1>"]  # most text: plain
    out = docx.Document(io.BytesIO(translate_file(data, "docx", fake)))
    assert [(r.text, r.bold) for r in out.paragraphs[0].runs] == [(t("one two three"), True), (t(" plain tail"), None)]


def test_docx_tracked_changes_are_refused():
    d = docx.Document()
    p = d.add_paragraph("Kept text ")
    p._p.append(parse_xml(f'<w:ins xmlns:w="{W}" w:id="1" w:author="A"><w:r><w:t>inserted</w:t></w:r></w:ins>'))
    with pytest.raises(DocumentError, match="tracked changes"):
        segment_file(_bytes(d.save), "docx")


def test_docx_alternate_runs_and_ruby_are_translated():
    d = docx.Document()
    p = d.add_paragraph("Start words ")
    p._p.append(parse_xml(
        f'<mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
        f'xmlns:w="{W}"><mc:Choice Requires="w14"><w:r><w:t>fancy words</w:t></w:r></mc:Choice>'
        f'<mc:Fallback><w:r><w:t>fancy words</w:t></w:r></mc:Fallback></mc:AlternateContent>'))
    p._p.append(parse_xml(
        f'<w:r xmlns:w="{W}"><w:ruby><w:rubyPr/><w:rt><w:r><w:t>guide</w:t></w:r></w:rt>'
        f'<w:rubyBase><w:r><w:t> based words</w:t></w:r></w:rubyBase></w:ruby></w:r>'))
    out = docx.Document(io.BytesIO(translate_file(_bytes(d.save), "docx", fake)))
    assert out.paragraphs[0].text == t("Start words fancy words based words")
    assert "AlternateContent" not in out.paragraphs[0]._p.xml and "ruby" not in out.paragraphs[0]._p.xml


def test_docx_text_out_of_reach_is_refused():
    d = docx.Document()
    d.add_paragraph("Visible words ")._p.append(parse_xml(
        f'<w:oddity xmlns:w="{W}"><w:r><w:t>hidden words</w:t></w:r></w:oddity>'))
    with pytest.raises(DocumentError, match=r"word/document.xml has text inside <oddity>.*'hidden words'"):
        segment_file(_bytes(d.save), "docx")


def test_strict_open_xml_is_refused():
    source = zipfile.ZipFile(io.BytesIO(DOCX))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            content = source.read(info)
            if info.filename == "word/document.xml":
                content = content.replace(W.encode(), b"http://purl.oclc.org/ooxml/wordprocessingml/main")
            target.writestr(info, content)
    with pytest.raises(DocumentError, match="Strict Open XML"):
        segment_file(out.getvalue(), "docx")


# -- pptx

def make_pptx() -> bytes:
    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Slide title words"
    body = slide.placeholders[1].text_frame
    body.text = "First point here"
    para = body.add_paragraph()
    para.add_run().text = "Second "
    bold = para.add_run()
    bold.text = "strong words"
    bold.font.bold = True
    linked = para.add_run()
    linked.text = " linked words"
    linked.hyperlink.address = "https://example.org/"
    broken = body.add_paragraph()
    broken.text = "Line one\vline two"
    broken._p.append(parse_xml('<a:fld xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
                               'id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}" type="slidenum"><a:rPr/>'
                               '<a:t>2</a:t></a:fld>'))
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    for i, cell in enumerate(table.iter_cells()):
        cell.text = f"table cell {i}"
    group = slide.shapes.add_group_shape()
    box = group.shapes.add_textbox(Inches(5), Inches(5), Inches(2), Inches(1))
    box.text_frame.text = "Grouped box text"
    slide.notes_slide.notes_text_frame.text = "Speaker notes words"
    return _bytes(prs.save)


PPTX = make_pptx()


def _pptx_texts(prs) -> list[str]:
    texts = []
    for slide in prs.slides:
        shapes = list(slide.shapes)
        while shapes:
            shape = shapes.pop()
            if shape.shape_type == pptx.enum.shapes.MSO_SHAPE_TYPE.GROUP:
                shapes += list(shape.shapes)
            elif shape.has_text_frame:
                texts.append(shape.text_frame.text)
            elif getattr(shape, "has_table", False):
                texts += [c.text for c in shape.table.iter_cells()]
        texts.append(slide.notes_slide.notes_text_frame.text)
    return texts


def test_pptx_every_text_is_translated_with_its_formatting():
    out = translate_file(PPTX, "pptx", fake)
    _check_package(PPTX, out)
    prs = pptx.Presentation(io.BytesIO(out))
    texts = _pptx_texts(prs)
    assert len(texts) == 8 and not [s for s in texts if re.search("[a-z]", s)], texts
    slide = prs.slides[0]
    assert slide.shapes.title.text == t("Slide title words")
    second = slide.placeholders[1].text_frame.paragraphs[1]
    runs = [(r.text, r.font.bold, r.hyperlink.address) for r in second.runs]
    assert (t("strong words"), True, None) in runs
    assert (t(" linked words"), None, "https://example.org/") in runs
    third = slide.placeholders[1].text_frame.paragraphs[2]._p
    assert len(third.findall("a:br", NS)) == 1 and third.find("a:fld", NS).get("type") == "slidenum"
    assert third.find("a:fld/a:t", NS).text == "2"
    assert slide.notes_slide.notes_text_frame.text == t("Speaker notes words")
    a, b = zipfile.ZipFile(io.BytesIO(PPTX)), zipfile.ZipFile(io.BytesIO(out))
    changed = [n for n in a.namelist() if a.read(n) != b.read(n)]
    assert changed == ["ppt/slides/slide1.xml", "ppt/notesSlides/notesSlide1.xml"]  # layouts, masters: left


def test_pptx_damaged_placeholders_and_identity():
    out = pptx.Presentation(io.BytesIO(translate_file(PPTX, "pptx", mover)))
    texts = _pptx_texts(out)
    assert not [s for s in texts if re.search("[a-z]", s)], texts
    third = out.slides[0].placeholders[1].text_frame.paragraphs[2]._p
    assert len(third.findall("a:br", NS)) == 1 and len(third.findall("a:fld", NS)) == 1
    same = translate_file(PPTX, "pptx", lambda s: list(s))
    a, b = zipfile.ZipFile(io.BytesIO(PPTX)), zipfile.ZipFile(io.BytesIO(same))
    assert all(a.read(n) == b.read(n) for n in a.namelist())


# -- xlsx

def make_xlsx() -> bytes:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Data sheet"
    ws["A1"] = "Plain cell words"
    ws["A2"] = 42
    ws["A3"] = 3.5
    ws["A4"] = datetime.date(2024, 5, 6)
    ws["A5"] = True
    ws["A6"] = "=SUM(A2:A3)"
    ws["A7"] = "='Data sheet'!A1"
    ws["B1"] = CellRichText(["Rich ", TextBlock(InlineFont(b=True), "bold part"), " end"])
    ws["B2"] = "First line\nsecond line"
    ws["B3"] = "Inline cell words"
    ws["B4"] = "12345"
    ws["A1"].comment = Comment("Comment words here", "Ann")
    other = wb.create_sheet("Other sheet")
    other["A1"] = "Plain cell words"
    listed = wb.create_sheet("Table sheet")
    for row in (["Fruit name", "Price"], ["apple", 3], ["pear", 4]):
        listed.append(row)
    listed["D1"] = "=SUM(Fruits[Price])"
    listed.add_table(Table(displayName="Fruits", ref="A1:B3"))
    return _shared(_bytes(wb.save))


def _shared(data: bytes) -> bytes:
    """openpyxl writes every string inline: move them but B3's to xl/sharedStrings.xml, as Excel
    does, and add a shared string no cell uses."""
    source = zipfile.ZipFile(io.BytesIO(data))
    sst = etree.Element(f"{{{NS['s']}}}sst", nsmap={None: NS["s"]})
    sheets = {}
    for name in source.namelist():
        if name.startswith("xl/worksheets/sheet"):
            sheets[name] = root = etree.fromstring(source.read(name))
            for c in root.iter(f"{{{NS['s']}}}c"):
                if c.get("t") == "inlineStr" and c.get("r") != "B3":
                    si = c.find("s:is", NS)
                    si.tag = f"{{{NS['s']}}}si"
                    sst.append(si)
                    c.set("t", "s")
                    etree.SubElement(c, f"{{{NS['s']}}}v").text = str(len(sst) - 1)
    etree.SubElement(etree.SubElement(sst, f"{{{NS['s']}}}si"), f"{{{NS['s']}}}t").text = "unused string"
    shared = etree.tostring(sst, xml_declaration=True, encoding="UTF-8", standalone=True)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            content = source.read(info)
            if info.filename in sheets:
                content = etree.tostring(sheets[info.filename])
            elif info.filename == "[Content_Types].xml" and b"sharedStrings" not in content:
                content = content.replace(b"</Types>", b'<Override PartName="/xl/sharedStrings.xml" ContentType="'
                                          b'application/vnd.openxmlformats-officedocument.spreadsheetml.'
                                          b'sharedStrings+xml"/></Types>')
            elif info.filename == "xl/_rels/workbook.xml.rels" and b"sharedStrings" not in content:
                content = content.replace(b"</Relationships>", b'<Relationship Id="rIdS" Type="http://schemas.'
                                          b'openxmlformats.org/officeDocument/2006/relationships/sharedStrings" '
                                          b'Target="sharedStrings.xml"/></Relationships>')
            if info.filename != "xl/sharedStrings.xml":
                target.writestr(info, content)
        target.writestr("xl/sharedStrings.xml", shared)
    return out.getvalue()


XLSX = make_xlsx()


def test_xlsx_text_cells_are_translated_and_the_rest_kept():
    out = translate_file(XLSX, "xlsx", fake)
    _check_package(XLSX, out)
    wb = openpyxl.load_workbook(io.BytesIO(out), rich_text=True)
    assert wb.sheetnames == ["Data sheet", "Other sheet", "Table sheet"]
    ws = wb["Data sheet"]
    assert ws["A1"].value == t("Plain cell words") and wb["Other sheet"]["A1"].value == t("Plain cell words")
    assert (ws["A2"].value, ws["A3"].value, ws["A5"].value) == (42, 3.5, True)
    assert ws["A4"].value == datetime.datetime(2024, 5, 6)
    assert (ws["A6"].value, ws["A7"].value) == ("=SUM(A2:A3)", "='Data sheet'!A1")
    rich = ws["B1"].value
    assert isinstance(rich, CellRichText) and str(rich) == t("Rich bold part end")
    bold = [b.text for b in rich if isinstance(b, TextBlock) and b.font.b]
    assert bold == [t("bold part")]
    assert ws["B2"].value == t("First line") + "\n" + t("second line")
    assert ws["B3"].value == t("Inline cell words")
    assert ws["B4"].value == "12345"
    assert ws["A1"].comment.text == t("Comment words here")
    listed = wb["Table sheet"]
    assert [c.value for c in listed["A"][:3]] == [t("Fruit name"), t("apple"), t("pear")]
    assert listed["D1"].value == f"=SUM(Fruits[{t('Price')}])"  # the structured reference follows the column
    columns = [c.name for c in listed.tables["Fruits"].tableColumns]
    assert columns == [t("Fruit name"), t("Price")]  # Excel wants a table's column named as its header cell
    strings = _member_xml(out, "xl/sharedStrings.xml")
    assert strings.findall("s:si", NS)[-1].find("s:t", NS).text == "unused string"


def test_xlsx_damaged_placeholders_and_identity():
    wb = openpyxl.load_workbook(io.BytesIO(translate_file(XLSX, "xlsx", mover)))
    assert wb["Data sheet"]["B1"].value == t("Rich bold part end")
    same = translate_file(XLSX, "xlsx", lambda s: list(s))
    a, b = zipfile.ZipFile(io.BytesIO(XLSX)), zipfile.ZipFile(io.BytesIO(same))
    assert all(a.read(n) == b.read(n) for n in a.namelist())


# -- bad input

@pytest.mark.parametrize(("data", "fmt", "message"), [
    (b"", "docx", "empty"),
    (b"plain text, no zip", "docx", "not a ZIP package"),
    (DOCX[: len(DOCX) // 2], "docx", "(?i)not a (readable )?zip package"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100, "xlsx", "password-protected"),
    (XLSX, "docx", r"not a Word document: it is an Excel workbook \(xlsx\)"),
    (DOCX, "pptx", "not a PowerPoint presentation: it is a Word document"),
    (PPTX, "xlsx", "not an Excel workbook: it is a PowerPoint presentation"),
])
def test_bad_input_is_a_clear_error(data, fmt, message):
    with pytest.raises(DocumentError, match=message):
        segment_file(data, fmt)


def test_a_zip_that_is_no_office_package_is_refused():
    data = _bytes(lambda b: zipfile.ZipFile(b, "w").writestr("a.txt", "hello"))
    with pytest.raises(DocumentError, match=r"no \[Content_Types\]\.xml"):
        segment_file(data, "docx")


def test_damaged_xml_is_refused():
    source = zipfile.ZipFile(io.BytesIO(DOCX))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            content = source.read(info)
            target.writestr(info, content[:-20] if info.filename == "word/document.xml" else content)
    with pytest.raises(DocumentError, match="word/document.xml is not well-formed XML"):
        segment_file(out.getvalue(), "docx")


# -- any fragment of a paragraph's own elements is written back

@pytest.mark.parametrize("fmt", ["docx", "pptx", "xlsx"])
def test_any_fragment_of_own_elements_gives_a_whole_file(fmt):
    from nmtserve.documents._ooxml import read

    data = {"docx": DOCX, "pptx": PPTX, "xlsx": XLSX}[fmt]
    extracted = read(data, fmt)
    texts = []
    for part in extracted.parts:
        names = re.findall(r"<([a-z]\d+)", part.text)
        pairs = [n for n in names if not n.startswith("x")]
        atoms = [n for n in names if n.startswith("x")]
        # pairs nested the other way round and repeated, atoms repeated and out of order, a stranger
        inner = "Q".join(f"<{n}>W" for n in reversed(pairs)) + "".join(f"</{n}>" for n in pairs)
        texts.append(f"<zz>Z</zz>{''.join(f'<{a}/>' for a in atoms[::-1] * 2)} {inner} "
                     f"{''.join(f'<{n}>V</{n}>' for n in pairs)} &amp; K")
    out = extracted.write(texts)
    _check_package(data, out)
    before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(out))
    for name in after.namelist():
        if name.endswith(".xml"):
            old, new = etree.fromstring(before.read(name)), etree.fromstring(after.read(name))
            for tag in ("tab", "br", "fldChar", "instrText", "footnoteReference", "footnoteRef", "drawing", "pict",
                        "commentReference", "fldSimple", "bookmarkStart", "fld"):
                assert len(new.findall(f".//{{*}}{tag}")) == len(old.findall(f".//{{*}}{tag}")), (name, tag)
    if fmt == "docx":
        texts = _docx_texts(out)
        assert texts and not [s for s in texts if re.search("[a-z]", s)], texts
        docx.Document(io.BytesIO(out))
    elif fmt == "pptx":
        texts = _pptx_texts(pptx.Presentation(io.BytesIO(out)))
        assert not [s for s in texts if re.search("[a-z]", s)], texts
    else:
        wb = openpyxl.load_workbook(io.BytesIO(out))
        assert wb["Data sheet"]["A1"].value.endswith("& K")
