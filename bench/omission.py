"""How well the served WARNING (nmtserve.coverage) finds translations that leave content out.

    python bench/omission.py --checkpoint models/en-fr-numbers --sets DIR [--sets-from OTHER_CHECKPOINT]

Decodes a held-out set (``joined.en`` / ``joined.fr`` by default: clauses joined with "and",
lists, run-on lines, dates, demo/joined.py) with each checkpoint given (PyTorch reference decode,
beam 4, as served) and checks every translation as the server does: ``coverage.warning`` with
the model's usual length ratio and score floor measured as the export measures them (on its
``test.en``).

A translation **drops content** when it leaves out a number of its reference
(``evaluate.drops_a_number``) or at least ``MIN_LOST_WORDS`` of the reference's words (a
multiset difference of lower-cased words) while being that many words shorter: a wrong
agreement or a wrong word is not a drop. Reported per checkpoint and pooled: how many drops the
warning catches (target >= 90 %) and how many exact translations it flags (target <= 2 %).
A weaker checkpoint (the demo before it learned joined clauses) gives the drops to catch; the
current one gives the right translations that must pass.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from nmtserve import defaults
from nmtserve.coverage import usual_length_ratio, usual_score_floor, warning
from nmtserve.decoding.search import SearchOptions
from nmtserve.model.checkpoint import load_checkpoint
from nmtserve.model.evaluate import drops_a_number
from nmtserve.model.reference import translate

MIN_LOST_WORDS = 2


def drops_content(translation: str, reference: str) -> bool:
    if drops_a_number(translation, reference):
        return True
    hyp, ref = re.findall(r"\w+", translation.lower()), re.findall(r"\w+", reference.lower())
    lost = sum((Counter(ref) - Counter(hyp)).values())
    return lost >= MIN_LOST_WORDS and len(ref) - len(hyp) >= MIN_LOST_WORDS


def _decode(ckpt, sources: list[str]) -> list[tuple[str, float]]:
    options = SearchOptions(beam_size=defaults.BEAM_SIZE, max_length=200, max_length_a=2.0, max_length_b=10)
    return [n[0] for n in translate(ckpt.model, ckpt.tokenizer, sources, options, batch_size=64)]


def measure(checkpoint: Path, sets: Path, name: str) -> dict:
    ckpt = load_checkpoint(checkpoint)
    test = (checkpoint / "test.en").read_text().splitlines()
    decoded = _decode(ckpt, test)
    ratio = usual_length_ratio(test, [t for t, _ in decoded])
    floor = usual_score_floor([s for _, s in decoded])
    sources = (sets / f"{name}.en").read_text().splitlines()
    references = (sets / f"{name}.fr").read_text().splitlines()
    out = _decode(ckpt, sources)
    drops = flagged_drops = exact = flagged_exact = 0
    missed, false = [], []
    for source, (hyp, score), ref in zip(sources, out, references, strict=True):
        flag = warning(source, hyp, "en", "fr", ratio, score, floor)
        if drops_content(hyp, ref):
            drops += 1
            flagged_drops += bool(flag)
            if not flag and len(missed) < 10:
                missed.append((source, hyp, ref))
        if hyp == ref:
            exact += 1
            flagged_exact += bool(flag)
            if flag and len(false) < 10:
                false.append((source, hyp, flag))
    return {"checkpoint": str(checkpoint), "set": name, "sentences": len(sources), "length_ratio": ratio, "score_floor": floor,
            "drops": drops, "drops_flagged": flagged_drops, "exact": exact, "exact_flagged": flagged_exact,
            "missed": missed, "false_flags": false}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", action="append", type=Path, required=True, help="repeat for several")
    parser.add_argument("--sets", type=Path, required=True, help="the directory holding NAME.en / NAME.fr")
    parser.add_argument("--set", action="append", help="repeat for several (default: joined)")
    args = parser.parse_args()
    results = [measure(c, args.sets, name) for c in args.checkpoint for name in args.set or ["joined"]]
    for r in results:
        print(json.dumps(r, ensure_ascii=False, indent=1))
    drops, caught = sum(r["drops"] for r in results), sum(r["drops_flagged"] for r in results)
    exact, false = sum(r["exact"] for r in results), sum(r["exact_flagged"] for r in results)
    print(f"pooled: caught {caught}/{drops} translations that drop content ({caught / max(1, drops):.1%}); "
          f"flagged {false}/{exact} exact translations ({false / max(1, exact):.1%})")


if __name__ == "__main__":
    main()
