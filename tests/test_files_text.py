"""Text file formats through translate_file: XLIFF 1.2/2.x, gettext .po/.pot, SubRip and WebVTT."""

from __future__ import annotations

import datetime
import io
import re

import polib
import pytest
import srt
import webvtt
from lxml import etree

from nmtserve.documents._core import DocumentError
from nmtserve.documents._files import translate_file

_PLACEHOLDER = re.compile(r"(<\s*/?\s*[gx]\d+\s*/?>)", re.IGNORECASE)


def reverse(sentences: list[str]) -> list[str]:
    """Each word's letters reversed, placeholders kept where they are."""
    return ["".join(piece if _PLACEHOLDER.fullmatch(piece) else re.sub(r"\w+", lambda m: m.group()[::-1], piece)
                    for piece in _PLACEHOLDER.split(s)) for s in sentences]


def damage(sentences: list[str]) -> list[str]:
    """reverse, then every placeholder moved to the front (end markers first) and repeated."""
    out = []
    for s in reverse(sentences):
        codes = _PLACEHOLDER.findall(s)
        text = _PLACEHOLDER.sub("", s)
        out.append("".join(sorted(codes, key=lambda c: "/" not in c)) + text + "".join(codes))
    return out


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[A-Za-z]{3,}", text)}


# -- XLIFF

NS12 = "urn:oasis:names:tc:xliff:document:1.2"
NS2 = "urn:oasis:names:tc:xliff:document:2.0"

XLIFF12 = f"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="{NS12}">
 <file source-language="en" datatype="plaintext" original="app.txt">
  <body>
   <trans-unit id="u1"><source>Press <g id="1" ctype="bold">Continue</g> now<x id="2"/> please.</source></trans-unit>
   <trans-unit id="u2"><source>Open <bpt id="3">&lt;b&gt;</bpt>settings<ept id="3">&lt;/b&gt;</ept> first.</source>
    <target/></trans-unit>
   <group id="g" translate="no"><trans-unit id="u3"><source>Keep this</source></trans-unit></group>
   <trans-unit id="u4"><source>Already done</source><target state="final">Deja fait</target></trans-unit>
   <trans-unit id="u5"><source>First sentence. Second sentence.</source><seg-source><mrk mtype="seg" mid="1">First sentence.</mrk> <mrk mtype="seg" mid="2">Second <ph id="9">%s</ph> sentence.</mrk></seg-source></trans-unit>
  </body>
 </file>
</xliff>
""".encode()

XLIFF2 = f"""<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="{NS2}" version="2.0" srcLang="en" trgLang="fr">
 <file id="f1">
  <unit id="u1">
   <segment><source>Click <pc id="1" dataRefStart="d1">here</pc> today<ph id="2"/>.</source></segment>
   <ignorable><source> </source></ignorable>
   <segment state="initial"><source>Then <sc id="3"/>wait<ec startRef="3"/> quietly.</source><target></target></segment>
  </unit>
  <unit id="u2" translate="no"><segment><source>Brand name</source></segment></unit>
  <unit id="u3"><segment state="final"><source>Good morning</source><target>Bonjour</target></segment></unit>
 </file>
</xliff>
""".encode()


def units(data: bytes, ns: str, tag: str) -> dict[str, etree._Element]:
    root = etree.fromstring(data)
    return {u.get("id"): u for u in root.iter(f"{{{ns}}}{tag}")}


def content(element: etree._Element) -> str:
    """The element's content as XML (without its own tags), namespace declarations left out."""
    inner = (element.text or "") + "".join(etree.tostring(c, encoding="unicode") for c in element)
    return re.sub(r' xmlns="[^"]*"', "", inner)


