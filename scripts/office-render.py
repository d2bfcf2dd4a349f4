"""Translate a Word file and an OpenDocument text with formatting through a served demo model,
and render the translations to PNG with Debian's LibreOffice (headless), for a person to look at
the pages: docs/files-docx.png and docs/files-odt.png come from this.

    apt-get install --no-install-recommends libreoffice-writer-nogui   # as root, once
    python scripts/office-render.py MODEL_REPOSITORY [OUT_DIR]

The files: a heading, a paragraph with a bold and an italic run, a 2x2 table, a header and a
footer (docx); a heading and a paragraph with a bold span (odt). What to look at: every text in
French, the bold and italic on the translated words, the table and header/footer in place.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import docx
from odf.opendocument import OpenDocumentText
from odf.style import Style, TextProperties
from odf.text import H, P, Span

from nmtserve.client import Translator
from nmtserve.server.launcher import ServerConfig, TritonServer


def word_file() -> bytes:
    document = docx.Document()
    document.add_heading("The red car costs twelve thousand euros.", 1)
    p = document.add_paragraph("I have three hundred twelve ")
    p.add_run("red apples").bold = True
    p.add_run(". The train leaves at ")
    p.add_run("7:45").italic = True
    p.add_run(".")
    table = document.add_table(rows=2, cols=2)
    table.style = "Table Grid"
    for (row, column), text in {(0, 0): "She bought four small houses.", (0, 1): "We arrive at 17:20.",
                                (1, 0): "The book costs one euro.", (1, 1): "the twenty-first day"}.items():
        table.cell(row, column).text = text
    document.sections[0].header.paragraphs[0].text = "On Tuesday, March 5, 2024, we bought seven chairs."
    document.sections[0].footer.paragraphs[0].text = "Write the number ninety-three."
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def opendocument_text() -> bytes:
    document = OpenDocumentText()
    bold = Style(name="B", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    document.text.addElement(H(outlinelevel=1, text="The red car costs twelve thousand euros."))
    paragraph = P(text="I have three hundred twelve ")
    paragraph.addElement(Span(stylename=bold, text="red apples"))
    paragraph.addText(". The train leaves at 7:45.")
    document.text.addElement(paragraph)
    document.text.addElement(P(text="She bought four small houses. We arrive at 17:20."))
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def main() -> int:
    repository = Path(sys.argv[1])
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "office-render")
    out.mkdir(parents=True, exist_ok=True)
    office = shutil.which("soffice")
    if office is None:
        print("soffice not found: apt-get install --no-install-recommends libreoffice-writer-nogui", file=sys.stderr)
        return 1
    with TritonServer(ServerConfig.on_free_ports(repository)) as server, \
            Translator(server.urls.grpc_address) as translator:
        for name, data in (("letter.docx", word_file()), ("notes.odt", opendocument_text())):
            (out / name).write_bytes(data)
            (out / f"fr-{name}").write_bytes(translator.translate_document(data, filename=name))
    names = [str(out / n) for n in ("letter.docx", "fr-letter.docx", "notes.odt", "fr-notes.odt")]
    for kind in ("pdf", "png"):  # png: the first page
        subprocess.run([office, "--headless", "--convert-to", kind, "--outdir", str(out), *names],
                       check=True, capture_output=True, timeout=600)
    print(f"rendered to {out}: fr-letter.png, fr-notes.png (and the PDFs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
