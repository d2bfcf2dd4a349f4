"""XLIFF 1.2 and 2.x files (.xlf, .xliff): every source segment a part, its translation the target.

Read with lxml (entities never resolved, nothing fetched), written back by lxml with the input's
XML declaration, encoding, byte-order mark and line endings; only targets (and their states)
change, every other element, attribute, comment and namespace is kept.

XLIFF 1.2 (``urn:oasis:names:tc:xliff:document:1.2``): each ``trans-unit`` of every ``file`` and
``group``; its ``source`` is a part, or, when it has a ``seg-source``, each ``mrk mtype="seg"``
in it is one (the target then repeats the ``seg-source`` with each segment's translation in its
``mrk``, as XLIFF 1.2 asks). XLIFF 2.0, 2.1 and 2.2 (``urn:oasis:names:tc:xliff:document:2.0``,
and the ``2.1``/``2.2`` names some tools write): each ``segment`` of every ``unit`` is a part of
its own (``ignorable`` is left as it is). The source is never changed.

Inline codes stay: 1.2 ``g`` and ``mrk``, 2.x ``pc`` and ``mrk`` are pairs around their text;
1.2 ``x``, ``bx``, ``ex``, ``ph``, ``bpt``, ``ept``, ``it`` (their content is native code) and 2.x
``ph``, ``sc``, ``ec``, ``sm``, ``em``, ``cp`` are atomic, as is a ``mrk mtype="protected"``, any
element with ``translate="no"`` and anything else found in a source (comments, other
namespaces' elements). The target holds the same codes with the same ids and attributes,
where the translation put them. (1.2 ``sub`` flows inside native codes stay untranslated.)

What is not translated: a unit with ``translate="no"`` (on itself or inherited from its
``group`` or, in 2.x, ``file``), and a unit (1.2) or segment (2.x) whose target already has
content: a translator's work is never replaced; an empty target is filled. A source without
letters (numbers, codes only) gets a copy of itself as its target.

States: a 1.2 target gets ``state="translated"`` and ``state-qualifier="mt-suggestion"``:
"translated" is what CAT tools read as "holds a translation" (``needs-review-translation`` is
for a translation whose source changed), and the qualifier, which XLIFF 1.2 defines for exactly
this ("the translation is suggested by machine translation"), lets a reviewer find the machine's
work. A 2.x segment gets ``state="translated"`` (2.x has only initial, translated, reviewed and
final). The target language (1.2 ``target-language``, 2.x ``trgLang``) is left as it is: the
file's reader does not know the language it is translated into. (XLIFF 2.x wants ``trgLang``
once targets exist: set it in the file that is sent.)

The inline-code machinery here (tokens, the part of an XML fragment that carries them, and the
repair of a rendered fragment) is in ``_inline``, shared with ``_gettext`` and ``_subtitles``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

from lxml import etree

from ._core import DocumentError
from ._files import Extracted
from ._inline import ATOM, CLOSE, OPEN, TEXT, Token, inline_part, inline_tokens

# -- XLIFF

_NS12 = "urn:oasis:names:tc:xliff:document:1.2"
_NS2 = ("urn:oasis:names:tc:xliff:document:2.0", "urn:oasis:names:tc:xliff:document:2.1",
        "urn:oasis:names:tc:xliff:document:2.2")
_PAIRS = {_NS12: ("g", "mrk"), **{ns: ("pc", "mrk") for ns in _NS2}}
_DECLARATION_RE = re.compile(r"<\?xml[^>]*\?>")


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname if isinstance(element.tag, str) else ""


def _translatable(element: etree._Element, stop: str) -> bool:
    """``translate`` of the element or its nearest ancestor that has one (up to ``stop``)."""
    node: etree._Element | None = element
    while node is not None:
        value = node.get("translate")
        if value is not None:
            return value != "no"
        if _local(node) == stop:
            return True
        node = node.getparent()
    return True


def _has_content(element: etree._Element | None) -> bool:
    return element is not None and (bool((element.text or "").strip()) or len(element) > 0)


class _Segment:
    """One part: where its source content is (``source``) and how its target is made."""

    def __init__(self, source: etree._Element, place: Callable[[], etree._Element], state: Callable[[], None]):
        self.source, self.place, self.state = source, place, state
        self.codes: list[etree._Element] = []
        self.tokens = self._tokens(source)

    def _tokens(self, element: etree._Element) -> list[Token]:
        ns = etree.QName(element).namespace
        out: list[Token] = []
        if element.text:
            out.append((TEXT, element.text))
        for child in element:
            number = len(self.codes)
            self.codes.append(child)
            is_pair = (isinstance(child.tag, str) and etree.QName(child).namespace == ns
                       and _local(child) in _PAIRS[ns] and child.get("translate") != "no"
                       and child.get("mtype") != "protected")
            if is_pair:
                out.append((OPEN, number))
                out.extend(self._tokens(child))
                out.append((CLOSE, number))
            else:
                out.append((ATOM, number))
            if child.tail:
                out.append((TEXT, child.tail))
        return out

    def fill(self, target: etree._Element, tokens: list[Token]) -> None:
        """Put ``tokens`` into ``target`` (emptied first) with copies of the source's codes."""
        for child in list(target):
            target.remove(child)
        target.text = None
        stack = [target]
        for kind, value in tokens:
            top = stack[-1]
            if kind == TEXT:
                if len(top):
                    top[-1].tail = (top[-1].tail or "") + str(value)
                else:
                    top.text = (top.text or "") + str(value)
            elif kind == CLOSE:
                stack.pop()
            else:
                code = copy.deepcopy(self.codes[int(value)])
                code.tail = None
                if kind == OPEN:
                    for child in list(code):
                        code.remove(child)
                    code.text = None
                    stack.append(code)
                top.append(code)


