"""A large Word file against plain text of the same sentences, through translate_document.

    python bench/files.py [--sentences 1000] [--rounds 3] [--repository DIR]

Builds one .docx of ``--sentences`` held-out demo sentences (``test.en``), five to a paragraph,
with a bold run in every paragraph, a heading every 20 paragraphs, a 3-column table of 60 of the
sentences, a header and a footer; and the plain text of the same sentences in the same
paragraphs (blank lines between). Both go to the same served demo model in alternating rounds
(docx, plain, docx, plain...), one request each (the server cuts and batches the sentences).
Reported: seconds per file, pages a minute (a page: 500 words of the source) and the docx/plain
ratio (what reading and writing the package and placing the runs cost over the sentences).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_CHECKPOINT, demo_server, machine, write_json  # noqa: E402

WORDS_PER_PAGE = 500


def build(sentences: list[str]) -> tuple[bytes, str]:
    import docx

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = sentences[0]
    document.sections[0].footer.paragraphs[0].text = sentences[1]
    plain: list[str] = [sentences[0], sentences[1]]
    body, table = sentences[2:-60], sentences[-60:]
    for k in range(0, len(body), 5):
        group = body[k:k + 5]
        if (k // 5) % 20 == 0:
            document.add_heading(group[0], 2)
            plain.append(group[0])
            group = group[1:]
        if not group:
            continue
        paragraph = document.add_paragraph(" ".join(group[:-1]) + (" " if len(group) > 1 else ""))
        paragraph.add_run(group[-1]).bold = True
        plain.append(" ".join(group))
    grid = document.add_table(rows=len(table) // 3, cols=3)
    for i, text in enumerate(table):
        grid.cell(i // 3, i % 3).text = text
        plain.append(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue(), "\n\n".join(plain) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repository", type=Path)
    args = parser.parse_args()
    from nmtserve.client import Translator

    sentences = (DEFAULT_CHECKPOINT / "test.en").read_text(encoding="utf-8").splitlines()[:args.sentences]
    data, text = build(sentences)
    words = sum(len(s.split()) for s in sentences)
    pages = words / WORDS_PER_PAGE
    times: dict[str, list[float]] = {"docx": [], "plain": []}
    with demo_server(args.repository) as server, Translator(server.urls.grpc_address, timeout=3600,
                                                            deadline=3600) as client:
        client.translate_document(text[:2000], "plain")  # warm
        for _ in range(args.rounds):
            for fmt, document in (("docx", data), ("plain", text)):
                start = time.perf_counter()
                client.translate_document(document, fmt)
                times[fmt].append(time.perf_counter() - start)
    result = {"machine": machine(), "sentences": len(sentences), "words": words, "pages": round(pages, 1),
              "docx_bytes": len(data), "plain_bytes": len(text.encode()), "seconds": times,
              "pages_per_minute": {f: round(pages / statistics.median(t) * 60, 1) for f, t in times.items()},
              "docx_over_plain": [round(d / p, 3) for d, p in zip(times["docx"], times["plain"], strict=True)]}
    print(f"{len(sentences)} sentences, {words} words ({pages:.1f} pages of {WORDS_PER_PAGE} words); "
          f"docx {len(data) / 1e3:.0f} KB")
    for fmt, t in times.items():
        print(f"  {fmt:5s} median {statistics.median(t):6.1f} s  ({result['pages_per_minute'][fmt]} pages/min)"
              f"  rounds {', '.join(f'{x:.1f}' for x in t)}")
    print(f"  docx/plain per round: {result['docx_over_plain']}")
    print(f"wrote {write_json('files', result)}")


if __name__ == "__main__":
    main()
