"""Files through every door, on a real tritonserver with the demo model: the client's
``translate_document`` (bytes in, bytes out, the format from the file name), the CLI's
``translate --document FILE -o OUT``, the gateway's ``/translate_file`` + ``/download_file`` and
DeepL's ``/v2/document`` driven by the official ``deepl`` client.

The oracle: every text of the file comes back as the server's translation of that text sent
alone (``Translator.translate``), read back with the format's own library, so no sentence is
left untranslated, lost or moved; what is not text (timings, numbers, ids, formulas) is as it was.
"""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile

import pytest
import requests

from nmtserve.client import InvalidInputError, Translator

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("one_torch_thread")]

A, B, C = "I have three hundred twelve red apples.", "The train leaves at 7:45.", "The red car costs twelve thousand euros."


@pytest.fixture(scope="module")
def client(demo_server):
    with Translator(demo_server.urls.grpc_address) as translator:
        yield translator


@pytest.fixture(scope="module")
def alone(client):
    """Each text as the server translates it sent alone."""
    return {t: client.translate(t).text for t in (A, B, C, f"{A} {B}")}


def docx_file() -> bytes:
    import docx

    document = docx.Document()
    p = document.add_paragraph("I have three hundred twelve ")
    p.add_run("red apples").bold = True
    p.add_run(".")
    document.add_paragraph(f"{A} {B}")
    document.add_table(rows=1, cols=1).cell(0, 0).text = C
    document.sections[0].header.paragraphs[0].text = B
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_texts(data: bytes) -> list[str]:
    import docx

    document = docx.Document(io.BytesIO(data))
    return ([p.text for p in document.paragraphs] + [document.tables[0].cell(0, 0).text]
            + [document.sections[0].header.paragraphs[0].text])


def srt_file() -> bytes:
    return (f"1\n00:00:01,000 --> 00:00:04,000\n{A}\n\n"
            f"2\n00:00:05,500 --> 00:00:08,250\n<i>{B}</i>\n\n").encode()


def po_file() -> bytes:
    import polib

    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8", "Language": "fr"}
    po.append(polib.POEntry(msgid=A, occurrences=[("app.py", "12")]))
    po.append(polib.POEntry(msgid=B, msgctxt="station"))
    po.append(polib.POEntry(msgid=C, msgstr="déjà traduit"))
    return po.__unicode__().encode("utf-8")


def xliff_file() -> bytes:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="fr" datatype="plaintext" original="app">
    <body>
      <trans-unit id="a"><source>{A}</source></trans-unit>
      <trans-unit id="b"><source>{B}</source></trans-unit>
    </body>
  </file>
