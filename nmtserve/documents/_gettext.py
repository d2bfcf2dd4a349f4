"""gettext catalogues (.po, and .pot templates): every untranslated message a part, polib reads
and writes the file.

The bytes are decoded in the charset the header names (``Content-Type: ...; charset=``; UTF-8
when it names none, or the template's placeholder ``CHARSET``, which the output then names as
UTF-8) and written back in it, with the input's line endings. polib writes the catalogue again:
entries, ``msgctxt``, comments, flags, references and previous msgids are kept, long strings
are re-wrapped at polib's width (78 columns).

Translated: each entry whose ``msgstr`` is empty: its ``msgid`` gives ``msgstr``; a plural
entry's ``msgid`` gives ``msgstr[0]`` and its ``msgid_plural`` ``msgstr[1]`` up to
``msgstr[n-1]``, n from the header's ``Plural-Forms: nplurals=`` (2 when it has none); with
nplurals=1 the one form is translated from ``msgid_plural`` (the form that takes the number).
Left alone: the header, obsolete entries (``#~``), and every entry that already has a
translation, fuzzy or not (a translator's or a previous run's work is never replaced). As
Weblate and Pootle do with machine translations, every entry filled here gets the ``fuzzy``
flag, so that gettext tools do not use it until a person has reviewed it. A .pot comes back as
a .po with the msgstrs filled (the header's other fields, such as ``Language``, are left).

Each message is a part: an XML fragment whose atomic elements are the message's format
placeholders (printf's ``%s``, ``%d``, ``%(name)s``, ``%1$s``, ``%%`` in every message not
flagged ``no-c-format``/``no-python-format``, and ``{name}``, ``{0}``, ``{}``, ``{{``, ``}}`` in
one flagged ``python-brace-format`` or unflagged), and whose pairs and atoms are its HTML-like
tags (``<b>``...``</b>``, ``<br/>``), so the translator cannot change them; each comes back
exactly once (``_xliff.inline_tokens``). A line break in a message ends a sentence and stays.
"""

from __future__ import annotations

import re

import polib

from ._core import DocumentError
from ._files import Extracted
from ._inline import inline_part, inline_tokens, markup_tokens

_CHARSET_RE = re.compile(rb"charset=([A-Za-z0-9_.:-]+)")
_NPLURALS_RE = re.compile(r"nplurals\s*=\s*([0-9]+)")
# printf conversions (C, Python's %-formatting, PHP, with positions and %(name)s); no space
# flag, so that "100% sure" is text.
_PRINTF = r"%(?:[0-9]+\$|\([A-Za-z0-9_]*\))?[-+#0]*(?:[0-9]+|\*)?(?:\.(?:[0-9]+|\*))?(?:hh|ll|[hlLqjzt])?[diouxXeEfFgGcrsaAp%]"
_BRACE = r"\{\{|\}\}|\{[A-Za-z0-9_.\[\]]*(?:![rsa])?(?::[^{}]*)?\}"


def _placeholders(entry: polib.POEntry) -> re.Pattern | None:
    flags = set(entry.flags)
    patterns = []
    if not flags & {"no-c-format", "no-python-format", "no-php-format"}:
        patterns.append(_PRINTF)
    if "python-brace-format" in flags or not any(f.endswith("-format") for f in flags):
        if "no-python-brace-format" not in flags:
            patterns.append(_BRACE)
    return re.compile("|".join(patterns)) if patterns else None


def _todo(po: polib.POFile, nplurals: int) -> list[tuple[polib.POEntry, list[str]]]:
    """The entries to translate, each with its source texts (msgid; or msgid and msgid_plural)."""
    out = []
    for entry in po:
        if entry.obsolete or not entry.msgid:
            continue
        if entry.msgid_plural:
            if any(entry.msgstr_plural.get(i) for i in range(nplurals)):
                continue
            out.append((entry, [entry.msgid_plural] if nplurals == 1 else [entry.msgid, entry.msgid_plural]))
        elif not entry.msgstr:
            out.append((entry, [entry.msgid]))
    return out


def _parse(data: bytes) -> tuple[polib.POFile, str, int]:
    if not data.strip():
        raise DocumentError("the po file is empty")
    found = _CHARSET_RE.search(data)
    charset = found.group(1).decode("ascii") if found else "utf-8"
    try:
        "".encode(charset)
    except LookupError:
        charset = "utf-8"
    try:
        text = data.decode(charset)
    except UnicodeDecodeError as exc:
        raise DocumentError(f"the po file is not {charset} text as its header says ({exc})") from None
    if "\x00" in text:
        raise DocumentError("the po file holds NUL characters: binary data, not a gettext catalogue")
    try:
        po = polib.pofile(text.lstrip("\ufeff").replace("\r\n", "\n"))
    except (OSError, ValueError) as exc:
        raise DocumentError(f"the po file cannot be read as a gettext catalogue ({exc})") from None
    if not len(po) and not po.metadata:
        raise DocumentError("the po file holds no gettext entries")
    found_plurals = _NPLURALS_RE.search(po.metadata.get("Plural-Forms", ""))
    nplurals = int(found_plurals.group(1)) if found_plurals and int(found_plurals.group(1)) > 0 else 2
    return po, charset, nplurals


def _text(po: polib.POFile, data: bytes) -> str:
    text = str(po)
    if not po.header:  # polib writes an empty header comment as "#"
        text = text.removeprefix("#\n")
    return text.replace("\n", "\r\n") if b"\r\n" in data else text


def read(data: bytes, fmt: str) -> Extracted:
    po, charset, nplurals = _parse(data)
    todo = _todo(po, nplurals)
    sources = []  # (tokens, codes) of each part
    for entry, texts in todo:
        for text in texts:
            sources.append(markup_tokens(text, _placeholders(entry)))
    parts = [inline_part(tokens, split_on_newlines=True) for tokens, _ in sources]

    def write(texts: list[str]) -> bytes:
        po, _, _ = _parse(data)  # each write starts from the file as it came
        at = 0
        for entry, sources_of in _todo(po, nplurals):
            translated = []
            for _ in sources_of:
                (tokens, codes), part, text = sources[at], parts[at], texts[at]
                got = tokens if text == part.text else inline_tokens(text, tokens)
                translated.append(codes.text(got))
                at += 1
            if entry.msgid_plural:
                entry.msgstr_plural = {i: translated[min(i, len(translated) - 1)] for i in range(nplurals)}
            else:
                entry.msgstr = translated[0]
            if "fuzzy" not in entry.flags:
                entry.flags.insert(0, "fuzzy")
        out_charset = charset
        content_type = po.metadata.get("Content-Type", "")
        if "charset=CHARSET" in content_type:
            po.metadata["Content-Type"] = content_type.replace("charset=CHARSET", "charset=UTF-8")
            out_charset = "utf-8"
        bom = b"\xef\xbb\xbf" if data.startswith(b"\xef\xbb\xbf") else b""
        try:
            return bom + _text(po, data).encode(out_charset)
        except UnicodeEncodeError:  # the translation needs more than the file's charset: UTF-8, said in the header
            po.metadata["Content-Type"] = re.sub(r"charset=[^;\s]*", "charset=UTF-8", content_type)
            return bom + _text(po, data).encode("utf-8")

    return Extracted(parts, write)
