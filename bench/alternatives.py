"""Which n-best hypotheses are worth offering: score gaps and junk on the demo's held-out sets.

    python bench/alternatives.py [--repository DIR] [--sets test,typed,joined,first] [--fresh]

Exports the demo model (unless ``--repository`` names an exported one), starts the server and
translates every held-out set beside the checkpoint (test, typed, joined, first) and the README's
sentences with beam 4 and num_hypotheses 4, asking the client for the raw n-best
(``all_hypotheses=True``; cached in ``bench/results/alternatives-nbest-<weights>-<sets>.json``,
``--fresh`` asks again). Each alternative (ranks 1-3) is put in the first class that fits, by
signals that do not look at its score:

* ``reference``: it is the reference translation (case, spaces, punctuation aside) and the best
  is not: the right translation, offered second. Real.
* ``duplicate``: the best's text, or an earlier hypothesis's, but for case, spaces, punctuation.
* ``garbled``: a pair of adjacent tokens (words, digits, punctuation) that no French sentence of
  the checkpoint's held-out files has (a broken word "trainerme", a glued fragment ". 6" of
  "pommes.6 pommes", "le unième"), a pair of adjacent words repeated more often than in the
  reference ("Le train clés Le train part"), or under half / over twice the best's length.
* ``numbers``: other numbers than the reference's (digit runs, French number words:
  ``nmtserve.alternatives.numbers``), or one of the source's lost (``coverage.missing_numbers``).
* ``meaning``: fluent and the reference's numbers, but other words than the reference's
  ("chats" for "chiens", "noires" for "grises"). The corpus generator writes one translation
  per sentence, so another word is another meaning (or a mistake).
* ``variant``: the reference's words in another form or order. Real.

Junk: duplicate, garbled, numbers, meaning. Reports, per rank, the score gap to the best (scores
are length-normalised log-probabilities) and the classes; per gap bin, the classes; per margin,
what ``nmtserve.alternatives`` keeps (the full rule with the target language known, as the
gateway runs it; without it, as the client runs it for a repository exported without a pair; the
margin alone; a ratio to the best's score instead of a margin), with the junk among what it
keeps; the README's sentences, hypothesis by hypothesis. Writes
``bench/results/alternatives-*.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    RESULTS,
    checkpoint_id,
    demo_server,
    machine,
    markdown_table,
    percentile,
    write_json,
)

from nmtserve import alternatives  # noqa: E402
from nmtserve.coverage import missing_numbers  # noqa: E402
from nmtserve.demo.showcase import SHOWCASE  # noqa: E402

SETS = ("test", "typed", "joined", "first")
BEAM, K = 4, 4
MARGINS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, math.inf)
RATIOS = (1.25, 1.5, 2.0, 3.0)  # alternative's score >= best's score * ratio (scores are < 0)
GAP_BINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, math.inf)
CLASSES = ("reference", "variant", "duplicate", "garbled", "numbers", "meaning")
REAL = ("reference", "variant")
# The sentences the README and docs/gateway.md show with alternatives, with their references.
README_SENTENCES = (
    ("the first day", "le premier jour"),
    ("The train leaves at 7:45.", "Le train part à 7 h 45."),
    ("I have twenty apples.", "J'ai vingt pommes."),
    *SHOWCASE,
)
LANGUAGES = ("en", "fr")

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"[^\W_]+")


def bigrams(text: str) -> list[tuple[str, str]]:
    t = _TOKEN.findall(text.lower())
    return list(zip(t, t[1:], strict=False))


def classify(record: dict, rank: int, known: set) -> str:
    texts, source, reference = record["texts"], record["source"], record["reference"]
    alt, best, key = texts[rank], texts[0], alternatives.key
    if key(alt) == key(reference) != key(best):
        return "reference"
    if key(alt) in {key(t) for t in texts[:rank]}:
        return "duplicate"
    pairs = Counter(p for p in bigrams(alt) if all(w.isalnum() for w in p))
    ref_pairs = Counter(p for p in bigrams(reference) if all(w.isalnum() for w in p))
    if (any(b not in known for b in bigrams(alt)) or any(n > 1 and n > ref_pairs[p] for p, n in pairs.items())
            or not 0.5 <= len(alt) / max(len(best), 1) <= 2.0):
        return "garbled"
    if (alternatives.numbers(alt, LANGUAGES[1]) != alternatives.numbers(reference, LANGUAGES[1])
            or missing_numbers(source, alt, *LANGUAGES)):
        return "numbers"
    if Counter(_WORD.findall(alt.casefold())) != Counter(_WORD.findall(reference.casefold())):
        return "meaning"
    return "variant"


def judge(records: list[dict], known: set) -> list[dict]:
    """One row per alternative: its set, rank, gap to the best, class."""
    return [{"set": r["set"], "rank": rank, "gap": r["scores"][0] - r["scores"][rank], "class": classify(r, rank, known),
             "record": r} for r in records for rank in range(1, len(r["texts"]))]


RULES = {
    # name -> (kept ranks of a record at a threshold)
    "rule, target language known (gateway)": lambda r, m: alternatives.plausible(
        r["texts"], r["scores"], r["source"], margin=m, source_language=LANGUAGES[0], target_language=LANGUAGES[1])[1:],
    "rule, no language (client, unnamed pair)": lambda r, m: alternatives.plausible(
        r["texts"], r["scores"], r["source"], margin=m)[1:],
    "margin alone": lambda r, m: [i for i in range(1, len(r["texts"])) if r["scores"][i] >= r["scores"][0] - m],
    "rule (gateway) with a ratio, not a margin": lambda r, m: [
        i for i in alternatives.plausible(r["texts"], r["scores"], r["source"], margin=math.inf,
                                          source_language=LANGUAGES[0], target_language=LANGUAGES[1])[1:]
        if r["scores"][i] >= r["scores"][0] * m],
}


def threshold_table(records: list[dict], rows: list[dict]) -> list[dict]:
    by_place = {(id(row["record"]), row["rank"]): row for row in rows}
    real_total = sum(row["class"] in REAL for row in rows)
    out = []
    for name, kept_of in RULES.items():
        for threshold in RATIOS if "ratio" in name else MARGINS:
            classes: Counter = Counter()
            sentences = 0
            for r in records:
                kept = kept_of(r, threshold)
                sentences += bool(kept)
                classes.update(by_place[(id(r), rank)]["class"] for rank in kept)
            kept_n, real = sum(classes.values()), sum(classes[c] for c in REAL)
            out.append({"rule": name, "threshold": threshold, "sentences_with_alternatives": sentences,
                        "kept": kept_n, "real_kept": real, "junk_kept": kept_n - real,
                        "real_dropped": real_total - real, "junk_share_kept": round((kept_n - real) / kept_n, 3) if kept_n else 0.0,
                        "classes": {c: classes[c] for c in CLASSES if classes[c]}})
    return out


def collect(repository: Path | None, sets: list[str], cache: Path, fresh: bool) -> list[dict]:
    if cache.is_file() and not fresh:
        return json.loads(cache.read_text())
    from nmtserve.client import Translator

    inputs = []
    for name in sets:
        sources = (DEFAULT_CHECKPOINT / f"{name}.en").read_text(encoding="utf-8").splitlines()
        refs = (DEFAULT_CHECKPOINT / f"{name}.fr").read_text(encoding="utf-8").splitlines()
        inputs += [(name, s, f) for s, f in zip(sources, refs, strict=True)]
    inputs += [("readme", s, f) for s, f in README_SENTENCES]
    with demo_server(repository) as server, Translator(server.urls.grpc_address, batch_size=64) as client:
        done = client.translate([s for _, s, _ in inputs], beam_size=BEAM, num_hypotheses=K, all_hypotheses=True)
    records = [{"set": name, "source": s, "reference": f, "texts": [h.text for h in t.hypotheses],
                "scores": [h.score for h in t.hypotheses]} for (name, s, f), t in zip(inputs, done, strict=True)]
    cache.write_text(json.dumps(records, ensure_ascii=False) + "\n")
    return records


def _count(rows: list[dict]) -> dict:
    found = Counter(row["class"] for row in rows)
    return {c: found[c] for c in CLASSES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--fresh", action="store_true", help="ask the server again (no cached n-best)")
    args = parser.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    RESULTS.mkdir(parents=True, exist_ok=True)
    cache = RESULTS / f"alternatives-nbest-{checkpoint_id(DEFAULT_CHECKPOINT)}-{'-'.join(sets)}.json"
    records = collect(args.repository, sets, cache, args.fresh)
    held_out = [r for r in records if r["set"] != "readme"]
    known = {b for path in sorted(DEFAULT_CHECKPOINT.glob("*.fr"))
             for line in path.read_text(encoding="utf-8").splitlines() for b in bigrams(line)}
    rows = judge(held_out, known)

    per_rank = []
    for name in [*sets, "all"]:
        for rank in range(1, K):
            chosen = [row for row in rows if row["rank"] == rank and name in ("all", row["set"])]
            gaps = [row["gap"] for row in chosen]
            per_rank.append({"set": name, "rank": rank, "alternatives": len(chosen),
                             "gap_p10": round(percentile(gaps, 10), 3), "gap_p50": round(percentile(gaps, 50), 3),
                             "gap_p90": round(percentile(gaps, 90), 3), **_count(chosen)})
    bins = [{"gap": f"[{low}, {high})", "alternatives": len(chosen), **_count(chosen)}
            for low, high in zip(GAP_BINS, GAP_BINS[1:], strict=False)
            for chosen in [[row for row in rows if low <= row["gap"] < high]]]
    thresholds = threshold_table(held_out, rows)
    gateway_rule = RULES["rule, target language known (gateway)"]
    kept = [row for row in rows if row["rank"] in gateway_rule(row["record"], alternatives.MARGIN)]

    def show(row: dict) -> dict:
        r = row["record"]
        return {"set": r["set"], "source": r["source"], "reference": r["reference"], "best": r["texts"][0],
                "best_score": r["scores"][0], "alternative": r["texts"][row["rank"]], "gap": round(row["gap"], 3),
                "class": row["class"]}

    readme = []
    for r in records:
        if r["set"] == "readme":
            found = alternatives.verdicts(r["texts"], r["scores"], r["source"], source_language=LANGUAGES[0],
                                          target_language=LANGUAGES[1])
            readme.append({"source": r["source"], "best": r["texts"][0], "score": r["scores"][0],
                           "nbest": [[t, s, v or "kept"] for t, s, v in zip(r["texts"], r["scores"], found, strict=True)],
                           "offered": [t for t, v in zip(r["texts"][1:], found[1:], strict=True) if not v]})
    result = {
        "machine": machine(), "checkpoint": checkpoint_id(DEFAULT_CHECKPOINT), "beam_size": BEAM,
        "num_hypotheses": K, "sets": {name: sum(r["set"] == name for r in held_out) for name in sets},
        "alternatives": len(rows), "classes": _count(rows),
        "best_is_reference": sum(alternatives.key(r["texts"][0]) == alternatives.key(r["reference"]) for r in held_out),
        "per_rank": per_rank, "gap_bins": bins, "thresholds": thresholds, "margin": alternatives.MARGIN,
        "kept_at_margin": [show(r) for r in kept],
        "real": [show(r) for r in rows if r["class"] in REAL],
        "closest_junk": [show(r) for r in sorted(rows, key=lambda r: r["gap"]) if r["class"] not in REAL][:40],
        "readme": readme,
    }
    print(f"{len(held_out)} held-out sentences (best = reference: {result['best_is_reference']}), "
          f"{len(rows)} alternatives (ranks 1-{K - 1}): {result['classes']}")
    print("\nscore gap to the best, per rank\n")
    print(markdown_table(["set", "rank", "alternatives", "gap p10", "gap p50", "gap p90", *CLASSES],
                         [[p["set"], p["rank"], p["alternatives"], p["gap_p10"], p["gap_p50"], p["gap_p90"],
                           *(p[c] for c in CLASSES)] for p in per_rank]))
    print("\nper gap bin\n")
    print(markdown_table(["gap", "alternatives", *CLASSES], [[b["gap"], b["alternatives"], *(b[c] for c in CLASSES)]
                                                              for b in bins]))
    print("\nwhat each rule keeps (threshold: a margin under the best's score, or a ratio to it)\n")
    print(markdown_table(["rule", "threshold", "sentences with alternatives", "kept", "real kept", "junk kept",
                          "real dropped", "junk share kept"],
                         [[t["rule"], t["threshold"], t["sentences_with_alternatives"], t["kept"], t["real_kept"],
                           t["junk_kept"], t["real_dropped"], t["junk_share_kept"]] for t in thresholds]))
    print(f"\nkept at the margin {alternatives.MARGIN} (gateway rule):")
    for row in result["kept_at_margin"]:
        print(f"  {row['class']:9s} {row['gap']:.3f} {row['source'][:50]!r} -> {row['best'][:50]!r} | {row['alternative'][:60]!r}")
    print("\nthe README's sentences:")
    for r in readme:
        print(f"  {r['source']!r} -> {r['best']!r} ({r['score']}) offered {r['offered']}")
        for t, s, v in r["nbest"][1:]:
            print(f"      {s:8.3f} {v:8s} {t!r}")
    print(f"written {write_json('alternatives', result)}")


if __name__ == "__main__":
    main()
