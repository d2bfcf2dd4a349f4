"""XML, as DeepL's ``tag_handling=xml`` reads it: the standard library's expat, strict, with
entity declarations refused (so nothing can expand), runs cut by the document's outline.

The text may be a whole document (an XML declaration, a DOCTYPE, one root element) or a
fragment (DeepL's texts: "Press <b>Continue</b> to go on", several top-level elements, text
around them). It is parsed inside a root element of its own, inserted after the prolog (the XML
declaration, and the DOCTYPE when there is one); expat reports where each event starts, and an
event's source runs to the next one, so every tag is known by its exact bytes and nothing is
ever re-serialized.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from xml.parsers import expat

from ._core import _CLOSE, _CODE, _DECODED, _OPEN, _TEXT, MarkupError, _Piece


@dataclass(frozen=True)
class XmlRules:
    """How an XML text is cut and what of it is translated: DeepL's parameters, same names.

    ``ignore_tags``: elements kept exactly as written, content and all (each is one atomic
    placeholder inside its sentence). ``splitting_tags``: elements that always end a run (a
    sentence never spans them). ``non_splitting_tags``: elements that never do (their tags are
    inline markup of the sentence around them). ``outline_detection`` (DeepL's default): any
    other element ends a run when its parent holds no text of its own besides whitespace (it is
    structure: ``<doc><title>A</title><par>B <b>c</b>.</par></doc>`` is two runs, ``<b>`` is
    inline because ``<par>`` holds text); off, only ``splitting_tags`` end runs. A tag named in
    both lists splits. ``split_on_newlines``: a line break in the text ends a run too (DeepL's
    ``split_sentences=1``); off, a sentence may continue over a line break (``nonewlines``).
    Tag names are matched exactly, prefix and case included.
    """

    ignore_tags: frozenset[str] = field(default_factory=frozenset)
    splitting_tags: frozenset[str] = field(default_factory=frozenset)
    non_splitting_tags: frozenset[str] = field(default_factory=frozenset)
    outline_detection: bool = True
    split_on_newlines: bool = False

    def __post_init__(self) -> None:
        for name in ("ignore_tags", "splitting_tags", "non_splitting_tags"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(tag, str) for tag in value):
                raise ValueError(f"{name} must be a collection of tag names, got {value!r}")
            object.__setattr__(self, name, frozenset(value))

    def splits(self, tag: str, parent_has_text: bool) -> bool:
        if tag in self.splitting_tags:
            return True
        if tag in self.non_splitting_tags or not self.outline_detection:
            return False
        return not parent_has_text


# The prolog that must stay before the root element inserted around the text: an optional
# byte-order mark and XML declaration, then comments, processing instructions and whitespace
# up to a DOCTYPE (with its internal subset). Each repeated alternative starts with its own
# character, so a text without a DOCTYPE costs one linear scan.
_PROLOG_RE = re.compile(r"""
    \ufeff?
    (?:<\?xml(?=[ \t\r\n])(?:[^?]|\?(?!>))*\?>)?
    (?:
        (?:[ \t\r\n]|<!--(?:[^-]|-(?!-))*-->|<\?(?:[^?]|\?(?!>))*\?>)*
        <!DOCTYPE(?=[ \t\r\n])(?:[^\[>"']|"[^"]*"|'[^']*')*
        (?:\[(?:[^\]"']|"[^"]*"|'[^']*')*\][ \t\r\n]*)?>
    )?""", re.VERBOSE)
_ROOT = "_"  # the inserted root element (any name: expat only matches each end tag to its start)
_ROOT_START, _ROOT_END = f"<{_ROOT}>".encode(), f"</{_ROOT}>".encode()

# Without a DTD (entity declarations are refused) these are the only references XML has.
_REFERENCE_RE = re.compile(r"&(#[0-9]+|#x[0-9a-fA-F]+|[^\s&;<]+);")
_PREDEFINED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")
_XML_SPACE = " \t\r\n"

# One parser event: (kind, tag name, start offset in the text); its source runs to the next one.
_Event = tuple[str, str, int]


def _xml_events(text: str) -> list[_Event]:
    """Every event of ``text`` parsed inside an element of its own, with its offset in ``text``,
    the inserted root's own start and end left out. MarkupError when it is not well formed or
    declares an entity."""
    prolog_end = _PROLOG_RE.match(text).end()  # type: ignore[union-attr]  # every part is optional
    head, body = text[:prolog_end].encode("utf-8"), text[prolog_end:].encode("utf-8")
    data = head + body
    shift = len(head) + len(_ROOT_START)  # stream offsets past the inserted start tag
    # protocol encoding UTF-8: what the XML declaration names is ignored (the text is str already)
    parser = expat.ParserCreate(encoding="utf-8")
    raw: list[tuple[str, str, int]] = []

    def at(kind: str):
        def record(*args) -> None:
            raw.append((kind, args[0] if kind in ("start", "end") else "", parser.CurrentByteIndex))
        return record

    def refuse(what: str):
        def handler(*args) -> None:
            raise _Refused(f"{what} {args[0]!r}, which is refused (entities are never expanded)")
        return handler

    parser.StartElementHandler = at("start")
    parser.EndElementHandler = at("end")
    parser.CharacterDataHandler = at("data")
    parser.CommentHandler = at("other")
    parser.ProcessingInstructionHandler = at("other")
    parser.StartCdataSectionHandler = at("cdata")
    parser.EndCdataSectionHandler = at("cdata_end")
    # What defusedxml refuses: no entity is declared, so none is ever expanded or fetched.
    parser.EntityDeclHandler = refuse("declares the entity")
    parser.UnparsedEntityDeclHandler = refuse("declares the entity")
    parser.ExternalEntityRefHandler = refuse("refers to the external entity")
    parser.SkippedEntityHandler = refuse("refers to the undeclared entity")
    try:
        parser.Parse(head, False)
        parser.Parse(_ROOT_START, False)
        parser.Parse(body, False)
        parser.Parse(_ROOT_END, True)
    except expat.ExpatError as exc:
        reason = expat.errors.messages[exc.code]
        what = f"is not well-formed ({reason.removeprefix('not well-formed ').strip('()')})"
        unclosed = _open_at_end(raw)
        if parser.ErrorByteIndex >= shift + len(body) and unclosed:  # at the inserted end tag
            what = f"is not well-formed (<{unclosed}> is not closed)"
        raise _error(text, data, _text_offset(parser.ErrorByteIndex, len(head), shift), what) from None
    except _Refused as exc:
        raise _error(text, data, _text_offset(parser.CurrentByteIndex, len(head), shift), str(exc)) from None
    # Stream offsets (UTF-8 bytes, the inserted start tag counted) to offsets in ``text``.
    events: list[_Event] = []
    byte, char = 0, prolog_end
    root = next(i for i, (kind, _, index) in enumerate(raw) if kind == "start" and index == len(head))
    for kind, tag, index in raw[root + 1:-1]:  # inside the inserted root (the prolog's own are kept as written)
        char += len(body[byte:index - shift].decode("utf-8"))
        byte = index - shift
        events.append((kind, tag, char))
    return events


class _Refused(Exception):
    pass


def _open_at_end(raw: list[tuple[str, str, int]]) -> str:
    """The innermost element of the text still open after ``raw``'s events ("": none)."""
    stack: list[str] = []
    for kind, tag, _ in raw:
        if kind == "start":
            stack.append(tag)
        elif kind == "end":
            stack.pop()
    return stack[-1] if len(stack) > 1 else ""  # stack[0]: the inserted root


def _text_offset(stream_offset: int, head: int, shift: int) -> int:
    """A byte offset in the parsed stream as one in the text's UTF-8 bytes."""
    if stream_offset < head:
        return max(stream_offset, 0)
    return max(stream_offset - (shift - head), head)


def _error(text: str, data: bytes, byte: int, what: str) -> MarkupError:
    offset = len(data[:byte].decode("utf-8", "ignore"))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return MarkupError(f"the xml document {what} at line {line}, column {column}")


def _xml_runs(text: str, rules: XmlRules) -> list[list[_Piece]]:
    events = _xml_events(text)
    ends = [e[2] for e in events[1:]] + [len(text)]  # each event's source is [start, end)
    # Pass 1: each start tag's end tag, and whether each element (and the text's own top level,
    # -1) holds text of its own besides whitespace.
    closing: dict[int, int] = {}
    has_text: set[int] = set()
    stack = [-1]
    in_cdata = False
    for k, (kind, _, start) in enumerate(events):
        if kind == "start":
            stack.append(k)
        elif kind == "end":
            closing[stack.pop()] = k
        elif kind == "cdata":
            in_cdata = True
        elif kind == "cdata_end":
            in_cdata = False
        elif kind == "data" and not in_cdata and text[start:ends[k]].strip(_XML_SPACE):
            has_text.add(stack[-1])

    runs: list[list[_Piece]] = []
    run: list[_Piece] = []

    def end_run() -> None:
        nonlocal run
        if run:
            runs.append(run)
            run = []

    # Pass 2: the open elements as (start event, inline?, pair number).
    open_elements: list[tuple[int, bool, int]] = [(-1, False, -1)]
    pairs = 0
    k = 0
    while k < len(events):
        kind, tag, start = events[k]
        if kind == "start":
            parent = open_elements[-1][0]
            inline = not rules.splits(tag, parent in has_text)
            last = closing[k]
            if tag in rules.ignore_tags or last == k + 1:  # kept whole: ignored, or empty (<x/>, <x></x>)
                if inline:
                    run.append(_Piece(start, ends[last], _CODE))
                else:
                    end_run()
                k = last + 1
                continue
            if inline:
                pairs += 1
                run.append(_Piece(start, ends[k], _OPEN, pair=pairs))
            else:
                end_run()
            open_elements.append((k, inline, pairs if inline else -1))
        elif kind == "end":
            _, inline, pair = open_elements.pop()
            if inline:
                run.append(_Piece(start, ends[k], _CLOSE, pair=pair))
            else:
                end_run()
        elif kind == "data":
            _data_pieces(text, start, ends[k], rules.split_on_newlines, run, end_run)
        else:  # a comment, processing instruction or CDATA section (with its text): kept as written
            end_run()
            if kind == "cdata":
                while events[k][0] != "cdata_end":
                    k += 1
        k += 1
    end_run()
    return runs


def _data_pieces(text: str, start: int, end: int, split_on_newlines: bool, run: list[_Piece], end_run) -> None:
    if split_on_newlines:
        pos = start
        for m in _LINE_BREAK_RE.finditer(text, start, end):
            run.extend(_text_pieces(text, pos, m.start()))
            end_run()
            pos = m.end()
        start = pos
    run.extend(_text_pieces(text, start, end))


def _text_pieces(text: str, start: int, end: int) -> list[_Piece]:
    pieces = []
    pos = start
    for m in _REFERENCE_RE.finditer(text, start, end):
        if m.start() > pos:
            pieces.append(_Piece(pos, m.start(), _TEXT, text[pos:m.start()]))
        pieces.append(_Piece(m.start(), m.end(), _DECODED, _reference(m.group(1))))
        pos = m.end()
    if end > pos:
        pieces.append(_Piece(pos, end, _TEXT, text[pos:end]))
    return pieces


def _reference(name: str) -> str:
    if name.startswith("#x"):
        return chr(int(name[2:], 16))
    if name.startswith("#"):
        return chr(int(name[1:]))
    if name in _PREDEFINED:
        return _PREDEFINED[name]
    raise MarkupError(f"the xml document refers to the undeclared entity {name!r}")  # expat let none through


def _xml_escape(text: str, at_start: bool) -> str:
    # ">" too: "]]>" may not appear in XML text.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