</xliff>
""".encode()


def xlsx_file() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet["A1"], sheet["B1"], sheet["A2"], sheet["B2"] = A, 312, C, "=B1*2"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_the_client_translates_each_file_format_whole(client, alone):
    import openpyxl
    import polib
    import srt
    from lxml import etree

    got = client.translate_document(docx_file(), filename="letter.docx")
    assert isinstance(got, bytes) and zipfile.ZipFile(io.BytesIO(got)).testzip() is None
    assert docx_texts(got) == [alone[A], alone[f"{A} {B}"], alone[C], alone[B]]

    cues = list(srt.parse(client.translate_document(srt_file(), "srt").decode("utf-8")))
    assert [(c.start.total_seconds(), c.end.total_seconds()) for c in cues] == [(1.0, 4.0), (5.5, 8.25)]
    assert " ".join(cues[0].content.split()) == alone[A]
    assert " ".join(cues[1].content.split()) == f"<i>{alone[B]}</i>"

    po = polib.pofile(client.translate_document(po_file(), filename="app.po").decode("utf-8"))
    assert [(e.msgid, e.msgstr) for e in po] == [(A, alone[A]), (B, alone[B]), (C, "déjà traduit")]
    assert po[1].msgctxt == "station" and po[0].occurrences == [("app.py", "12")]
    assert "fuzzy" in po[0].flags and "fuzzy" not in po[2].flags  # machine-filled: for review

    root = etree.fromstring(client.translate_document(xliff_file(), filename="app.xlf"))
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    assert [u.findtext("x:source", namespaces=ns) for u in root.iterfind(".//x:trans-unit", ns)] == [A, B]
    assert [u.findtext("x:target", namespaces=ns) for u in root.iterfind(".//x:trans-unit", ns)] == [
        alone[A], alone[B]]

    sheet = openpyxl.load_workbook(io.BytesIO(client.translate_document(xlsx_file(), filename="t.xlsx"))).active
    assert (sheet["A1"].value, sheet["B1"].value, sheet["A2"].value, sheet["B2"].value) == (
        alone[A], 312, alone[C], "=B1*2")


def test_a_file_that_cannot_be_read_is_refused_naming_the_problem(client):
    with pytest.raises(InvalidInputError, match="docx"):
        client.translate_document(b"PK\x03\x04 truncated", filename="broken.docx")
    with pytest.raises(InvalidInputError, match="cannot tell the format of 'scan.pdf'"):
        client.translate_document(b"%PDF-1.7", filename="scan.pdf")
    assert client.translate(A).text  # the server keeps serving


def test_the_cli_writes_the_translated_file(demo_server, tmp_path, alone):
    source, out = tmp_path / "letter.docx", tmp_path / "letter.fr.docx"
    source.write_bytes(docx_file())
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--document", str(source), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert docx_texts(out.read_bytes())[0] == alone[A]
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--document", str(source), str(source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "exactly one FILE" in done.stderr


@pytest.fixture(scope="module")
def gateway(demo_server, tmp_path_factory):
    from gateway_helpers import running_gateway

    with running_gateway(demo_server.urls.grpc_address, tmp_path_factory.mktemp("gw")) as gw:
        yield gw


def test_the_gateway_translates_files_for_libretranslate_and_deepl_clients(gateway, alone, tmp_path):
    import deepl

    answer = gateway.post("/translate_file", data={"source": "en", "target": "fr"},
                          files={"file": ("letter.docx", docx_file())})
    assert answer.status_code == 200, answer.text
    download = requests.get(answer.json()["translatedFileUrl"], timeout=60)
    assert download.status_code == 200 and docx_texts(download.content)[0] == alone[A]
    refused = gateway.post("/translate_file", data={"source": "en", "target": "fr"},
                           files={"file": ("scan.pdf", b"%PDF-1.7")})
    assert refused.status_code == 400 and "not supported" in refused.json()["error"]

    translator = deepl.Translator("any-key", server_url=gateway.url)
    source, out = tmp_path / "subtitles.srt", tmp_path / "subtitles.fr.srt"
    source.write_bytes(srt_file())
    status = translator.translate_document_from_filepath(source, out, target_lang="FR")
    assert status.done and status.billed_characters == len(srt_file())
    assert alone[A] in " ".join(out.read_text(encoding="utf-8").split())
    with pytest.raises(deepl.DeepLException, match="PDF"):
        translator.translate_document(b"%PDF-1.7", tmp_path / "x.pdf", target_lang="FR", filename="scan.pdf")


def test_the_documented_deepl_document_curls_answer_as_shown(gateway, tmp_path, alone):
    """docs/gateway.md's upload, status and result commands, run as written (the address, the id
    and the key substituted), with letter.docx beside them."""
    import json
    import time

    from test_readme import block

    text = block("curl -s localhost:5000/v2/document")
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    shown = [json.loads(line[2:]) for line in text.splitlines() if line.startswith("# {")]
    (tmp_path / "letter.docx").write_bytes(docx_file())

    def run(command: str, **ids: str) -> str:
        for name, value in ids.items():
            command = command.replace(name, value)
        done = subprocess.run(["bash", "-c", command.replace("localhost:5000", gateway.url.split("//")[1])],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    upload = json.loads(run(commands[0]))
    assert upload.keys() == shown[0].keys()
    ids = {"DOCUMENT_ID": upload["document_id"], "DOCUMENT_KEY": upload["document_key"]}
    for _ in range(240):
        status = json.loads(run(commands[1], **ids))
        if status["status"] not in ("queued", "translating"):
            break
        time.sleep(0.25)
    assert status == {**shown[1], "document_id": upload["document_id"], "billed_characters": len(docx_file())}
    run(commands[2], **ids)
    assert docx_texts((tmp_path / "letter.fr.docx").read_bytes())[0] == alone[A]


def test_a_file_with_a_text_the_model_refuses_fails_naming_it(client):
    """A word too long to cut to the model's token limit, in the second paragraph: the whole
    request fails (INVALID_ARGUMENT) naming the sentence and its first words; nothing comes back."""
    import docx

    document = docx.Document()
    document.add_paragraph(A)
    document.add_paragraph("Supercalifragilistic" * 60 + " end.")
    out = io.BytesIO()
    document.save(out)
    with pytest.raises(InvalidInputError, match=r"sentence 2 of the document \('Supercalifragilistic"):
        client.translate_document(out.getvalue(), filename="long.docx")
