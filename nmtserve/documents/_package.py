"""What the zip-packaged formats share (Office Open XML, OpenDocument, EPUB): opening the package
with a clear error for what is not one, reading and parsing a member (entities never resolved,
nothing fetched), and writing the package again with only the rewritten members changed."""

from __future__ import annotations

import io
import re
import zipfile

from lxml import etree

from ._core import DocumentError

MAX_MEMBER = 256 * 1024 * 1024  # uncompressed bytes of one member read
PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)
# What XML 1.0 cannot hold; a translation might bring it.
_NOT_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def open_package(data: bytes, fmt: str) -> zipfile.ZipFile:
    """``data`` as a ZIP archive whose members can be read; DocumentError naming what is wrong
    (empty, an OLE file: encrypted Office or its old binary format, not a zip, an encrypted member)."""
    if not data:
        raise DocumentError(f"the {fmt} file is empty")
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        raise DocumentError(f"the {fmt} file is an OLE compound file, not a ZIP package: it is either "
                            f"password-protected (encrypted) or in an old binary format (.doc, .ppt, .xls); "
                            f"remove the password or save it as {fmt} first")
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise DocumentError(f"the {fmt} file is not a ZIP package, as {fmt} files are ({exc})") from None
    for info in package.infolist():
        if info.flag_bits & 0x1:
            raise DocumentError(f"the {fmt} file's ZIP member {info.filename!r} is encrypted")
    return package


def read_member(package: zipfile.ZipFile, name: str, fmt: str) -> bytes:
    info = package.getinfo(name)
    if info.file_size > MAX_MEMBER:
        raise DocumentError(f"the {fmt} file's {name} is {info.file_size:,} bytes, more than the "
                            f"limit of {MAX_MEMBER:,}")
    try:
        return package.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise DocumentError(f"the {fmt} file's {name} cannot be read: the package is damaged ({exc})") from None


def parse_member(package: zipfile.ZipFile, name: str, fmt: str) -> etree._ElementTree:
    try:
        return etree.ElementTree(etree.fromstring(read_member(package, name, fmt), PARSER))
    except etree.XMLSyntaxError as exc:
        raise DocumentError(f"the {fmt} file's {name} is not well-formed XML ({exc})") from None


def serialize(tree: etree._ElementTree) -> bytes:
    return etree.tostring(tree, xml_declaration=True, encoding=tree.docinfo.encoding or "UTF-8")


def write_package(package: zipfile.ZipFile, replaced: dict[str, bytes]) -> bytes:
    """The package again, the members of ``replaced`` with their new bytes, the others copied: in
    their order, compressed as they were, but a ``mimetype`` member (OpenDocument, EPUB) first and
    stored, as those formats require."""
    infos = package.infolist()
    ordered = [i for i in infos if i.filename == "mimetype"] + [i for i in infos if i.filename != "mimetype"]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in ordered:
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.compress_type = zipfile.ZIP_STORED if info.filename == "mimetype" else info.compress_type
            copy.external_attr, copy.internal_attr = info.external_attr, info.internal_attr
            copy.create_system, copy.comment = info.create_system, info.comment
            data = replaced.get(info.filename)
            target.writestr(copy, package.read(info) if data is None else data)
    return out.getvalue()


def xml_text(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot hold."""
    return _NOT_XML_RE.sub("", text)