def test_xliff12_targets_translated_with_codes_and_states() -> None:
    out = translate_file(XLIFF12, "xliff", reverse)
    source_units, got = units(XLIFF12, NS12, "trans-unit"), units(out, NS12, "trans-unit")
    for uid in ("u1", "u2", "u5"):
        unit = got[uid]
        source = unit.find(f"{{{NS12}}}source")
        assert content(source) == content(source_units[uid].find(f"{{{NS12}}}source"))
        target = unit.find(f"{{{NS12}}}target")
        assert target.get("state") == "translated" and target.get("state-qualifier") == "mt-suggestion"
        assert not words(_text_of(target)) & words(_text_of(source))
        assert target.getprevious().tag == f"{{{NS12}}}{'seg-source' if uid == 'u5' else 'source'}"
    assert content(got["u1"].find(f"{{{NS12}}}target")) == (
        'sserP <g id="1" ctype="bold">eunitnoC</g> won<x id="2"/> esaelp.')
    assert content(got["u2"].find(f"{{{NS12}}}target")) == (
        'nepO <bpt id="3">&lt;b&gt;</bpt>sgnittes<ept id="3">&lt;/b&gt;</ept> tsrif.')
    assert content(got["u5"].find(f"{{{NS12}}}target")) == (
        '<mrk mtype="seg" mid="1">tsriF ecnetnes.</mrk> <mrk mtype="seg" mid="2">dnoceS <ph id="9">%s</ph> '
        'ecnetnes.</mrk>')
    assert got["u3"].find(f"{{{NS12}}}target") is None  # translate="no" on its group
    assert content(got["u4"].find(f"{{{NS12}}}target")) == "Deja fait"  # a translator's target stays
    assert got["u4"].find(f"{{{NS12}}}target").get("state") == "final"
    assert out.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')


def _text_of(element: etree._Element) -> str:
    """The translatable text: native code inside bpt/ept/ph left out."""
    out = [element.text or ""]
    for child in element:
        if etree.QName(child).localname in ("g", "mrk", "pc"):
            out.append(_text_of(child))
        out.append(child.tail or "")
    return "".join(out)


def test_xliff2_segments_each_a_part() -> None:
    out = translate_file(XLIFF2, "xliff", reverse)
    got = units(out, NS2, "unit")
    segments = got["u1"].findall(f"{{{NS2}}}segment")
    assert [content(s.find(f"{{{NS2}}}target")) for s in segments] == [
        'kcilC <pc id="1" dataRefStart="d1">ereh</pc> yadot<ph id="2"/>.',
        'nehT <sc id="3"/>tiaw<ec startRef="3"/> ylteiuq.']
    assert [s.get("state") for s in segments] == ["translated", "translated"]
    assert [content(s.find(f"{{{NS2}}}source")) for s in segments] == [
        'Click <pc id="1" dataRefStart="d1">here</pc> today<ph id="2"/>.',
        'Then <sc id="3"/>wait<ec startRef="3"/> quietly.']
    assert got["u1"].find(f"{{{NS2}}}ignorable") is not None
    assert got["u2"].find(f".//{{{NS2}}}target") is None
    assert content(got["u3"].find(f".//{{{NS2}}}target")) == "Bonjour"


@pytest.mark.parametrize("data", [XLIFF12, XLIFF2])
def test_xliff_identity_targets_copy_sources(data: bytes) -> None:
    out = translate_file(data, "xliff", lambda s: s)
    root = etree.fromstring(out)
    ns = etree.QName(root).namespace
    for holder in root.iter(f"{{{ns}}}trans-unit", f"{{{ns}}}segment"):
        target = holder.find(f"{{{ns}}}target")
        if target is not None and target.get("state") == "translated":
            source = holder.find(f"{{{ns}}}seg-source")
            source = source if source is not None else holder.find(f"{{{ns}}}source")
            assert content(target) == content(source)


