"""How well WARNING's omission check by alignment and the word / sentence confidence find wrong
translations: an analysis on the PyTorch reference decode, not a speed benchmark.

    python bench/quality_signals.py --checkpoint models/en-fr-numbers [--limit N] [--json OUT]

Every set is decoded as served (beam 4, ``SearchOptions.alignment`` and ``confidence``) and each
translation checked as ``detokenize`` checks it: ``coverage.warning`` with the model's usual length
ratio and score floor (measured on ``test.en`` as the export measures them) and the source words
``coverage.omitted_words`` names from the decoder's alignment (``confidence.covered_words``).

The sets:

* the demo's held-out sets (``test``, ``joined``, ``typed``, ``first``): real decodes. A
  translation **loses content** when it lacks a number of its reference
  (``evaluate.drops_a_number``), or is shorter than its reference and lacks one of the
  reference's content words; it is **exact** when it equals its reference.
* ``adjective``: sentences of ``test.en`` with an adjective the demo never learned put before
  their noun ("I see fifty-three elegant tables."): real decodes; the demo drops the adjective,
  so every translation that lacks it loses content.
* ``dropped``: exact translations of ``test.en`` with one word taken out of the translation
  (a content word of ``coverage.content_units`` -- not a function word, a clitic, a digit or a
  one-letter word -- or a number word: "deux cent" -> "cent"), force-decoded (a target prefix, then EOS) so that the alignment is the model's own
  for that damaged translation; every one loses content.

Reported per set: how many translations that lose content the WARNING flags, and how many exact
ones it flags, as a request with CONFIDENCE gets it ("caught", "exact_flagged": an unsure word
flagged too) and as every request gets it (``_text_only``: the
numbers, the content-word count, the length, the score, degenerate output); the confidence's ROC AUC for exact against
wrong translations, and precision / recall of "low confidence" at each threshold of
``--thresholds``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

from nmtserve import defaults
from nmtserve.confidence import covered_words, sentence_confidence, word_confidences
from nmtserve.coverage import (
    content_units,
    function_words,
    number_words,
    omitted_words,
    usual_length_ratio,
    usual_score_floor,
    warning,
)
from nmtserve.decoding.search import SearchOptions, TargetPrefix
from nmtserve.demo.corpus import NOUNS
from nmtserve.model.checkpoint import load_checkpoint
from nmtserve.model.evaluate import drops_a_number
from nmtserve.model.reference import reference_decode

# Adjectives the demo's corpus never holds (nmtserve.demo.corpus.ADJECTIVES has its own).
UNKNOWN_ADJECTIVES = ("elegant", "ancient", "expensive", "wooden", "beautiful", "heavy", "modern", "tiny",
                      "strange", "famous")
SETS = ("test", "joined", "typed", "first")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def loses_content(translation: str, reference: str) -> bool:
    if drops_a_number(translation, reference):
        return True
    functions = function_words("fr") or frozenset()
    hyp, ref = _words(translation), _words(reference)
    lost = [w for w in (Counter(ref) - Counter(hyp)).elements() if w not in functions and not w.isdigit()]
    return bool(lost) and len(hyp) < len(ref)


def decode(ckpt, sources: list[str], prefixes: list[TargetPrefix] | None = None, batch: int = 48) -> list[dict]:
    out = []
    for start in range(0, len(sources), batch):
        chunk = sources[start:start + batch]
        ids = [ckpt.tokenizer.encode(s) for s in chunk]
        pre = prefixes[start:start + batch] if prefixes else None
        if pre and len(pre) > 1:  # one at a time: each its own length limit
            for one in range(start, start + len(chunk)):
                out += decode(ckpt, sources[one:one + 1], prefixes[one:one + 1])
            continue
        if pre:  # the damaged translation, then EOS: nothing else may follow
            longest = max(len(p.tokens) for p in pre) + 1
            options = SearchOptions(beam_size=defaults.BEAM_SIZE, max_length=longest, alignment=True, confidence=True)
        else:
            options = SearchOptions(beam_size=defaults.BEAM_SIZE, max_length=200, max_length_a=2.0, max_length_b=10,
                                    alignment=True, confidence=True)
        for src_ids, hyps in zip(ids, reference_decode(ckpt.model, ids, options, prefixes=pre), strict=True):
            h = hyps[0]
            out.append({"ids": src_ids, "tokens": h.tokens, "text": ckpt.tokenizer.decode(h.tokens), "score": h.score,
                        "alignment": h.alignment, "logprobs": h.token_logprobs})
    return out


def check(ckpt, source: str, d: dict, ratio: float, floor: float) -> dict:
    tok = ckpt.tokenizer
    s_pieces = tok.source_pieces(d["ids"])
    t_pieces = tok.target_pieces(d["tokens"])
    covered = covered_words(s_pieces, t_pieces, d["alignment"])
    omitted = omitted_words(source, covered, "en", d["text"], "fr")
    words_min = word_confidences(t_pieces, d["logprobs"], "min")
    return {
        "warning_text": warning(source, d["text"], "en", "fr", ratio, d["score"], floor),
        "warning": warning(source, d["text"], "en", "fr", ratio, d["score"], floor, word_confidence=words_min),
        "omitted": omitted,
        "covered": sorted(covered),
        "sentence": sentence_confidence(d["logprobs"]),
        "words_min": words_min,
        "words_mean": word_confidences(t_pieces, d["logprobs"], "mean"),
    }


def auc(good: list[float], bad: list[float]) -> float:
    """P(a wrong translation's confidence < an exact one's), ties half."""
    if not good or not bad:
        return float("nan")
    ranked = sorted([(v, 1) for v in good] + [(v, 0) for v in bad])
    # Mann-Whitney U with average ranks
    ranks: dict[float, float] = {}
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        ranks[ranked[i][0]] = (i + j + 1) / 2
        i = j
    rank_sum = sum(ranks[v] for v in good)
    return (rank_sum - len(good) * (len(good) + 1) / 2) / (len(good) * len(bad))


def confidence_figures(rows: list[dict], thresholds: list[float]) -> dict:
    """Exact (hyp == ref) against wrong (anything else) translations, by three scores: the
    sentence's confidence, its lowest word confidence by the pieces' minimum, by their mean."""
    out = {}
    for key, score in (("sentence", lambda r: r["sentence"]), ("lowest_word_min", lambda r: min(r["words_min"], default=1.0)),
                       ("lowest_word_mean", lambda r: min(r["words_mean"], default=1.0))):
        good = [score(r) for r in rows if r["exact"]]
        bad = [score(r) for r in rows if not r["exact"]]
        figures = {"auc": round(auc(good, bad), 4), "exact": len(good), "wrong": len(bad)}
        for t in thresholds:
            flagged_bad = sum(v < t for v in bad)
            flagged_good = sum(v < t for v in good)
            flagged = flagged_bad + flagged_good
            figures[f"<{t}"] = {"precision": round(flagged_bad / flagged, 3) if flagged else None,
                                "recall": round(flagged_bad / len(bad), 3) if bad else None,
                                "exact_flagged": flagged_good}
        out[key] = figures
    return out


def adjective_set(ckpt, n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """``n`` sentences of test.en with an unknown adjective before their noun, and the adjective."""
    nouns = {w for noun in NOUNS for w in (noun.en, noun.en_plural)}
    sources, adjectives = [], []
    for line in (Path(ckpt.path) / "test.en").read_text().splitlines():
        words = line.split()
        at = [i for i, w in enumerate(words) if re.sub(r"\W", "", w.lower()) in nouns]
        if not at:
            continue
        adjective = rng.choice(UNKNOWN_ADJECTIVES)
        words.insert(at[0], adjective)
        sources.append(" ".join(words))
        adjectives.append(adjective)
        if len(sources) == n:
            break
    return sources, adjectives


def dropped_set(ckpt, sources: list[str], decoded: list[dict], references: list[str], n: int,
                rng: random.Random) -> tuple[list[str], list[TargetPrefix]]:
    """Exact translations with one content word (not a function word, not a number) taken out."""
    vocabulary = number_words("fr") or (frozenset(), frozenset())
    numbers = vocabulary[0] - vocabulary[1]  # not the joiners: "et" alone is no number
    out_sources, prefixes = [], []
    for source, d, ref in zip(sources, decoded, references, strict=True):
        if d["text"] != ref:
            continue
        words = ref.split()
        content = {i for unit in content_units(ref, "fr") for i in unit}
        candidates = [i for i, w in enumerate(words) if len(plain := re.sub(r"[^\w'-]", "", w.lower())) > 1
                      and (i in content or all(p in numbers for p in plain.split("-") if p))]
        if not candidates:
            continue
        i = rng.choice(candidates)
        damaged = " ".join(words[:i] + words[i + 1:])
        if i == len(words) - 1:  # keep the full stop
            damaged = damaged.rstrip(".") + "." if ref.endswith(".") else damaged
        tokens = ckpt.tokenizer.encode_target(damaged)[:-1]
        if ckpt.tokenizer.decode(tokens) != damaged:
            continue
        out_sources.append(source)
        prefixes.append(TargetPrefix(tuple(tokens)))
        if len(out_sources) == n:
            break
    return out_sources, prefixes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=Path("models/en-fr-numbers"))
    parser.add_argument("--limit", type=int, default=0, help="sentences per set (0: all)")
    parser.add_argument("--thresholds", default="0.3,0.4,0.5,0.6")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()
    ckpt = load_checkpoint(args.checkpoint)
    ckpt.path = args.checkpoint
    thresholds = [float(t) for t in args.thresholds.split(",")]
    rng = random.Random(48)

    test = (args.checkpoint / "test.en").read_text().splitlines()
    test_ref = (args.checkpoint / "test.fr").read_text().splitlines()
    test_decoded = decode(ckpt, test)
    ratio = usual_length_ratio(test, [d["text"] for d in test_decoded])
    floor = usual_score_floor([d["score"] for d in test_decoded])
    print(f"length ratio {ratio}, score floor {floor}")

    report, everything = {}, {}
    for name in (*SETS, "adjective", "dropped"):
        if name in SETS:
            sources = (args.checkpoint / f"{name}.en").read_text().splitlines()
            references = (args.checkpoint / f"{name}.fr").read_text().splitlines()
            if args.limit:
                sources, references = sources[:args.limit], references[:args.limit]
            decoded = test_decoded[:len(sources)] if name == "test" else decode(ckpt, sources)
        elif name == "adjective":
            sources, adjectives = adjective_set(ckpt, args.limit or 200, rng)
            decoded = decode(ckpt, sources)
            references = [None] * len(sources)
        else:
            sources, prefixes = dropped_set(ckpt, test, test_decoded, test_ref, args.limit or 300, rng)
            decoded = decode(ckpt, sources, prefixes)
            # The decode may go on by one piece after the prefix and put the word back ("le
            # nombre" + "douze"): such a translation is whole, and left out of the set.
            damaged = [ckpt.tokenizer.decode(list(p.tokens)) for p in prefixes]
            kept = [k for k, d in enumerate(decoded) if d["text"] == damaged[k]]
            print(f"dropped: {len(sources) - len(kept)} of {len(sources)} decodes put the word back, left out")
            sources, decoded = [sources[k] for k in kept], [decoded[k] for k in kept]
            references = [None] * len(sources)
        rows = []
        for k, (source, d, ref) in enumerate(zip(sources, decoded, references, strict=True)):
            row = {"source": source, "translation": d["text"], "reference": ref, **check(ckpt, source, d, ratio, floor)}
            if name == "adjective":
                row["loses"], row["exact"] = True, False
                row["adjective"] = adjectives[k]
            elif name == "dropped":
                row["loses"], row["exact"] = True, False
            else:
                row["loses"], row["exact"] = loses_content(d["text"], ref), d["text"] == ref
            rows.append(row)
        loses = [r for r in rows if r["loses"]]
        exact = [r for r in rows if r["exact"]]
        figures = {
            "sentences": len(rows), "loses_content": len(loses),
            "caught": sum(bool(r["warning"]) for r in loses), "caught_text_only": sum(bool(r["warning_text"]) for r in loses),
            "exact": len(exact), "exact_flagged": sum(bool(r["warning"]) for r in exact),
            "exact_flagged_text_only": sum(bool(r["warning_text"]) for r in exact),
            "missed": [(r["source"], r["translation"]) for r in loses if not r["warning"]][:8],
            "false_flags": [(r["source"], r["translation"], r["warning"]) for r in exact if r["warning"]][:8],
        }
        if name == "adjective":
            # MISSING_WORDS' precision: sentences where it names something, and where that holds the adjective
            figures["missing_words_named"] = sum(bool(r["omitted"]) for r in rows)
            figures["adjective_named"] = sum(any(r["source"].split()[i] == r["adjective"] for i in r["omitted"])
                                             for r in rows)
        if name in SETS:
            figures["confidence"] = confidence_figures(rows, thresholds)
        report[name] = figures
        everything[name] = rows
        print(name, json.dumps(figures, ensure_ascii=False, indent=1), flush=True)
    pooled = [r for name in SETS for r in everything[name]]
    report["pooled_confidence"] = confidence_figures(pooled, thresholds)
    print("pooled confidence (held-out sets)", json.dumps(report["pooled_confidence"], indent=1))
    if args.json:
        args.json.write_text(json.dumps({"report": report, "rows": everything}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
