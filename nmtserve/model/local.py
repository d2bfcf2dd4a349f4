"""``nmtserve translate --checkpoint DIR``: the PyTorch reference decode, no server."""

from __future__ import annotations

import argparse
import fileinput
import json
import sys

from .. import defaults
from ..decoding.search import SearchOptions
from .checkpoint import load_checkpoint
from .reference import translate


def translate_local(args: argparse.Namespace) -> int:
    ckpt = load_checkpoint(args.checkpoint)
    beam = args.beam_size or defaults.BEAM_SIZE
    options = SearchOptions(
        beam_size=beam,
        num_hypotheses=args.nbest,
        length_penalty=1.0 if args.length_penalty is None else args.length_penalty,
        max_length=args.max_length or min(256, ckpt.config.max_positions),
        max_length_a=0.0 if args.max_length else 2.0,
        max_length_b=None if args.max_length else 10,
    )
    lines = [line.rstrip("\n") for line in fileinput.input(args.files or ["-"], encoding="utf-8")]
    todo = [i for i, line in enumerate(lines) if line.strip()]
    results = translate(ckpt.model, ckpt.tokenizer, [lines[i].strip() for i in todo], options, batch_size=args.batch_size)
    by_line = dict(zip(todo, results, strict=True))
    out = sys.stdout
    for i, line in enumerate(lines):
        nbest = by_line.get(i, [])
        if args.json:
            out.write(json.dumps({
                "source": line, "translation": nbest[0][0] if nbest else "",
                "score": nbest[0][1] if nbest else None,
                **({"nbest": [{"translation": t, "score": s} for t, s in nbest]} if args.nbest > 1 else {}),
            }, ensure_ascii=False) + "\n")
        else:
            out.write((nbest[0][0] if nbest else "") + "\n")
    return 0
