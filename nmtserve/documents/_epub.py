"""EPUB 2 and 3 e-books (.epub): each XHTML document a part in the "html" format, the book's
title and its table of contents too.

The package is read with ``zipfile`` and its XML with lxml; ebooklib is not used here.
ebooklib's writer does not copy a book: it writes the package document, the NCX and the
navigation document again from its own model, and each XHTML document from what it keeps of
it (a document read back comes out with an empty ``<head>``, its ``<title>`` gone); ebooklib
0.20 even fails to write a book it has just read (a table of contents entry read back has no
id). Here every member that is not translated is copied byte for byte. (The tests use ebooklib to build the books and to read the output back.)

Found through the OPF package document (``META-INF/container.xml`` names it): every XHTML
document of its manifest (``application/xhtml+xml``), those of the spine first, in reading
order, then the others, the navigation document (``properties="nav"``) among them. Each is
one part in the "html" format, which keeps every byte outside the translated sentences (the
XML declaration, the DOCTYPE, namespaces, self-closed tags) and escapes ``& < >`` in the
translated text, so an XHTML document stays well-formed XML: headings, paragraphs, list
items, table cells, the ``<title>`` in the head and the navigation document's entries are
translated, the HTML format's rules decide the rest (``code``, ``pre``, ``svg``, MathML and
``translate="no"`` stay as written, attribute values such as ``alt`` are not translated).
The package document's ``dc:title`` elements and the NCX's ``docTitle`` and ``navLabel``
texts (EPUB 2's table of contents) are "plain" parts. All go to the translator in one batch,
so a chapter's heading, its navigation entry and its NCX label, the same sentence, get the
same translation from a deterministic model.

Left as written: the other metadata (authors, subjects, the description), SVG documents in
the spine, images, style sheets, fonts. A book whose content documents are encrypted (DRM:
``META-INF/encryption.xml`` listing anything but fonts obfuscated by the IDPF or Adobe
algorithms) raises ``DocumentError``.

Writing: the ``mimetype`` member first and stored uncompressed (the OCF rule that lets a
reader recognise the file), the other members in their order, compressed as they were; each
XHTML document keeps its encoding (and byte-order mark).
"""

from __future__ import annotations

import codecs
import posixpath
import re
import zipfile
from dataclasses import dataclass
from urllib.parse import unquote

from lxml import etree

from ._core import DocumentError
from ._files import Extracted, Part
from ._package import open_package, parse_member, read_member, serialize, write_package, xml_text

_CONTAINER = "urn:oasis:names:tc:opendocument:xmlns:container"
_OPF = "http://www.idpf.org/2007/opf"
_DC = "http://purl.org/dc/elements/1.1/"
_NCX = "http://www.daisy.org/z3986/2005/ncx/"
_ENC = "http://www.w3.org/2001/04/xmlenc#"
_XHTML_TYPES = ("application/xhtml+xml", "text/html")
_NCX_TYPE = "application/x-dtbncx+xml"
# Font obfuscation (IDPF, Adobe): the only encryption a reader undoes without a key.
_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")
_DECLARED_ENCODING_RE = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


@dataclass(frozen=True)
class _Document:
    path: str
    encoding: str


