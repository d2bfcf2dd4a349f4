"""Files people have (Office, OpenDocument, EPUB, XLIFF, gettext, subtitles): bytes in, bytes out.

Each family reads its file into *parts*, each a small text document in one of ``segment``'s
formats (a paragraph as an XML fragment whose inline elements stand for runs of formatting, a
cue as plain text, a chapter as HTML...), and writes the file back from the parts' translated
texts. Everything here then treats a file as one document: the sentences of every part, in
order, go to the translator in one batch, and each part is rendered as ``segment`` renders it
(placeholders, or the alignments for a model that does not carry them).

A family module (``_ooxml``, ``_odf``, ``_epub``, ``_xliff``, ``_gettext``, ``_subtitles``)
exposes ``read(data: bytes, fmt: str) -> Extracted``; it raises ``DocumentError`` naming what
it cannot read (never returns a file with parts silently left out). ``Extracted.write`` with
each part's own text gives the file back with the same content.

A family's library is imported only when a file of it comes: a server without it answers with
a ``DocumentError`` that names the missing package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import contract
from ._core import DEFAULT_MAX_CHARS, DocumentError, TranslationMismatchError
from ._xml import XmlRules


@dataclass(frozen=True)
class Part:
    """One stretch of a file to translate: ``text`` in ``fmt`` ("plain", "html" or "xml";
    ``xml`` its rules when "xml")."""

    text: str
    fmt: str = "plain"
    xml: XmlRules | None = None


@dataclass(frozen=True)
class Extracted:
    """A file read into parts; ``write(texts)`` (one rendered text per part, in order) gives the
    file's bytes."""

    parts: list[Part]
    write: Callable[[list[str]], bytes]


@dataclass(frozen=True)
class FileFormat:
    name: str
    extensions: tuple[str, ...]
    media_type: str
    description: str
    module: str  # the family module in this package
    package: str  # the pip packages its libraries come from (named when one is missing)

    def read(self, data: bytes) -> Extracted:
        try:
            family = importlib.import_module(f".{self.module}", __package__)
        except ImportError as exc:
            raise DocumentError(f"this server cannot read {self.name} files: it lacks the Python packages "
                                f"{self.package} ({exc})") from None
        return family.read(data, self.name)


# format -> (family module, the packages it needs); names, extensions and media types: the contract
_FAMILIES = {
    "docx": ("_ooxml", "lxml"), "pptx": ("_ooxml", "lxml"), "xlsx": ("_ooxml", "lxml"),
    "odt": ("_odf", "lxml"), "odp": ("_odf", "lxml"), "ods": ("_odf", "lxml"),
    "epub": ("_epub", "lxml"), "xliff": ("_xliff", "lxml"), "po": ("_gettext", "lxml, polib"),
    "srt": ("_subtitles", "lxml, srt"), "vtt": ("_subtitles", "lxml"),
}
FILE_FORMATS: dict[str, FileFormat] = {
    name: FileFormat(name, extensions, media_type, description, *_FAMILIES[name])
    for name, (extensions, media_type, description) in contract.FILE_FORMATS.items()}


def file_format_of(name: str) -> str | None:
    """The file format a file name's extension names (case-insensitive), or None."""
    fmt = contract.document_format_of(name)
    return fmt if fmt in FILE_FORMATS else None


@dataclass(frozen=True)
class SegmentedFile:
    """A file cut into the sentences to translate, as ``Segmented`` is for a text document:
    ``render`` takes one translation per sentence (in order) and gives the file's bytes."""

    sentences: list[str]
    fmt: str
    _documents: list = field(repr=False)  # Segmented, one per part
    _write: Callable[[list[str]], bytes] = field(repr=False)

    def without_markup(self) -> list[str]:
        return [s for d in self._documents for s in d.without_markup()]

    def render(self, translations: Sequence[str]) -> bytes:
        return self._write([d.render(t) for d, t in zip(self._documents, self._split(translations), strict=True)])

    def render_aligned(self, translations: Sequence[str], alignments: Sequence[Sequence[tuple[int, int]]]) -> bytes:
        if len(alignments) != len(translations):
            raise TranslationMismatchError(f"got {len(alignments)} alignments for {len(translations)} translations")
        return self._write([d.render_aligned(t, a) for d, t, a in zip(
            self._documents, self._split(translations), self._split(alignments), strict=True)])

    def _split(self, items: Sequence) -> list[Sequence]:
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise TranslationMismatchError(f"translations must be a sequence of str, got {type(items).__name__}")
        if len(items) != len(self.sentences):
            raise TranslationMismatchError(f"got {len(items)} translations for {len(self.sentences)} sentences")
        out, at = [], 0
        for d in self._documents:
            out.append(items[at:at + len(d.sentences)])
            at += len(d.sentences)
        return out


def segment_file(data: bytes, fmt: str, *, language: str = "en", max_chars: int = DEFAULT_MAX_CHARS) -> SegmentedFile:
    """Read a file (``fmt`` one of ``FILE_FORMATS``) and cut it into sentences. ``max_chars``
    bounds the text of all its parts together. Raises ``DocumentError`` naming what is wrong."""
    from . import segment

    if fmt not in FILE_FORMATS:
        raise DocumentError(f"unknown file format {fmt!r}: expected one of {', '.join(FILE_FORMATS)}")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DocumentError(f"a {fmt} file must be bytes, got {type(data).__name__}")
    data = bytes(data)
    _check_package(data, fmt)
    extracted = FILE_FORMATS[fmt].read(data)
    total = sum(len(p.text) for p in extracted.parts)
    if total > max_chars:
        raise DocumentError(f"the {fmt} file holds {total:,} characters of text, more than the limit of {max_chars:,}")
    documents = []
    for i, part in enumerate(extracted.parts):
        try:
            documents.append(segment(part.text, part.fmt, language=language, max_chars=max_chars, xml=part.xml))
        except DocumentError as exc:
            raise DocumentError(f"the {fmt} file's text {i + 1}: {exc}") from None
    return SegmentedFile([s for d in documents for s in d.sentences], fmt, documents, extracted.write)


# A package (a zip: Office, OpenDocument, EPUB) unpacks to at most this much, in at most this many
# members: a zip bomb is refused before anything is read.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 20_000


def _check_package(data: bytes, fmt: str) -> None:
    if not data.startswith(b"PK"):
        return
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            members = package.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DocumentError(f"the {fmt} file is not a readable zip package ({exc})") from None
    if len(members) > MAX_MEMBERS:
        raise DocumentError(f"the {fmt} file holds {len(members):,} members, more than {MAX_MEMBERS:,}")
    unpacked = sum(m.file_size for m in members)
    if unpacked > MAX_UNPACKED_BYTES:
        raise DocumentError(f"the {fmt} file unpacks to {unpacked:,} bytes, more than {MAX_UNPACKED_BYTES:,}")


def translate_file(data: bytes, fmt: str, translate: Callable[[list[str]], Sequence[str]], *,
                   language: str = "en", max_chars: int = DEFAULT_MAX_CHARS) -> bytes:
    """``segment_file``, one call of ``translate`` for every sentence of the file, render."""
    doc = segment_file(data, fmt, language=language, max_chars=max_chars)
    translations = translate(list(doc.sentences)) if doc.sentences else []
    return doc.render(list(translations))