@pytest.mark.parametrize("data", [XLIFF12, XLIFF2])
def test_xliff_damaged_placeholders_repaired(data: bytes) -> None:
    out = translate_file(data, "xliff", damage)
    root = etree.fromstring(out)  # well formed
    ns = etree.QName(root).namespace
    for target in root.iter(f"{{{ns}}}target"):
        if target.get("state") == "final" or target.getparent().get("state") == "final":
            continue
        source = target.getprevious()  # the source, or 1.2's seg-source
        codes = sorted(etree.QName(e).localname + str(e.get("id")) for e in source.iter() if e is not source)
        got = sorted(etree.QName(e).localname + str(e.get("id")) for e in target.iter()
                     if e is not target and e.get("mtype") != "seg")
        assert set(got) <= set(codes) and len(got) == len(set(got))
        atoms = [c for c in codes if not c.startswith(("g", "pc", "mrk"))]
        assert all(got.count(a) == 1 for a in atoms)


def test_xliff_encoding_and_line_endings_kept() -> None:
    text = XLIFF12.decode().replace('encoding="UTF-8"', 'encoding="UTF-16"').replace("\n", "\r\n")
    data = text.encode("utf-16")
    out = translate_file(data, "xliff", reverse)
    assert out.startswith(b"\xff\xfe") or out.startswith(b"\xfe\xff")
    decoded = out.decode("utf-16")
    assert decoded.startswith('<?xml version="1.0" encoding="UTF-16"?>') and "\r\n" in decoded
    assert "\n" not in decoded.replace("\r\n", "")
    assert "eunitnoC" in decoded


@pytest.mark.parametrize(("data", "message"), [
    (b"", "empty"),
    (b"%PDF-1.4 not xml", "not well-formed"),
    (b"<root/>", "not XLIFF"),
    (b'<xliff xmlns="urn:oasis:names:tc:xliff:document:1.1" version="1.1"/>', "not supported"),
    (f'<xliff xmlns="{NS12}" version="1.2"><file><body><trans-unit id="a"/></body></file></xliff>'.encode(),
     "no source"),
    (XLIFF12[:200], "not well-formed"),
])
def test_xliff_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(DocumentError, match=message) as info:
        translate_file(data, "xliff", reverse)
    assert "xliff" in str(info.value)


# -- gettext

def make_po(*, charset: str = "UTF-8", pot: bool = False) -> bytes:
    po = polib.POFile()
    po.metadata = {"Content-Type": f"text/plain; charset={'CHARSET' if pot else charset}",
                   "Plural-Forms": "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 ? 1 : 2);"}
    po.append(polib.POEntry(msgid="Hello %(name)s, you have <b>%d</b> new messages.", msgstr="",
                            flags=["python-format"], occurrences=[("app.py", "12")], comment="greeting"))
    po.append(polib.POEntry(msgid="Delete {count} files?", msgstr="", flags=["python-brace-format"]))
    po.append(polib.POEntry(msgid="One apple", msgid_plural="%d apples", msgstr_plural={0: "", 1: "", 2: ""},
                            msgctxt="fruit", flags=["c-format"]))
    po.append(polib.POEntry(msgid="Usage: tool [options]\nRun the tool quickly.", msgstr=""))
    if not pot:
        po.append(polib.POEntry(msgid="Save", msgstr="Enregistrer"))
        po.append(polib.POEntry(msgid="Cancel", msgstr="Annuler", flags=["fuzzy"]))
        po.append(polib.POEntry(msgid="Obsolete thing", msgstr="", obsolete=True))
    return str(po).encode("utf-8" if pot else charset)