def read(data: bytes, fmt: str) -> Extracted:
    package = open_package(data, fmt)
    names = set(package.namelist())
    if "mimetype" in names:
        media_type = read_member(package, "mimetype", fmt).decode("ascii", "replace").strip()
        if media_type != "application/epub+zip":
            raise DocumentError(f"the {fmt} file is not an EPUB book: its mimetype is {media_type!r}")
    if "META-INF/container.xml" not in names:
        raise DocumentError(f"the {fmt} file has no META-INF/container.xml: not an EPUB book")
    _refuse_encryption(package, names, fmt)
    opf_path = _package_document(package, fmt)
    if opf_path not in names:
        raise DocumentError(f"the {fmt} file's package document {opf_path} is missing")
    opf = parse_member(package, opf_path, fmt)
    base = posixpath.dirname(opf_path)
    items: dict[str, tuple[str, str]] = {}  # id: (path in the package, media type)
    for item in opf.iter(f"{{{_OPF}}}item"):
        href = item.get("href")
        if href is not None and "://" not in href:
            items[item.get("id", "")] = (posixpath.normpath(posixpath.join(base, unquote(href))),
                                         item.get("media-type", ""))
    spine = next(opf.iter(f"{{{_OPF}}}spine"), None)
    if spine is None:
        raise DocumentError(f"the {fmt} file's package document {opf_path} has no spine")
    order = [ref.get("idref", "") for ref in spine.iter(f"{{{_OPF}}}itemref")]
    order += [i for i in items if i not in order]
    paths = [items[i][0] for i in order if i in items and items[i][1] in _XHTML_TYPES]
    documents: list[_Document] = []
    parts: list[Part] = []
    for path in dict.fromkeys(paths):
        if path not in names:
            raise DocumentError(f"the {fmt} file's content document {path} (in its manifest) is missing")
        text, encoding = _decode(read_member(package, path, fmt), path, fmt)
        documents.append(_Document(path, encoding))
        parts.append(Part(text, "html"))

    toc = items.get(spine.get("toc", ""))
    ncx_path = toc[0] if toc else next((p for p, t in items.values() if t == _NCX_TYPE), None)
    ncx: tuple[str, etree._ElementTree] | None = None  # EPUB 2's table of contents (an EPUB 3 may have one)
    labels: list[etree._Element] = []
    if ncx_path is not None and ncx_path in names:
        ncx = ncx_path, parse_member(package, ncx_path, fmt)
        labels = [t for t in ncx[1].iter(f"{{{_NCX}}}text")
                  if t.getparent() is not None and t.getparent().tag in (f"{{{_NCX}}}docTitle", f"{{{_NCX}}}navLabel")
                  and _has_letters(t.text)]
    titles = [t for t in opf.iter(f"{{{_DC}}}title") if _has_letters(t.text)]
    parts += [Part(t.text or "", "plain") for t in labels + titles]

    def write(texts: list[str]) -> bytes:
        if len(texts) != len(parts):
            raise DocumentError(f"the {fmt} file has {len(parts)} texts, got {len(texts)}")
        replaced = {doc.path: xml_text(text).encode(doc.encoding, "xmlcharrefreplace")
                    for doc, text in zip(documents, texts, strict=False)}
        for element, text in zip(labels + titles, texts[len(documents):], strict=True):
            element.text = xml_text(text)
        if ncx is not None and labels:
            replaced[ncx[0]] = serialize(ncx[1])
        if titles:
            replaced[opf_path] = serialize(opf)
        return write_package(package, replaced)

    return Extracted(parts, write)


def _package_document(package: zipfile.ZipFile, fmt: str) -> str:
    container = parse_member(package, "META-INF/container.xml", fmt)
    rootfiles = [r for r in container.iter(f"{{{_CONTAINER}}}rootfile") if r.get("full-path")]
    preferred = [r for r in rootfiles if r.get("media-type") == "application/oebps-package+xml"]
    if not (preferred or rootfiles):
        raise DocumentError(f"the {fmt} file's META-INF/container.xml names no package document")
    return posixpath.normpath(unquote((preferred or rootfiles)[0].get("full-path")))


def _refuse_encryption(package: zipfile.ZipFile, names: set[str], fmt: str) -> None:
    if "META-INF/encryption.xml" not in names:
        return
    encryption = parse_member(package, "META-INF/encryption.xml", fmt)
    for data in encryption.iter(f"{{{_ENC}}}EncryptedData"):
        method = next(data.iter(f"{{{_ENC}}}EncryptionMethod"), None)
        algorithm = "" if method is None else method.get("Algorithm", "")
        if algorithm not in _OBFUSCATION:
            reference = next(data.iter(f"{{{_ENC}}}CipherReference"), None)
            uri = "" if reference is None else reference.get("URI", "")
            raise DocumentError(f"the {fmt} file is encrypted (DRM): META-INF/encryption.xml lists {uri or 'a member'} "
                                f"as encrypted with {algorithm or 'an unnamed algorithm'}")


def _decode(raw: bytes, path: str, fmt: str) -> tuple[str, str]:
    """An XHTML document's text and the encoding to write it back in (a byte-order mark kept)."""
    if raw.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        declared = _DECLARED_ENCODING_RE.match(raw)
        encoding = declared.group(1).decode("ascii").lower() if declared else "utf-8"
    try:
        return raw.decode(encoding), encoding
    except LookupError:
        raise DocumentError(f"the {fmt} file's {path} declares the unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as exc:
        raise DocumentError(f"the {fmt} file's {path} is not valid {encoding} ({exc.reason} at byte "
                            f"{exc.start})") from None


def _has_letters(text: str | None) -> bool:
    return any(c.isalpha() for c in text or "")
