"""OpenDocument text, presentation and spreadsheet files (.odt, .odp, .ods): every paragraph a part.

The package is read with ``zipfile`` and its XML with lxml; odfpy is not used here. odfpy
loads a whole document into its own element classes and saves it by writing every member
again (its own manifest, its own serialization of each XML file, members it does not model
dropped), while a translated file should differ from the input only in its text: lxml edits
``content.xml`` and ``styles.xml`` in place (every element, attribute and namespace kept) and
every other member is copied byte for byte. (The tests use odfpy to build the files and to
read the output back, as an independent reader.)

Translated: every ``text:p`` and ``text:h`` of every ``content.xml`` and ``styles.xml`` in the
package (embedded objects such as charts have their own): body text, headings, lists, table
cells, text boxes and shapes (``draw:frame``/``draw:text-box``, ``draw:custom-shape``), slides
and their presentation notes, headers and footers (master pages in ``styles.xml``), the
paragraphs of footnotes, endnotes and comments. Each paragraph is one part: an XML fragment
whose text is the paragraph's text and whose elements stand for its inline markup.
``text:span``, ``text:a``, ``text:meta`` and ``text:ruby`` (with its base and text) are pairs
around their text and are rebuilt with their attributes (style name, link target); adjacent
spans of the same attributes are merged into one. Every other element inside a paragraph is
atomic and put back as it was: tabs, line breaks, soft page breaks, bookmarks and reference
marks, fields (``text:date``, ``text:page-number``, ``text:sequence``..., whose text the
application computes), images and frames, and notes and comments (``text:note``,
``office:annotation``: the citation or anchor stays in the paragraph, the paragraphs of the
note's body are parts of their own). Spaces follow the ODF rules: runs of white space in the
XML are one space, ``text:s`` stands for its count of spaces, and the output writes a space
that would otherwise collapse (a second one, one at the start of a paragraph) as ``text:s``.

Spreadsheets: only string cells are translated (``office:value-type="string"``, or no value
type as in a text document's tables); numbers, dates, booleans and formulas
(``table:formula``, whose shown text is a result) are left untouched, and a translated
cell's ``office:string-value``, when it has one, is set to its new text. Sheet names are not
translated: formulas and links refer to sheets by name. Also left as written: attribute
values (alternative text, slide and object names), document metadata (``meta.xml``), and
text that is no paragraph (an index's title template, a chart's data labels from cells).

Writing: the ``mimetype`` member first and stored uncompressed, as the ODF specification
requires; the other members in their order, each rewritten XML compressed as it was.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field

from lxml import etree

from ._core import DocumentError
from ._files import Extracted, Part
from ._package import PARSER as _PARSER
from ._package import open_package, parse_member, read_member, serialize, write_package, xml_text
from ._xml import XmlRules

_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_MANIFEST = "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"

_PARAGRAPHS = (f"{{{_TEXT}}}p", f"{{{_TEXT}}}h")
_SPACE = f"{{{_TEXT}}}s"
_COUNT = f"{{{_TEXT}}}c"
_PAIRS = frozenset(f"{{{_TEXT}}}{name}" for name in ("span", "a", "meta", "ruby", "ruby-base", "ruby-text"))
_CELLS = (f"{{{_TABLE}}}table-cell", f"{{{_TABLE}}}covered-table-cell")
_VALUE_TYPE = f"{{{_OFFICE}}}value-type"
_STRING_VALUE = f"{{{_OFFICE}}}string-value"
_FORMULA = f"{{{_TABLE}}}formula"
_SHOWN_AS = {f"{{{_TEXT}}}tab": "\t", f"{{{_TEXT}}}line-break": "\n"}
_NOT_SHOWN = frozenset((f"{{{_TEXT}}}note", f"{{{_OFFICE}}}annotation"))

_MEDIA_TYPES = {
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
}
_KINDS = {"text": "an OpenDocument text", "presentation": "an OpenDocument presentation",
          "spreadsheet": "an OpenDocument spreadsheet", "graphics": "an OpenDocument drawing",
          "formula": "an OpenDocument formula", "chart": "an OpenDocument chart"}
_RULES = XmlRules(outline_detection=False)  # every element of a fragment is inline markup
_XML_SPACE_RE = re.compile(r"[ \t\r\n]+")
_SPACES_RE = re.compile(r" +|[^ ]+")


# -- reading

def read(data: bytes, fmt: str) -> Extracted:
    if fmt not in _MEDIA_TYPES:
        raise DocumentError(f"unknown OpenDocument format {fmt!r}: expected one of {', '.join(_MEDIA_TYPES)}")
    package = open_package(data, fmt)
    _check_package(package, fmt)
    names = [n for n in package.namelist() if n.rsplit("/", 1)[-1] in ("content.xml", "styles.xml")]
    if "content.xml" not in names:
        raise DocumentError(f"the {fmt} file has no content.xml: not an OpenDocument package")
    trees: dict[str, etree._ElementTree] = {}
    paragraphs: list[_Paragraph] = []
    for name in dict.fromkeys(names):
        tree = trees[name] = parse_member(package, name, fmt)
        for p in tree.iter(*_PARAGRAPHS):
            if _computed(p):
                continue
            paragraph = _paragraph(p)
            if paragraph is not None:
                paragraphs.append(paragraph)

    def write(texts: list[str]) -> bytes:
        if len(texts) != len(paragraphs):
            raise DocumentError(f"the {fmt} file has {len(paragraphs)} texts, got {len(texts)}")
        cells = {}
        for paragraph, text in zip(paragraphs, texts, strict=True):
            _rebuild(paragraph, text, fmt)
            parent = paragraph.element.getparent()
            if parent is not None and parent.tag in _CELLS and parent.get(_STRING_VALUE) is not None:
                cells[id(parent)] = parent
        for cell in cells.values():
            cell.set(_STRING_VALUE, "\n".join(_shown(p) for p in cell if p.tag in _PARAGRAPHS))
        return write_package(package, {name: serialize(tree) for name, tree in trees.items()})

    return Extracted([Part(p.text, "xml", _RULES) for p in paragraphs], write)


def _check_package(package: zipfile.ZipFile, fmt: str) -> None:
    expected = _MEDIA_TYPES[fmt]
    manifest = None
    if "META-INF/manifest.xml" in package.namelist():
        manifest = parse_member(package, "META-INF/manifest.xml", fmt)
        if next(manifest.iter(f"{{{_MANIFEST}}}encryption-data"), None) is not None:
            raise DocumentError(f"the {fmt} file is encrypted (saved with a password): it cannot be read")
    if "mimetype" in package.namelist():
        media_type = read_member(package, "mimetype", fmt).decode("ascii", "replace").strip()
    elif manifest is not None:
        root = next((e for e in manifest.iter(f"{{{_MANIFEST}}}file-entry")
                     if e.get(f"{{{_MANIFEST}}}full-path") == "/"), None)
        media_type = "" if root is None else root.get(f"{{{_MANIFEST}}}media-type", "")
    else:
        raise DocumentError(f"the {fmt} file has neither a mimetype nor a manifest: not an OpenDocument package")
    if media_type == expected or media_type.startswith(expected + "-"):  # templates, master documents
        return
    if media_type.startswith("application/vnd.oasis.opendocument."):
        kind = media_type.rsplit(".", 1)[-1].split("-")[0]
        raise DocumentError(f"the {fmt} file is {_KINDS.get(kind, media_type)} ({media_type}), not "
                            f"{_KINDS[expected.rsplit('.', 1)[-1]]}")
    raise DocumentError(f"the {fmt} file is not an OpenDocument package (its media type is {media_type!r})")


def _computed(p: etree._Element) -> bool:
    """A spreadsheet cell's paragraph that shows a value or a formula's result, not text."""
    cell = p.getparent()
    if cell is None or cell.tag not in _CELLS:
        return False
    return cell.get(_VALUE_TYPE, "string") != "string" or cell.get(_FORMULA) is not None


@dataclass
class _Paragraph:
    element: etree._Element
    text: str = ""  # the fragment
    shells: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)  # pair name: tag, attributes
    atoms: dict[str, etree._Element] = field(default_factory=dict)  # atom name: the original element


def _paragraph(p: etree._Element) -> _Paragraph | None:
    """The paragraph as a fragment, or None when it holds no letter."""
    paragraph = _Paragraph(p)
    names: dict[tuple, str] = {}
    out: list[str] = []
    shown: list[str] = []
    collapse = [True]  # literal white space here is not shown (start of paragraph, after a space)

    def add(text: str, literal: bool = True) -> None:
        if literal:
            text = _XML_SPACE_RE.sub(" ", text)
            if collapse[0]:
                text = text.lstrip(" ")
            if not text:
                return
            collapse[0] = text.endswith(" ")
        else:
            collapse[0] = False
        shown.append(text)
        out.append(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))

    def walk(element: etree._Element) -> None:
        if element.text:
            add(element.text)
        for child in element:
            if child.tag == _SPACE:
                add(" " * _count(child), literal=False)
            elif child.tag in _PAIRS:
                key = (child.tag, tuple(sorted(child.attrib.items())))
                name = names.get(key)
                if name is None:
                    name = names[key] = f"s{len(names) + 1}"
                    paragraph.shells[name] = (child.tag, dict(child.attrib))
                if out and out[-1] == f"</{name}>":  # the same formatting goes on: one pair
                    out.pop()
                else:
                    out.append(f"<{name}>")
                walk(child)
                out.append(f"</{name}>")
            else:
                name = f"x{len(paragraph.atoms) + 1}"
                paragraph.atoms[name] = child
                out.append(f"<{name}/>")
                collapse[0] = False
            if child.tail:
                add(child.tail)

    walk(p)
    if not any(c.isalpha() for c in "".join(shown)):
        return None
    paragraph.text = "".join(out)
    return paragraph


def _count(space: etree._Element) -> int:
    try:
        return max(1, int(space.get(_COUNT, "1")))
    except ValueError:
        return 1


# -- writing

class _Emitter:
    """Puts text into the rebuilt paragraph, writing as ``text:s`` each space ODF would collapse."""

    def __init__(self) -> None:
        self.collapses = True  # a literal space here would not be shown

    def text(self, container: etree._Element, text: str) -> None:
        for m in _SPACES_RE.finditer(text):
            chunk = m.group()
            if chunk[0] != " ":
                _append(container, chunk)
                self.collapses = False
                continue
            if not self.collapses:
                _append(container, " ")
                chunk = chunk[1:]
            if chunk:
                space = etree.SubElement(container, _SPACE)
                if len(chunk) > 1:
                    space.set(_COUNT, str(len(chunk)))
            self.collapses = not chunk  # after a literal space, another would collapse

    def element(self) -> None:
        self.collapses = False


def _append(container: etree._Element, text: str) -> None:
    if len(container):
        container[-1].tail = (container[-1].tail or "") + text
    else:
        container.text = (container.text or "") + text


def _rebuild(paragraph: _Paragraph, rendered: str, fmt: str) -> None:
    """Replace the paragraph's content by the rendered fragment's, the elements it names rebuilt:
    any well-formed fragment of its own elements (moved, dropped, repeated) is accepted, and an
    atom the fragment lost is put at the paragraph's end."""
    try:
        fragment = etree.fromstring(f"<r>{xml_text(rendered)}</r>", _PARSER)
    except etree.XMLSyntaxError as exc:
        raise DocumentError(f"the {fmt} file's translated paragraph is not well-formed ({exc})") from None
    p = paragraph.element
    for child in list(p):
        p.remove(child)
    p.text = None
    used: set[str] = set()
    emit = _Emitter()

    def build(source: etree._Element, target: etree._Element) -> None:
        if source.text:
            emit.text(target, source.text)
        for child in source:
            name = child.tag if isinstance(child.tag, str) else ""
            if name in paragraph.shells:
                tag, attributes = paragraph.shells[name]
                build(child, etree.SubElement(target, tag, attributes))
            elif name in paragraph.atoms and name not in used:
                used.add(name)
                atom = paragraph.atoms[name]
                atom.tail = None
                target.append(atom)
                emit.element()
                build(child, target)
            else:  # not one of the paragraph's elements, or an atom again: its text only
                build(child, target)
            if child.tail:
                emit.text(target, child.tail)

    build(fragment, p)
    for name, atom in paragraph.atoms.items():
        if name not in used:
            atom.tail = None
            p.append(atom)


def _shown(element: etree._Element) -> str:
    """The text a paragraph shows (a cell's ``office:string-value``)."""
    out = [_XML_SPACE_RE.sub(" ", element.text or "")]
    for child in element:
        if child.tag == _SPACE:
            out.append(" " * _count(child))
        elif child.tag in _SHOWN_AS:
            out.append(_SHOWN_AS[child.tag])
        elif child.tag not in _NOT_SHOWN and isinstance(child.tag, str):
            out.append(_shown(child))
        out.append(_XML_SPACE_RE.sub(" ", child.tail or ""))
    return "".join(out)