def test_po_untranslated_entries_filled_fuzzy() -> None:
    out = polib.pofile(translate_file(make_po(), "po", reverse).decode())
    by_id = {e.msgid: e for e in out}
    hello = by_id["Hello %(name)s, you have <b>%d</b> new messages."]
    assert hello.msgstr == "olleH %(name)s, uoy evah <b>%d</b> wen segassem."
    assert hello.flags == ["fuzzy", "python-format"] and hello.occurrences == [("app.py", "12")]
    assert hello.comment == "greeting"
    assert by_id["Delete {count} files?"].msgstr == "eteleD {count} selif?"
    apples = by_id["One apple"]
    assert apples.msgctxt == "fruit" and "fuzzy" in apples.flags
    assert apples.msgstr_plural == {0: "enO elppa", 1: "%d selppa", 2: "%d selppa"}
    assert by_id["Usage: tool [options]\nRun the tool quickly."].msgstr == "egasU: loot [snoitpo]\nnuR eht loot ylkciuq."
    assert by_id["Save"].msgstr == "Enregistrer" and "fuzzy" not in by_id["Save"].flags
    assert by_id["Cancel"].msgstr == "Annuler"
    obsolete = [e for e in out if e.obsolete]
    assert [(e.msgid, e.msgstr) for e in obsolete] == [("Obsolete thing", "")]
    assert all(e.msgstr or e.msgstr_plural for e in out if not e.obsolete)


def test_po_placeholders_survive_damage() -> None:
    out = polib.pofile(translate_file(make_po(), "po", damage).decode())
    for entry in out:
        if entry.obsolete or entry.msgid in ("Save", "Cancel"):
            continue
        for source, target in [(entry.msgid, entry.msgstr)] if not entry.msgid_plural else [
                (entry.msgid, entry.msgstr_plural[0]), (entry.msgid_plural, entry.msgstr_plural[1])]:
            for code in re.findall(r"%\(\w+\)s|%d|\{count\}", source):
                assert target.count(code) == source.count(code), (source, target)
            assert target.count("<b>") == target.count("</b>")  # a damaged pair goes whole


def test_po_identity_and_pot_and_charset() -> None:
    data = make_po(charset="ISO-8859-1")
    out = translate_file(data, "po", lambda s: s)
    po = polib.pofile(out.decode("latin-1"))
    assert all(e.msgstr == e.msgid for e in po if not e.obsolete and not e.msgid_plural and e.msgid not in
               ("Save", "Cancel"))
    assert "charset=ISO-8859-1" in po.metadata["Content-Type"]
    # a translation the charset cannot write: the file becomes UTF-8 and says so
    out = translate_file(data, "po", lambda s: ["Привет"] * len(s))
    po = polib.pofile(out.decode("utf-8"))
    assert "charset=UTF-8" in po.metadata["Content-Type"]
    pot = translate_file(make_po(pot=True), "po", reverse)
    po = polib.pofile(pot.decode())
    assert "charset=UTF-8" in po.metadata["Content-Type"] and all(e.msgstr or e.msgstr_plural for e in po)


@pytest.mark.parametrize(("data", "message"), [
    (b"", "empty"), (b'msgid "a"\nmsgstr "b"\n\xff\xfe', "not utf-8"), (b"\x00\x01\x02binary", "NUL"),
    (b'msgid "unterminated\nmsgstr', "cannot be read"),
])
def test_po_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(DocumentError, match=message):
        translate_file(data, "po", reverse)


# -- SubRip

def make_srt(eol: str = "\n") -> bytes:
    subs = [
        srt.Subtitle(1, datetime.timedelta(seconds=1), datetime.timedelta(seconds=4),
                     "{\\an8}<i>Where are you going</i> with that\nbeautiful red umbrella?"),
        srt.Subtitle(2, datetime.timedelta(seconds=5), datetime.timedelta(seconds=6, milliseconds=500),
                     "- Nowhere.\n- Somewhere."),
        srt.Subtitle(7, datetime.timedelta(minutes=1), datetime.timedelta(minutes=1, seconds=2),
                     '<font color="#ff0000">Stop</font> there!'),
    ]
    return srt.compose(subs, reindex=False, eol=eol).encode()


def test_srt_cues_translated_timings_kept() -> None:
    data = make_srt()
    out = list(srt.parse(translate_file(data, "srt", reverse).decode()))
    source = list(srt.parse(data.decode()))
    assert [(s.index, s.start, s.end) for s in out] == [(s.index, s.start, s.end) for s in source]
    for got, was in zip(out, source, strict=True):
        assert not words(re.sub(r"<[^>]*>|\{[^}]*\}", "", got.content)) & words(was.content) - {"font", "color"}
    first = out[0].content
    assert first.startswith("{\\an8}<i>erehW era uoy gniog</i>") and len(first.split("\n")) <= 2
    assert out[1].content == "- erehwoN.\n- erehwemoS."
    assert out[2].content == '<font color="#ff0000">potS</font> ereht!'


