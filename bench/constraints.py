"""Terminology constraints on the demo model: do the terms get in, what happens to the rest of
the sentence, and what they cost.

    python bench/constraints.py [--sentences 300] [--rounds 3]

A set is generated from the held-out sentences (``test.en``): each sentence whose unconstrained
translation holds a word of ``SUBSTITUTES`` (a French noun) is constrained to another rendering
(another noun the model knows, of the same gender), so the model must write something it would
not have. Reported:

* term coverage: constrained translations holding their term (the target is 100%);
* exact match against the unconstrained translation with the word substituted: how much of the
  rest of the sentence survived;
* the cost: the same sentences decoded with and without constraints in alternating rounds, in
  one run (PyTorch reference decode, beam 4, 1 thread), bulk (batches of 32) and one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

import torch

from nmtserve.decoding.constraints import Constraint
from nmtserve.decoding.search import SearchOptions
from nmtserve.model.checkpoint import load_checkpoint
from nmtserve.model.reference import reference_decode

ROOT = Path(__file__).resolve().parents[1]
# A word of the model's translation -> the term it must write instead: another noun the model
# knows, of the same gender (French adjectives agree), so that the rest of the sentence can stay.
SUBSTITUTES = {
    "voitures": ["maisons"], "maisons": ["chaises"], "chaises": ["tables"], "tables": ["pommes"],
    "pommes": ["clés"], "clés": ["bouteilles"], "bouteilles": ["voitures"],
    "livres": ["stylos"], "stylos": ["sacs"], "sacs": ["chiens"], "chiens": ["chevaux"], "chevaux": ["livres"],
}


def cpu_flags() -> str:
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    wanted = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"]
    return " ".join(f for f in wanted if f in flags)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "models" / "en-fr-numbers")
    parser.add_argument("--sentences", type=int, default=300, help="constrained sentences at most")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ckpt = load_checkpoint(args.checkpoint)
    tok = ckpt.tokenizer
    opts = SearchOptions(beam_size=4, max_length=128, max_length_a=2.0, max_length_b=10)
    sources = (args.checkpoint / "test.en").read_text(encoding="utf-8").splitlines()
    ids = [tok.encode(s) for s in sources]
    free = []
    for start in range(0, len(ids), 32):
        free += [r[0] for r in reference_decode(ckpt.model, ids[start:start + 32], opts)]
    texts = [tok.decode(h.tokens) for h in free]
    chosen, terms, expected = [], [], []
    for i, text in enumerate(texts):
        for word, subs in SUBSTITUTES.items():
            if re.search(rf"\b{word}\b", text):
                chosen.append(i)
                terms.append((Constraint(tuple(tuple(tok.encode_target(s)[:-1]) for s in subs)),))
                expected.append([re.sub(rf"\b{word}\b", s, text, count=1) for s in subs])
                break
        if len(chosen) == args.sentences:
            break
    src = [ids[i] for i in chosen]
    got = []
    for start in range(0, len(src), 32):
        got += [r[0] for r in reference_decode(ckpt.model, src[start:start + 32], opts,
                                              constraints=terms[start:start + 32])]
    out = [tok.decode(h.tokens) for h in got]
    covered = sum(any(re.search(rf"\b{re.escape(s)}\b", o) for s in SUBSTITUTES[w])
                  for o, w in zip(out, [next(w for w in SUBSTITUTES if re.search(rf"\b{w}\b", texts[i])) for i in chosen],
                                      strict=True))
    exact = sum(o in e for o, e in zip(out, expected, strict=True))
    met = sum(h.constraints_met == 1 for h in got)
    print(f"CPU: {cpu_flags()}, load {os.getloadavg()[0]:.2f}")
    print(f"{len(chosen)} constrained sentences of {len(sources)}: term present {covered}/{len(chosen)}, "
          f"constraints_met {met}/{len(chosen)}, exact match with the word substituted {exact}/{len(chosen)}")
    for o, e in list(zip(out, expected, strict=True))[:5]:
        print(f"  {o!r}  (expected {e[0]!r})")

    def timed(constrained: bool, batch: int) -> float:
        t0 = time.perf_counter()
        for start in range(0, len(src), batch):
            reference_decode(ckpt.model, src[start:start + batch], opts,
                             constraints=terms[start:start + batch] if constrained else None)
        return time.perf_counter() - t0

    rows = {}
    for name, batch in (("bulk (batches of 32)", 32), ("one sentence at a time", 1)):
        free_t, cons_t = [], []
        for _ in range(args.rounds):  # alternating: the machine's speed drifts
            free_t.append(timed(False, batch))
            cons_t.append(timed(True, batch))
        rows[name] = (statistics.median(free_t), statistics.median(cons_t))
        print(f"{name}: free {rows[name][0]:.2f} s, constrained {rows[name][1]:.2f} s "
              f"({rows[name][1] / rows[name][0]:.2f}x), {len(src)} sentences, median of {args.rounds} rounds")
    result = {"sentences": len(chosen), "covered": covered, "met": met, "exact": exact, "cpu": cpu_flags(),
              "timings": rows}
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"constraints-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
