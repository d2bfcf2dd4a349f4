"""Office Open XML files (.docx, .pptx, .xlsx): every paragraph (or spreadsheet string) a part.

The package is read with ``zipfile`` and the parts that hold text with lxml; python-docx,
python-pptx and openpyxl are not used here (the tests use them to build files and to read the
output back, as independent readers). python-docx does not reach footnotes, endnotes, text
boxes or the runs inside fields and content controls; openpyxl reads a workbook into its own
model and writes every part anew, dropping what it does not model (shapes and their text,
comments' formatting, much else); and one reader of runs serves the three formats. Here a file
changes only in its text: the parts that hold translated text are edited in place with lxml
(every other element, attribute and namespace kept, the XML declaration with its
``standalone`` too, or its absence) and every other member of the package is copied, in its
order, with its compression. The parts are found by their content types in
``[Content_Types].xml``.

A paragraph is one part: an XML fragment whose text is the paragraph's text and whose elements
stand for what the paragraph holds besides text: ``<rN>``...``</rN>`` a run formatting (runs of
the same formatting are merged into one; the formatting of most of the text is the fragment's
plain text), ``<hN>``...``</hN>`` an element around runs (a hyperlink, an inline content
control, a smart tag, a simple field that shows words), ``<xN/>`` content put back as it was
(tabs, breaks, fields' codes, images and drawings, symbols, footnote and comment references,
bookmarks and comment ranges, equations). A translation that lost a pair loses that
formatting (a hyperlink becomes plain text); atomic content is never lost, and what closes a
field, a bookmark or a comment range is kept after what opens it.

docx
    Translated: the paragraphs (``w:p``) of the main document, its headers and footers,
    footnotes, endnotes and comments, so table cells, content controls and text boxes
    (``w:txbxContent``) too. A text box inside ``mc:AlternateContent`` exists twice (the
    DrawingML ``mc:Choice`` and the VML ``mc:Fallback`` for older programs): the fallback's
    paragraphs are written from the choice's translation, so both show the same text. Fields:
    a simple field (``w:fldSimple``) keeps its instruction; its shown result is translated
    when it has words (a hyperlink's text) and atomic otherwise (a page number). A complex
    field's code (``w:fldChar`` begin to separate, ``w:instrText``) is atomic, its shown result
    is translated, its end is atomic. Runs in an ``mc:AlternateContent`` of their own (text
    effects for newer programs) are written back as their ``mc:Fallback`` runs, translated;
    ruby keeps its base text, translated, and drops its guide to pronunciation. ``w:proofErr``
    marks and ``w:lastRenderedPageBreak`` hints are dropped (Word computes them again);
    paragraph properties (``w:pPr``) are kept as they are. A file with tracked changes
    (``w:ins``, ``w:del``, moves around runs) is refused: they must be accepted or rejected
    first; so is a file with words in a ``w:t`` that none of this reaches (an element this
    module does not know), rather than leaving them untranslated.
pptx
    Translated: the paragraphs (``a:p``) of every slide and notes slide: shapes, placeholders,
    tables, grouped shapes. Line breaks (``a:br``) and fields (``a:fld``: slide number, date)
    are atomic; ``a:pPr`` and ``a:endParaRPr`` are kept. Slide layouts and masters are
    templates, not content, and are left.
xlsx
    Translated: the shared strings (``xl/sharedStrings.xml``) that cells of type ``s`` refer
    to (the others are left as they are), inline strings (``is``) of worksheet cells, cell
    comments (``comments*.xml``, the notes) and the text of shapes in drawings; plain and rich
    text (runs ``r`` with ``rPr``) alike, and a line break inside a cell ends a sentence.
    Formulas, their cached results, numbers, dates and booleans are left untouched. Sheet names
    and defined names are not translated: formulas refer to them by name. A table's (list
    object's) column names follow its translated header cells, as Excel requires, and so do
    structured references to them in formulas (``Table1[Name]``). Phonetic guides (``rPh``) of
    a translated string are dropped, since they point into the old text.

Left as written in every format: charts and SmartArt diagrams (parts of their own; a chart's
labels come from cells), embedded objects, document properties (``docProps``), PowerPoint
comments and Excel's threaded comments, headers and footers of worksheets, attribute values
(alternative text, names).
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections import Counter
from copy import deepcopy
from dataclasses import dataclass, field

from lxml import etree

from ._core import DocumentError
from ._files import Extracted, Part
from ._package import open_package as _open
from ._package import parse_member as _parse
from ._package import read_member as _member
from ._package import write_package as _write
from ._xml import XmlRules

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_CT = "http://schemas.openxmlformats.org/package/2006/content-types"
_XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
_STRICT = "http://purl.oclc.org/ooxml/"


def _w(name: str) -> str:
    return f"{{{_W}}}{name}"


def _a(name: str) -> str:
    return f"{{{_A}}}{name}"


def _s(name: str) -> str:
    return f"{{{_S}}}{name}"


_OFFICE = "application/vnd.openxmlformats-officedocument."
_WML = _OFFICE + "wordprocessingml."
# What marks each format's package (its main part), and the parts whose text is translated.
_MAIN = {
    "docx": {_WML + "document.main+xml", _WML + "template.main+xml",
             "application/vnd.ms-word.document.macroEnabled.main+xml",
             "application/vnd.ms-word.template.macroEnabledTemplate.main+xml"},
    "pptx": {_OFFICE + "presentationml.presentation.main+xml", _OFFICE + "presentationml.slideshow.main+xml",
             _OFFICE + "presentationml.template.main+xml",
             "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml",
             "application/vnd.ms-powerpoint.slideshow.macroEnabled.main+xml"},
    "xlsx": {_OFFICE + "spreadsheetml.sheet.main+xml", _OFFICE + "spreadsheetml.template.main+xml",
             "application/vnd.ms-excel.sheet.macroEnabled.main+xml",
             "application/vnd.ms-excel.template.macroEnabled.main+xml"},
}
_PROGRAMS = {"docx": "a Word document", "pptx": "a PowerPoint presentation", "xlsx": "an Excel workbook"}
_WORD_PARTS = {_WML + name + "+xml" for name in ("header", "footer", "footnotes", "endnotes", "comments")}
_SLIDE_PARTS = {_OFFICE + "presentationml.slide+xml", _OFFICE + "presentationml.notesSlide+xml"}
_SHARED_STRINGS = _OFFICE + "spreadsheetml.sharedStrings+xml"
_WORKSHEET = _OFFICE + "spreadsheetml.worksheet+xml"
_SHEET_COMMENTS = _OFFICE + "spreadsheetml.comments+xml"
_DRAWING = _OFFICE + "drawing+xml"
_TABLE = _OFFICE + "spreadsheetml.table+xml"
_RELATIONSHIPS = "http://schemas.openxmlformats.org/package/2006/relationships"

_NOT_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_MARKUP_RE = re.compile(r"<[^>]*>|&[a-z]+;")
_FRAGMENT_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


# -- how each format's paragraphs are made

@dataclass(frozen=True)
class _Dialect:
    run: str  # the run element, its properties and its text
    rpr: str
    text: str
    head: frozenset[str]  # paragraph children kept first, as they are (paragraph properties)
    tail: frozenset[str]  # kept last (DrawingML's end-of-paragraph properties)
    drop: frozenset[str]  # dropped, in a paragraph or a run
    wrappers: frozenset[str]  # elements around runs, rebuilt around their translated content
    preserve_space: bool  # the text element needs xml:space="preserve" to keep edge spaces
    ignored_attributes: frozenset[str] = frozenset()  # run properties' attributes not telling formats apart


_WORD = _Dialect(
    run=_w("r"), rpr=_w("rPr"), text=_w("t"), head=frozenset({_w("pPr")}), tail=frozenset(),
    drop=frozenset({_w("proofErr"), _w("lastRenderedPageBreak")}),
    wrappers=frozenset(_w(n) for n in ("hyperlink", "smartTag", "customXml", "sdt", "dir", "bdo")),
    preserve_space=True)
_DRAWINGML = _Dialect(
    run=_a("r"), rpr=_a("rPr"), text=_a("t"), head=frozenset({_a("pPr")}), tail=frozenset({_a("endParaRPr")}),
    drop=frozenset(), wrappers=frozenset(), preserve_space=False,
    ignored_attributes=frozenset({"dirty", "err", "smtClean", "smtId"}))
_SHEET = _Dialect(
    run=_s("r"), rpr=_s("rPr"), text=_s("t"), head=frozenset(), tail=frozenset({_s("phoneticPr")}),
    drop=frozenset({_s("rPh")}), wrappers=frozenset(), preserve_space=True)

_ALTERNATE = f"{{{_MC}}}AlternateContent"
_TRACKED = frozenset(_w(n) for n in ("ins", "del", "moveFrom", "moveTo"))
# Atomic markers that open or close something, matched by their w:id: (kind, is the opening one)
_RANGES = {_w("bookmarkStart"): ("bookmark", True), _w("bookmarkEnd"): ("bookmark", False),
           _w("commentRangeStart"): ("comment", True), _w("commentRangeEnd"): ("comment", False)}


@dataclass
class _Atom:
    """Content kept as it was: (run properties to wrap it in a run with, or None; the element)."""

    nodes: list[tuple[etree._Element | None, etree._Element]] = field(default_factory=list)
    opens: set[tuple] = field(default_factory=set)  # keys of what it opens and closes (fields, bookmarks)
    closes: set[tuple] = field(default_factory=set)


@dataclass
class _Wrapper:
    element: etree._Element
    items: list = field(default_factory=list)  # ("text", run properties, text), _Atom, _Wrapper


@dataclass
class _Paragraph:
    """One paragraph read: its fragment and what each of its element names stands for."""

    element: etree._Element
    dialect: _Dialect
    fragment: str
    formats: dict[str, etree._Element | None]  # rN -> run properties
    base: etree._Element | None  # the run properties of the fragment's plain text
    wrappers: dict[str, tuple[_Wrapper, etree._Element | None]]  # hN -> (wrapper, its plain text's properties)
    atoms: dict[str, _Atom]  # xN
    order: list[tuple[str, str]]  # (xN, xM): xM closes what xN opens, so it must come after it

    @property
    def rules(self) -> XmlRules:
        return XmlRules(non_splitting_tags=frozenset(self.formats) | frozenset(self.wrappers),
                        outline_detection=False, split_on_newlines=True)


class _Fields:
    """The complex fields open at a point of a Word part (``w:fldChar`` begin, separate, end),
    and the part's ``w:t`` read so far (as text, or as a field's code)."""

    def __init__(self) -> None:
        self.stack: list[list] = []  # [number, in its code]
        self.count = 0
        self.seen: set[etree._Element] = set()

    @property
    def in_code(self) -> bool:
        return any(code for _, code in self.stack)

    def see(self, char: etree._Element, atom: _Atom) -> None:
        kind = char.get(_w("fldCharType"))
        if kind == "begin":
            self.count += 1
            self.stack.append([self.count, True])
            atom.opens.add(("field", self.count))
        elif kind == "separate" and self.stack:
            self.stack[-1][1] = False
        elif kind == "end" and self.stack:
            number, _ = self.stack.pop()
            atom.closes.add(("field", number))


def _key(rpr: etree._Element | None, dialect: _Dialect) -> bytes:
    if rpr is None:
        return b""
    if dialect.ignored_attributes & set(rpr.attrib):
        rpr = deepcopy(rpr)
        for name in dialect.ignored_attributes:
            rpr.attrib.pop(name, None)
    return etree.tostring(rpr, method="c14n")


def _read_items(parent: etree._Element, dialect: _Dialect, fields: _Fields | None, fmt: str) -> list:
    """The content of a paragraph or wrapper as items: ("text", rPr, text), _Atom, _Wrapper."""
    items: list = []

    def atom() -> _Atom:
        if not items or not isinstance(items[-1], _Atom):
            items.append(_Atom())
        return items[-1]

    for child in parent:
        tag = child.tag
        if not isinstance(tag, str) or tag in dialect.head or tag in dialect.tail or tag in dialect.drop:
            continue
        if tag in _TRACKED and len(child):
            raise DocumentError(f"the {fmt} file has tracked changes (insertions or deletions): accept or reject "
                                f"them in Word first, then translate it")
        if tag == dialect.text:  # a spreadsheet string's plain text
            items.append(("text", None, child.text or ""))
        elif tag == dialect.run:
            rpr = child.find(dialect.rpr)
            for content in child:
                ctag = content.tag
                if ctag == dialect.rpr or not isinstance(ctag, str) or ctag in dialect.drop:
                    continue
                if ctag == _w("delText"):
                    raise DocumentError(f"the {fmt} file has tracked changes (deleted text): accept or reject "
                                        f"them in Word first, then translate it")
                code = fields is not None and fields.in_code
                if fields is not None and ctag == dialect.text:
                    fields.seen.add(content)
                if ctag == dialect.text and not code:
                    items.append(("text", rpr, content.text or ""))
                    continue
                base = content.find(_w("rubyBase")) if ctag == _w("ruby") else None
                if base is not None:  # the base text, without its guide to pronunciation
                    if fields is not None:
                        fields.seen.update(content.iter(_w("t")))
                    items.extend(_read_items(base, dialect, fields, fmt))
                    continue
                target = atom()
                target.nodes.append((rpr, content))
                if ctag == _w("fldChar") and fields is not None:
                    fields.see(content, target)
        elif tag in dialect.wrappers or (tag == _w("fldSimple") and _has_letters(child)):
            host = child.find(_w("sdtContent")) if tag == _w("sdt") else child
            if host is None:
                atom().nodes.append((None, child))
                continue
            items.append(_Wrapper(child, _read_items(host, dialect, fields, fmt)))
        elif tag == _ALTERNATE and fields is not None and _own_text(child):
            # runs for newer programs, and the same for older ones: the latter are written back
            branch = child.find(f"{{{_MC}}}Fallback")
            fields.seen.update(child.iter(_w("t")))  # the other copies are dropped
            items.extend(_read_items(branch if branch is not None else child[-1], dialect, fields, fmt))
        else:  # bookmarks, comment ranges, simple fields, equations, a:br, a:fld...: kept as they are
            target = atom()
            target.nodes.append((None, child))
            if tag in _RANGES:
                kind, opening = _RANGES[tag]
                (target.opens if opening else target.closes).add((kind, child.get(_w("id"))))
    return items


def _own_text(element: etree._Element) -> bool:
    """Whether ``element`` holds text of the paragraph it is in (not only a text box's)."""
    for t in element.iter(_w("t")):
        holder = t.getparent()
        while holder is not element and holder.tag != _w("p"):
            holder = holder.getparent()
        if holder is element and _LETTER_RE.search(t.text or ""):
            return True
    return False


def _has_letters(element: etree._Element) -> bool:
    """Whether a simple field shows words (a hyperlink's text), not a page number or nothing."""
    return any(_LETTER_RE.search(t.text or "") for t in element.iter(_w("t")))


def _read_paragraph(p: etree._Element, dialect: _Dialect, fields: _Fields | None, fmt: str) -> _Paragraph:
    items = _read_items(p, dialect, fields, fmt)
    keys: dict[bytes, int] = {}
    properties: list[etree._Element | None] = []

    def number(rpr: etree._Element | None) -> int:
        key = _key(rpr, dialect)
        if key not in keys:
            keys[key] = len(properties)
            properties.append(rpr)
        return keys[key]

    def base_of(content: list, default: int) -> int:
        weights: Counter[int] = Counter()
        for item in content:
            if isinstance(item, tuple):
                weights[number(item[1])] += len(item[2]) or 1
        return weights.most_common(1)[0][0] if weights else default

    wrappers: dict[str, tuple[_Wrapper, etree._Element | None]] = {}
    atoms: dict[str, _Atom] = {}
    used: set[int] = set()
    out: list[str] = []

    def emit(content: list, base: int) -> None:
        open_format = -1
        for item in content:
            if isinstance(item, tuple):
                n = number(item[1])
                if n != open_format and open_format >= 0:
                    out.append(f"</r{open_format}>")
                    open_format = -1
                if n != base and n != open_format:
                    out.append(f"<r{n}>")
                    used.add(n)
                    open_format = n
                out.append(_escape(item[2]))
            elif isinstance(item, _Atom):
                name = f"x{len(atoms) + 1}"
                atoms[name] = item
                out.append(f"<{name}/>")
            else:
                if open_format >= 0:
                    out.append(f"</r{open_format}>")
                    open_format = -1
                name = f"h{len(wrappers) + 1}"
                inner = base_of(item.items, base)
                wrappers[name] = (item, properties[inner] if inner < len(properties) else None)
                out.append(f"<{name}>")
                emit(item.items, inner)
                out.append(f"</{name}>")
        if open_format >= 0:
            out.append(f"</r{open_format}>")

    base = base_of(items, 0)
    emit(items, base)
    opened = {key: name for name, a in atoms.items() for key in a.opens}
    order = [(opened[key], name) for name, a in atoms.items() for key in a.closes
             if key in opened and opened[key] != name]
    return _Paragraph(p, dialect, "".join(out), {f"r{n}": properties[n] for n in sorted(used)},
                      properties[base] if properties else None, wrappers, atoms, order)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- writing a paragraph from its translated fragment

def _rebuild(para: _Paragraph, rendered: str) -> None:
    try:
        root = etree.fromstring(f"<_>{rendered}</_>", _FRAGMENT_PARSER)
    except etree.XMLSyntaxError:  # never from segment's rendering; keep the text, lose the markup
        root = etree.Element("_")
        root.text = _MARKUP_RE.sub("", rendered)
    _keep_order(root, para.order)
    p, dialect = para.element, para.dialect
    head = [c for c in p if c.tag in dialect.head]
    tail = [c for c in p if c.tag in dialect.tail]
    for child in list(p):
        p.remove(child)
    p.text = None
    for child in head:
        p.append(child)
    placed: set[str] = set()

    def add_text(host: etree._Element, rpr: etree._Element | None, text: str | None) -> None:
        text = _NOT_XML_RE.sub("", text or "")
        if not text:
            return
        last = host[-1] if len(host) else None
        key = _key(rpr, dialect)
        if (last is not None and last.tag == dialect.run and last.get("_fmt") == key.decode()
                and len(last) and last[-1].tag == dialect.text):
            t = last[-1]
            t.text = (t.text or "") + text
        else:
            run = host.makeelement(dialect.run, {})
            run.set("_fmt", key.decode())
            if rpr is not None:
                run.append(_clean(rpr, dialect))
            t = etree.SubElement(run, dialect.text)
            t.text = text
            host.append(run)
        if dialect.preserve_space and t.text != t.text.strip():
            t.set(_XML_SPACE, "preserve")

    def add_atom(host: etree._Element, atom: _Atom) -> None:
        for rpr, node in atom.nodes:
            parent = node.getparent()
            if parent is not None and parent.tag == dialect.run:
                run = host.makeelement(dialect.run, {})
                if rpr is not None:
                    run.append(deepcopy(rpr))
                run.append(node)
                host.append(run)
            else:
                host.append(node)

    def build(frag: etree._Element, host: etree._Element, rpr: etree._Element | None) -> None:
        add_text(host, rpr, frag.text)
        for child in frag:
            name = child.tag if isinstance(child.tag, str) else ""
            if name in para.formats:
                build(child, host, para.formats[name])
            elif name in para.wrappers and name not in placed:
                placed.add(name)
                wrapper, inner = para.wrappers[name]
                shell, inner_host = _shell(wrapper.element)
                host.append(shell)
                build(child, inner_host, inner)
            elif name in para.atoms:
                if name not in placed:
                    placed.add(name)
                    add_atom(host, para.atoms[name])
            else:  # a wrapper placed already, or an element not of this paragraph: its text only
                build(child, host, rpr)
            add_text(host, rpr, child.tail)

    build(root, p, para.base)
    for name, atom in para.atoms.items():  # never lose an image, a field or a bookmark
        if name not in placed:
            add_atom(p, atom)
    for run in p.iter(dialect.run):
        run.attrib.pop("_fmt", None)
    for child in tail:
        p.append(child)
    if dialect is _SHEET:
        _plain_string(p)


def _clean(rpr: etree._Element, dialect: _Dialect) -> etree._Element:
    copy = deepcopy(rpr)
    for name in dialect.ignored_attributes:
        copy.attrib.pop(name, None)
    return copy


def _shell(element: etree._Element) -> tuple[etree._Element, etree._Element]:
    """A wrapper's copy without its content, and where its content goes."""
    shell = element.makeelement(element.tag, dict(element.attrib))
    host = shell
    for child in element:
        if child.tag == _w("sdtContent"):
            host = etree.SubElement(shell, child.tag)
        elif isinstance(child.tag, str) and (child.tag.endswith("Pr") or child.tag == _w("fldData")):
            shell.append(deepcopy(child))
    return shell, host


def _keep_order(root: etree._Element, order: list[tuple[str, str]]) -> None:
    """Move each closing atom that the translation put before its opening one just after it."""
    for first, second in order:
        elements = list(root.iter())
        a = next((e for e in elements if e.tag == first), None)
        b = next((e for e in elements if e.tag == second), None)
        if a is None or b is None or elements.index(a) < elements.index(b):
            continue
        parent, previous = b.getparent(), b.getprevious()
        if b.tail:
            if previous is not None:
                previous.tail = (previous.tail or "") + b.tail
            else:
                parent.text = (parent.text or "") + b.tail
        b.tail = None
        a.addnext(b)


def _plain_string(si: etree._Element) -> None:
    """A spreadsheet string of one run without properties as a plain ``t``, as Excel writes it."""
    runs = [c for c in si if c.tag == _s("r")]
    if len(runs) == 1 and runs[0].find(_s("rPr")) is None:
        t = runs[0].find(_s("t"))
        si.replace(runs[0], t)
    elif not runs:
        si.insert(0, si.makeelement(_s("t"), {}))


# -- the package

def _content_types(package: zipfile.ZipFile, fmt: str) -> dict[str, str]:
    """Each member's content type, from ``[Content_Types].xml``."""
    names = {n.lower(): n for n in package.namelist()}
    if "[content_types].xml" not in names:
        raise DocumentError(f"the {fmt} file is a ZIP archive but no Office Open XML package: it has no "
                            f"[Content_Types].xml")
    root = _parse(package, names["[content_types].xml"], fmt).getroot()
    defaults = {d.get("Extension", "").lower(): d.get("ContentType", "") for d in root.iter(f"{{{_CT}}}Default")}
    overrides = {o.get("PartName", "").lstrip("/").lower(): o.get("ContentType", "")
                 for o in root.iter(f"{{{_CT}}}Override")}
    types = {}
    for lower, name in names.items():
        kind = overrides.get(lower) or defaults.get(lower.rsplit(".", 1)[-1] if "." in lower else "", "")
        if kind:
            types[name] = kind
    return types


def _serialize(tree: etree._ElementTree, original: bytes) -> bytes:
    """The XML again, with an XML declaration (and its ``standalone``) when the original had one."""
    if not original.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<?xml"):
        return etree.tostring(tree, encoding="UTF-8")
    return etree.tostring(tree, xml_declaration=True, encoding=tree.docinfo.encoding or "UTF-8",
                          standalone=tree.docinfo.standalone)


# -- reading

@dataclass
class _Job:
    """One paragraph to write: from the rendered text of part ``part``."""

    paragraph: _Paragraph
    part: int
    member: str


def read(data: bytes, fmt: str) -> Extracted:
    if fmt not in _MAIN:
        raise DocumentError(f"unknown Office Open XML format {fmt!r}: expected one of {', '.join(_MAIN)}")
    package = _open(data, fmt)
    types = _content_types(package, fmt)
    main = [name for name, kind in types.items() if kind in _MAIN[fmt]]
    if not main:
        found = next((f for f, kinds in _MAIN.items() if any(k in kinds for k in types.values())), None)
        hint = f": it is {_PROGRAMS[found]} ({found})" if found else ""
        if any("binary" in kind for kind in types.values()):
            hint = ": it is a binary workbook (.xlsb)"
        raise DocumentError(f"the {fmt} file is not {_PROGRAMS[fmt]}{hint}")
    if _parse(package, main[0], fmt).getroot().tag.startswith("{" + _STRICT):
        raise DocumentError(f"the {fmt} file is in Strict Open XML, which this server does not read: save it "
                            f"as a (transitional) {fmt} file first")

    trees: dict[str, etree._ElementTree] = {}
    tables: list[tuple[str, str]] = []
    parts: list[Part] = []
    jobs: list[_Job] = []

    def add(member: str, p: etree._Element, dialect: _Dialect, fields: _Fields | None,
            leaders: dict[etree._Element, tuple[_Paragraph, int]]) -> None:
        para = _read_paragraph(p, dialect, fields, fmt)
        if not _LETTER_RE.search(_MARKUP_RE.sub("", para.fragment)):  # nothing to translate
            return
        copy_of = _fallback_copy_of(p)
        leader = leaders.get(copy_of) if copy_of is not None else None
        if leader is not None and leader[0].fragment == para.fragment:
            jobs.append(_Job(para, leader[1], member))
            return
        parts.append(Part(para.fragment, "xml", para.rules))
        leaders[p] = (para, len(parts) - 1)
        jobs.append(_Job(para, len(parts) - 1, member))

    ordered = [i.filename for i in package.infolist() if i.filename in types]
    if fmt == "docx":
        for member in ordered:
            if types[member] in _MAIN["docx"] or types[member] in _WORD_PARTS:
                trees[member] = tree = _parse(package, member, fmt)
                fields, leaders = _Fields(), {}
                for p in list(tree.iter(_w("p"))):
                    add(member, p, _WORD, fields, leaders)
                _check_read(tree, fields.seen, member, fmt)
    elif fmt == "pptx":
        for member in ordered:
            if types[member] in _SLIDE_PARTS:
                trees[member] = tree = _parse(package, member, fmt)
                leaders = {}
                for p in list(tree.iter(_a("p"))):
                    add(member, p, _DRAWINGML, None, leaders)
    else:
        used = _used_strings(package, types, trees, fmt)
        tables = _tables(package, types, trees, fmt)
        for member in ordered:
            kind = types[member]
            if kind == _SHARED_STRINGS:
                trees[member] = tree = _parse(package, member, fmt)
                for index, si in enumerate(tree.getroot().iterchildren(_s("si"))):
                    if index in used:
                        add(member, si, _SHEET, None, {})
            elif kind == _WORKSHEET:
                for c in trees[member].iter(_s("c")):
                    if c.get("t") == "inlineStr" and c.find(_s("is")) is not None:
                        add(member, c.find(_s("is")), _SHEET, None, {})
            elif kind == _SHEET_COMMENTS:
                trees[member] = tree = _parse(package, member, fmt)
                for text in tree.iter(_s("text")):
                    add(member, text, _SHEET, None, {})
            elif kind == _DRAWING:
                trees[member] = tree = _parse(package, member, fmt)
                leaders = {}
                for p in list(tree.iter(_a("p"))):
                    add(member, p, _DRAWINGML, None, leaders)

    def write(texts: list[str]) -> bytes:
        if len(texts) != len(parts):
            raise ValueError(f"got {len(texts)} texts for {len(parts)} parts")
        changed: set[str] = set()
        for job in jobs:
            rendered = texts[job.part]
            if rendered != job.paragraph.fragment:
                _rebuild(job.paragraph, rendered)
                changed.add(job.member)
        if fmt == "xlsx" and changed:
            changed.update(_rename_columns(tables, trees, types))
        return _write(package, {m: _serialize(trees[m], _member(package, m, fmt)) for m in changed})

    return Extracted(parts, write)


def _check_read(tree: etree._ElementTree, seen: set[etree._Element], member: str, fmt: str) -> None:
    """Refuse a Word part with words where this module does not look for them."""
    for t in tree.iter(_w("t")):
        if t not in seen and _LETTER_RE.search(t.text or "") and not any(
                a.tag == f"{{{_MC}}}Fallback" for a in t.iterancestors()):
            where = t
            while where.getparent() is not None and where.getparent().tag != _w("p"):
                where = where.getparent()
            name = etree.QName(where).localname
            raise DocumentError(f"the {fmt} file's {member} has text inside <{name}> that this server cannot "
                                f"translate ({(t.text or '').strip()[:40]!r})")


def _fallback_copy_of(p: etree._Element) -> etree._Element | None:
    """For a paragraph inside an ``mc:Fallback``: the paragraph at its place in the ``mc:Choice``
    before it (the same content for newer programs), or None."""
    fallback = next((a for a in p.iterancestors(f"{{{_MC}}}Fallback")), None)
    if fallback is None:
        return None
    choice = next((c for c in fallback.itersiblings(f"{{{_MC}}}Choice", preceding=True)), None)
    if choice is None:
        return None
    tag = p.tag
    mine, theirs = list(fallback.iter(tag)), list(choice.iter(tag))
    if len(mine) != len(theirs):
        return None
    return theirs[mine.index(p)]


def _used_strings(package: zipfile.ZipFile, types: dict[str, str], trees: dict[str, etree._ElementTree],
                  fmt: str) -> set[int]:
    """The shared strings cells of type ``s`` refer to; parses the worksheets into ``trees``."""
    used: set[int] = set()
    for member, kind in types.items():
        if kind != _WORKSHEET:
            continue
        trees[member] = tree = _parse(package, member, fmt)
        for c in tree.iter(_s("c")):
            if c.get("t") == "s":
                v = c.find(_s("v"))
                if v is not None and (v.text or "").strip().isdigit():
                    used.add(int(v.text))
    return used




# -- the columns of spreadsheet tables, named by their header cells

def _tables(package: zipfile.ZipFile, types: dict[str, str], trees: dict[str, etree._ElementTree],
            fmt: str) -> list[tuple[str, str]]:
    """(worksheet, table part) of every table (Excel's list objects); parses the tables into ``trees``."""
    names = {n.lower(): n for n in package.namelist()}
    found = []
    for sheet, kind in types.items():
        folder, base = posixpath.split(sheet)
        rels = names.get(posixpath.join(folder, "_rels", base + ".rels").lower())
        if kind != _WORKSHEET or rels is None:
            continue
        for rel in _parse(package, rels, fmt).getroot().iter(f"{{{_RELATIONSHIPS}}}Relationship"):
            target = rel.get("Target", "")
            target = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
            table = names.get(target.lower())
            if table is not None and types.get(table) == _TABLE:
                trees[table] = _parse(package, table, fmt)
                found.append((sheet, table))
    return found


def _rename_columns(tables: list[tuple[str, str]], trees: dict[str, etree._ElementTree],
                    types: dict[str, str]) -> set[str]:
    """Name each table column as its (translated) header cell reads, as Excel requires, and
    follow the new names in structured references (``Table1[Name]``) of formulas. Returns the
    members changed."""
    strings = next((trees[m].getroot().findall(_s("si")) for m, k in types.items()
                    if k == _SHARED_STRINGS and m in trees), [])
    renamed: dict[str, str] = {}
    changed: set[str] = set()
    for sheet, table in tables:
        root = trees[table].getroot()
        first = re.match(r"\$?([A-Z]+)\$?(\d+)", root.get("ref", ""))
        if first is None or root.get("headerRowCount", "1") == "0":
            continue
        cells = {c.get("r"): c for c in trees[sheet].iter(_s("c"))}
        column = _column_number(first.group(1))
        for i, tc in enumerate(root.iter(_s("tableColumn"))):
            cell = cells.get(f"{_column_letters(column + i)}{first.group(2)}")
            text = _cell_text(cell, strings) if cell is not None else None
            old = tc.get("name")
            if text and old is not None and text != old:
                tc.set("name", text)
                renamed[old] = text
                changed.add(table)
    if not renamed:
        return changed
    pattern = re.compile("|".join(re.escape(f"[{_escape_column(old)}]") for old in renamed))
    new = {f"[{_escape_column(old)}]": f"[{_escape_column(name)}]" for old, name in renamed.items()}
    formulas = [(m, e) for m, k in types.items() if k in (_WORKSHEET, _TABLE) and m in trees
                for e in trees[m].iter(_s("f"), _s("calculatedColumnFormula"), _s("totalsRowFormula"))]
    for member, element in formulas:
        if element.text and pattern.search(element.text):
            element.text = pattern.sub(lambda m: new[m.group()], element.text)
            changed.add(member)
    return changed


def _cell_text(cell: etree._Element, strings: list[etree._Element]) -> str | None:
    if cell.get("t") == "s":
        v = cell.findtext(_s("v"), "").strip()
        holder = strings[int(v)] if v.isdigit() and int(v) < len(strings) else None
    elif cell.get("t") == "inlineStr":
        holder = cell.find(_s("is"))
    else:
        return None
    if holder is None:
        return None
    return "".join(t.text or "" for t in holder.iter(_s("t")) if t.getparent().tag != _s("rPh"))


def _column_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - 64
    return number


def _column_letters(number: int) -> str:
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def _escape_column(name: str) -> str:
    """A column name as a structured reference writes it: ``[ ] # '`` after a ``'``."""
    return re.sub(r"([\[\]#'])", r"'\1", name)