def test_srt_wrapping_and_identity() -> None:
    data = make_srt(eol="\r\n")
    assert translate_file(data, "srt", lambda s: s) == data
    long = translate_file(data, "srt", lambda s: [x + " and a good many more words to wrap" for x in s])
    assert b"\r\n" in long and b"\n" not in long.replace(b"\r\n", b"")
    first = list(srt.parse(long.decode()))[0].content.split("\n")
    assert len(first) == 2 and abs(len(first[0]) - len(first[1])) < 25
    short = translate_file(data, "srt", lambda s: ["Go." for _ in s])
    # the pair lost with its text, the override code the translation lost appended; one line
    assert list(srt.parse(short.decode()))[0].content == "Go. {\\an8}"


@pytest.mark.parametrize(("data", "message"), [
    (b"", "empty"), (b"\xff\xfe\x00garbage", "UTF-8"), (b"hello world\nnot subtitles", "SubRip"),
])
def test_srt_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(DocumentError, match=message):
        translate_file(data, "srt", reverse)


# -- WebVTT

VTT = """WEBVTT - Episode one

STYLE
::cue(.loud) { color: red }

REGION
id:bill width:40% lines:3

NOTE the first line
and the second

intro
00:01.000 --> 00:04.000 line:0 position:10% align:start
<v Roger>Hello <i>there</i> &amp; welcome
to the <c.loud>show</c>.

00:00:05.000 --> 00:00:07.000 region:bill
Goodbye now &lt;friends&gt;.
"""


def test_vtt_cues_translated_blocks_kept() -> None:
    out = translate_file(VTT.encode(), "vtt", reverse).decode()
    assert out.split("intro\n")[0] == VTT.split("intro\n")[0]  # header, STYLE, REGION, NOTE as written
    assert "intro\n00:01.000 --> 00:04.000 line:0 position:10% align:start\n" in out
    assert "00:00:05.000 --> 00:00:07.000 region:bill\n" in out
    captions = webvtt.from_buffer(io.StringIO(out)).captions
    assert [(c.start, c.end) for c in captions] == [("00:00:01.000", "00:00:04.000"), ("00:00:05.000", "00:00:07.000")]
    first = captions[0].raw_text
    assert first.startswith("<v Roger>olleH <i>ereht</i> &amp; emoclew") and "<c.loud>wohs</c>" in first
    assert captions[1].raw_text == "eybdooG won &lt;sdneirf&gt;."
    for caption in captions:
        assert not words(re.sub(r"<[^>]*>|&\w+;", "", caption.raw_text)) & words(
            "Hello there welcome the show Goodbye now friends")


def test_vtt_identity_crlf_bom() -> None:
    data = b"\xef\xbb\xbf" + VTT.replace("\n", "\r\n").encode()
    assert translate_file(data, "vtt", lambda s: s) == data
    out = translate_file(data, "vtt", reverse)
    assert out.startswith(b"\xef\xbb\xbfWEBVTT") and b"\n" not in out.replace(b"\r\n", b"")


@pytest.mark.parametrize(("data", "message"), [
    (b"", "empty"), (b"1\n00:00:01,000 --> 00:00:02,000\nHi\n", "not WebVTT"),
    (b"WEBVTT\n\n00:01 --> 00:02\nHi\n", "not a cue timing"), (b"WEBVTT\n\n\xff\xfe", "UTF-8"),
    (b"WEBVTT\n\nsome stray text\n", "neither a cue"),
])
def test_vtt_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(DocumentError, match=message):
        translate_file(data, "vtt", reverse)
