"""Inline markup placed by word alignment: tagged sentences with known answers, served.

    python bench/tags.py [--sentences 600] [--seed 11] [--repository DIR]

Exports the demo model (unless ``--repository`` names an exported one), starts the server and
translates ``nmtserve.demo.tagged``'s sentences (HTML and Markdown, one or two inline spans each:
bold, italic, links, strikethrough, spans, nested or apart; their French references carry the
same tags around the words that render the tagged English) as documents through
``translate_document``, and each sentence without markup through ``translate``. The demo model
does not carry placeholders (its export measures it), so the server translates each sentence
without its markup and puts the tags around the target words its decoder's attention aligns to
the tagged source words. Reports, per format and in all: the translations whose text is the
plain sentence's translation, those whose tags are valid (once each, nested or apart), and the
spans whose tags wrap exactly the reference's words (the issue's bar: >= 95 %), counted where the
plain translation equals the reference. Writes bench/results/tags-*.json.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import demo_server, machine, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=600)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--repository", type=Path)
    args = parser.parse_args()
    from nmtserve.client import Translator
    from nmtserve.demo.tagged import score, tagged_examples

    examples = tagged_examples(args.sentences, args.seed)
    with demo_server(args.repository) as server, Translator(server.urls.grpc_address) as client:
        plain = [t.text for t in client.translate([e.plain_source for e in examples])]
        with ThreadPoolExecutor(8) as pool:
            outputs = list(pool.map(lambda e: client.translate_document(e.source, e.format), examples))
    rows: dict[str, dict[str, int]] = {}
    failures = []
    kinds: dict[str, list[int]] = {}  # unit kind -> [exact, spans]
    for example, output, translation in zip(examples, outputs, plain, strict=True):
        placed = score(example, output, translation)
        for key in (example.format, "all"):
            row = rows.setdefault(key, dict.fromkeys(("sentences", "text_kept", "valid", "reference", "spans",
                                                      "spans_exact"), 0))
            row["sentences"] += 1
            row["text_kept"] += placed.text_kept
            row["valid"] += placed.valid
            if placed.reference:
                row["reference"] += 1
                row["spans"] += len(placed.exact)
                row["spans_exact"] += sum(placed.exact)
        if placed.reference:
            for unit, exact in zip(example.units, placed.exact, strict=True):
                kind = kinds.setdefault(unit.kind, [0, 0])
                kind[0] += exact
                kind[1] += 1
        if placed.reference and not all(placed.exact) and len(failures) < 12:
            failures.append({"source": example.source, "expected": example.expected, "got": output})
    print("| format | sentences | text = plain translation | tags valid | plain translation = reference | "
          "spans around exactly the reference's words |")
    print("|---|---|---|---|---|---|")
    for key, r in rows.items():
        print(f"| {key} | {r['sentences']} | {r['text_kept']} ({100 * r['text_kept'] / r['sentences']:.1f}%) | "
              f"{r['valid']} ({100 * r['valid'] / r['sentences']:.1f}%) | {r['reference']} | "
              f"{r['spans_exact']}/{r['spans']} ({100 * r['spans_exact'] / max(r['spans'], 1):.1f}%) |")
    print("by unit: " + ", ".join(f"{k} {e}/{n}" for k, (e, n) in sorted(kinds.items())))
    for f in failures:
        print(f"  {f['source']!r}\n    want {f['expected']!r}\n    got  {f['got']!r}")
    print(f"written {write_json('tags', {'machine': machine(), 'seed': args.seed, 'rows': rows, 'by_unit': kinds, 'failures': failures})}")


if __name__ == "__main__":
    main()
