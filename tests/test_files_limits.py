"""What a file may not do to the server: the limits of nmtserve.documents._files and the family
modules, each refused with a DocumentError that names it, before anything is translated.

Zip bombs (unpacked size, member count), XML entity expansion (billion laughs) and external
entities (XXE: nothing is fetched or read from the disk), paths that climb out of an archive
(EPUB's manifest), and a text over the document limit.
"""

from __future__ import annotations

import io
import zipfile

import pytest

from nmtserve.documents._core import DocumentError
from nmtserve.documents._files import MAX_MEMBERS, MAX_UNPACKED_BYTES, segment_file


def docx_bytes(body: str = "<w:p><w:r><w:t>I have three red apples.</w:t></w:r></w:p>", *,
               prolog: str = "", extra: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>
<Default Extension="xml" ContentType="application/xml"/>
<Override PartName="/word/document.xml"
 ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>
</Types>""")
        z.writestr("_rels/.rels", """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
 Target="word/document.xml"/></Relationships>""")
        z.writestr("word/document.xml", f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>{prolog}
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body>
</w:document>""")
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return out.getvalue()


def test_the_minimal_package_reads():
    assert segment_file(docx_bytes(), "docx").sentences == ["I have three red apples."]


def test_a_zip_bomb_is_refused_before_it_is_unpacked():
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"")
        info = zipfile.ZipInfo("word/media/zeros.bin")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            chunk = bytes(16 * 1024 * 1024)
            for _ in range(MAX_UNPACKED_BYTES // len(chunk) + 1):
                f.write(chunk)
    assert len(bomb.getvalue()) < 2_000_000  # ~0.5 GB of zeros in under 2 MB
    with pytest.raises(DocumentError, match=r"the docx file unpacks to [\d,]+ bytes, more than 536,870,912"):
        segment_file(bomb.getvalue(), "docx")


def test_a_package_of_too_many_members_is_refused():
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w", zipfile.ZIP_STORED) as z:
        for i in range(MAX_MEMBERS + 1):
            z.writestr(f"m/{i}", b"")
    with pytest.raises(DocumentError, match=r"holds 20,001 members, more than 20,000"):
        segment_file(many.getvalue(), "odt")


LAUGHS = """<!DOCTYPE w:document [
<!ENTITY a "hahahahahahahahahahahahahahahahahahahahahahahahahahaha">
<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
<!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
]>"""


def test_entities_are_never_expanded_nor_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret words", encoding="utf-8")
    laughs = docx_bytes("<w:p><w:r><w:t>Laugh &e; now.</w:t></w:r></w:p>", prolog=LAUGHS)
    xxe = docx_bytes("<w:p><w:r><w:t>Read &x; now.</w:t></w:r></w:p>",
                     prolog=f'<!DOCTYPE w:document [<!ENTITY x SYSTEM "file://{secret}">]>')
    for data in (laughs, xxe):
        try:
            sentences = segment_file(data, "docx").sentences
        except DocumentError:
            continue  # refused: fine
        text = " ".join(sentences)
        assert "haha" not in text and "secret" not in text, text


def test_xliff_entities_are_never_expanded_nor_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret words", encoding="utf-8")
    for prolog, body in ((LAUGHS.replace("w:document", "xliff"), "&e;"),
                         (f'<!DOCTYPE xliff [<!ENTITY x SYSTEM "file://{secret}">]>', "&x;")):
        data = f"""<?xml version="1.0"?>{prolog}<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
<file source-language="en" datatype="plaintext" original="a"><body>
<trans-unit id="1"><source>Read {body} now.</source></trans-unit></body></file></xliff>""".encode()
        try:
            sentences = segment_file(data, "xliff").sentences
        except DocumentError:
            continue
        assert "haha" not in " ".join(sentences) and "secret" not in " ".join(sentences)


def test_an_epub_path_that_climbs_out_of_the_archive_reads_nothing_outside_it(tmp_path):
    outside = tmp_path / "outside.xhtml"
    outside.write_text("<html><body><p>Words from the disk.</p></body></html>", encoding="utf-8")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        z.writestr("META-INF/container.xml", """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>
<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>""")
        z.writestr("OEBPS/content.opf", f"""<?xml version="1.0"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">x</dc:identifier>
<dc:title>T</dc:title></metadata>
<manifest><item id="c" href="../../../../../..{outside}" media-type="application/xhtml+xml"/></manifest>
<spine><itemref idref="c"/></spine></package>""")
    with pytest.raises(DocumentError, match="epub"):
        segment_file(out.getvalue(), "epub")


def test_a_file_over_the_text_limit_is_refused():
    body = "".join(f"<w:p><w:r><w:t>Sentence number {i} is here.</w:t></w:r></w:p>" for i in range(100))
    with pytest.raises(DocumentError, match=r"the docx file holds [\d,]+ characters of text, more than the limit of 1,000"):
        segment_file(docx_bytes(body), "docx", max_chars=1000)