def _new_target(after: etree._Element) -> etree._Element:
    """An empty ``target`` right after ``after`` (made inside the parent, so it uses the
    namespace declarations in scope)."""
    parent = after.getparent()
    target = etree.SubElement(parent, etree.QName(etree.QName(after).namespace, "target").text)
    after.addnext(target)
    target.tail = after.tail
    return target


def _segments(root: etree._Element) -> list[_Segment]:
    ns = etree.QName(root).namespace
    q = lambda name: f"{{{ns}}}{name}"  # noqa: E731
    out: list[_Segment] = []
    if ns == _NS12:
        for unit in root.iter(q("trans-unit")):
            source = unit.find(q("source"))
            if source is None:
                raise DocumentError(f"the xliff file's trans-unit {unit.get('id')!r} has no source")
            existing = unit.find(q("target"))
            if not _translatable(unit, "file") or _has_content(existing) or not _has_content(source):
                continue
            out.extend(_segments12(unit, source, existing, q))
    else:
        for unit in root.iter(q("unit")):
            if not _translatable(unit, "xliff"):
                continue
            for segment in unit.iterchildren(q("segment")):
                source = segment.find(q("source"))
                if source is None:
                    raise DocumentError(f"the xliff file's unit {unit.get('id')!r} has a segment without source")
                existing = segment.find(q("target"))
                if _has_content(existing) or not _has_content(source):
                    continue
                out.append(_Segment(source, _target_of(segment, source, existing),
                                    lambda segment=segment: segment.set("state", "translated")))
    return out


def _target_of(holder: etree._Element, after: etree._Element, existing: etree._Element | None
               ) -> Callable[[], etree._Element]:
    """A function giving the (empty) target of ``holder``: ``existing``, or a new one after ``after``."""
    made: list[etree._Element] = [] if existing is None else [existing]

    def get() -> etree._Element:
        if not made:
            made.append(_new_target(after))
        return made[0]
    return get


def _segments12(unit: etree._Element, source: etree._Element, existing: etree._Element | None,
                q: Callable[[str], str]) -> list[_Segment]:
    def state() -> None:
        target = get()
        target.set("state", "translated")
        target.set("state-qualifier", "mt-suggestion")

    seg_source = unit.find(q("seg-source"))
    marks = [] if seg_source is None else [m for m in seg_source.iter(q("mrk")) if m.get("mtype") == "seg"]
    if not marks:
        get = _target_of(unit, source, existing)
        return [_Segment(source, get, state)]
    # The target is a copy of seg-source; each segment's place is the mrk of the same mid in it.
    assert seg_source is not None
    get_target = _target_of(unit, seg_source, existing)
    copied: list[etree._Element] = []

    def get() -> etree._Element:
        target = get_target()
        if not copied:
            attributes = dict(target.attrib)
            fresh = copy.deepcopy(seg_source)
            target.text, target[:] = fresh.text, list(fresh)
            target.attrib.clear()
            target.attrib.update(attributes)
            copied.append(target)
        return target

    def place(index: int) -> Callable[[], etree._Element]:
        def find() -> etree._Element:
            return [m for m in get().iter(q("mrk")) if m.get("mtype") == "seg"][index]
        return find

    return [_Segment(mark, place(i), state) for i, mark in enumerate(marks)]


def _parse(data: bytes) -> etree._Element:
    if not data.strip():
        raise DocumentError("the xliff file is empty")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise DocumentError(f"the xliff file is not well-formed XML ({exc})") from None
    if not isinstance(root.tag, str) or _local(root) != "xliff":
        raise DocumentError(f"the xliff file is not XLIFF: its root element is {root.tag!r}, not xliff")
    ns = etree.QName(root).namespace
    if ns not in _PAIRS:
        raise DocumentError(f"the xliff file's version is not supported: namespace {ns!r} (XLIFF 1.2 and 2.x are)")
    return root


def _serialize(root: etree._Element, data: bytes) -> bytes:
    tree = root.getroottree()
    encoding = tree.docinfo.encoding or "UTF-8"
    body = etree.tostring(tree, encoding="unicode")
    if data.startswith(b"\xef\xbb\xbf"):
        original, bom = data[3:].decode("utf-8", "replace"), b"\xef\xbb\xbf"
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        original, bom = data.decode("utf-16"), b""  # the utf-16 codec writes its own
    else:
        original, bom = data.decode(encoding, "replace"), b""
    declaration = _DECLARATION_RE.match(original)
    text = (declaration.group() + "\n" + body) if declaration else body
    if "\r\n" in original:
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return bom + text.encode(encoding, "xmlcharrefreplace")


def read(data: bytes, fmt: str) -> Extracted:
    segments = _segments(_parse(data))
    parts = [inline_part(s.tokens) for s in segments]

    def write(texts: list[str]) -> bytes:
        root = _parse(data)  # each write starts from the file as it came
        fresh = _segments(root)
        for segment, part, text in zip(fresh, parts, texts, strict=True):
            target = segment.place()
            segment.fill(target, inline_tokens(text, segment.tokens) if text != part.text else segment.tokens)
            segment.state()
        return _serialize(root, data)

    return Extracted(parts, write)
