"""The shared data of the toolkit fixtures (tests/fixtures/toolkits/): one small English->French
corpus from nmtserve's demo generator and one joint sentencepiece model, so that every toolkit
trains on the same text and its checkpoint's outputs are comparable.

    python scripts/toolkits/data.py OUT_DIR [--pairs 30000]

writes OUT_DIR/{train,valid,test}.{en,fr} (raw text), OUT_DIR/{train,valid,test}.sp.{en,fr}
(sentencepiece pieces separated by spaces, for toolkits that read pre-tokenized text) and
OUT_DIR/spm.model / spm.vocab. Deterministic for a given --pairs and --seed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import sentencepiece as spm

from nmtserve.demo.corpus import generate_pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pairs", type=int, default=30000, help="training pairs (default 30000)")
    parser.add_argument("--vocab", type=int, default=800, help="sentencepiece vocabulary (default 800)")
    parser.add_argument("--seed", type=int, default=101)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    pairs = generate_pairs(args.pairs + 700, args.seed)
    seen: set[str] = set()
    unique = [p for p in pairs if not (p[0] in seen or seen.add(p[0]))]
    splits = {"test": unique[:200], "valid": unique[200:700], "train": unique[700:]}
    for name, rows in splits.items():
        (out / f"{name}.en").write_text("".join(en + "\n" for en, _ in rows), encoding="utf-8")
        (out / f"{name}.fr").write_text("".join(fr + "\n" for _, fr in rows), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=[str(out / "train.en"), str(out / "train.fr")], model_prefix=str(out / "spm"),
        vocab_size=args.vocab, model_type="unigram", character_coverage=1.0,
        # ids 0..3 are sentencepiece's own; every toolkit builds its own vocabulary of pieces
        pad_id=-1, unk_id=0, bos_id=1, eos_id=2, num_threads=1, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    for name in splits:
        for lang in ("en", "fr"):
            lines = (out / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()
            (out / f"{name}.sp.{lang}").write_text(
                "".join(" ".join(sp.encode(line, out_type=str)) + "\n" for line in lines), encoding="utf-8")
    print(f"{out}: {len(splits['train'])} training pairs, vocabulary {args.vocab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
